"""One HTTP/1.1 request and its answer on a kept-alive socket.

:class:`Connection` writes a request as :mod:`http.client` writes it (the
request line, ``Host`` as it computes it, then the headers given, in their
order), but in one ``sendall`` with its body, and reads the answer with a
few ``bytes`` operations instead of :mod:`http.client`'s file object and
:mod:`email` header parser: a result post costs about half the CPU it did
(measured in the README, "Benchmarks").

What it reads: a status line; interim (1xx) answers skipped; headers up to
64 KiB; a body by ``Transfer-Encoding: chunked``, by ``Content-Length``, or
up to the close; none for 204 and 304. A connection is kept for the next
request only when the answer was HTTP/1.1 without ``Connection: close`` and
its body ended exactly where it said.

What it refuses before anything is sent (:class:`Refused`): a URL target
with a space, a control character or a character that is not ASCII; a
header name :mod:`http.client` would refuse; a header value with a line
break (requests refuses those too) or a character outside Latin-1; a
header given both in a :class:`HeaderBlock` and with the request; a port
that is not a number.
"""

from __future__ import annotations

import re
import socket
import ssl
from typing import Dict, List, Mapping, Optional, Tuple, Union

#: The longest status line and header block an answer may have (bytes).
MAX_HEAD = 65536
#: How much one ``recv`` asks for.
RECV_SIZE = 65536

_NO_BODY = (204, 304)
_EXPECT_BODY = ("PATCH", "POST", "PUT")  # a Content-Length (0) even without a body, as http.client sends
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_TARGET_FORBIDDEN = re.compile(r"[\x00-\x20\x7f]")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_NAME = re.compile(r"[^:\s][^:\r\n]*")  # as http.client takes a header name


class Refused(ValueError):
    """The request cannot be written as given (nothing was sent)."""


class ProtocolError(OSError):
    """The answer is not HTTP/1.x as this reader takes it (the connection is closed)."""


def host_port(netloc: str, default_port: int) -> Tuple[str, int]:
    """``(host, port)`` of ``host[:port]`` or ``[v6][:port]``, as :mod:`http.client` splits it."""
    colon, bracket = netloc.rfind(":"), netloc.rfind("]")
    host, port = netloc, default_port
    if colon > bracket:
        host, digits = netloc[:colon], netloc[colon + 1:]
        if digits:
            if not (digits.isascii() and digits.isdigit()) or len(digits) > 5:
                raise Refused(f"the port is not a number: {digits!r}")
            port = int(digits)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def host_header(host: str, port: int, default_port: int) -> str:
    """The ``Host`` value :mod:`http.client` sends for ``host`` and ``port``."""
    try:
        name = host.encode("ascii")
    except UnicodeEncodeError:
        try:
            name = host.encode("idna")
        except UnicodeError as exc:
            raise Refused(f"the host cannot be encoded: {exc}") from exc
    if b":" in name:  # an IPv6 address, bracketed, without its zone
        name = b"[" + name.split(b"%", 1)[0] + b"]"
    text = name.decode("ascii")
    return text if port == default_port else f"{text}:{port}"


def _header_lines(headers: Mapping[str, Union[str, bytes]]) -> bytes:
    """``name: value\\r\\n`` for each header, in order, or :class:`Refused`."""
    lines = []
    for name, value in headers.items():
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        value = str(value)
        if not (name.isascii() and _NAME.fullmatch(name)):
            raise Refused(f"invalid header name {name!r}")
        if "\r" in value or "\n" in value:
            raise Refused(f"invalid header value for {name!r}: it has a line break")
        lines.append(f"{name}: {value}\r\n")
    try:
        return "".join(lines).encode("latin-1")
    except UnicodeEncodeError as exc:
        raise Refused(f"a header is not Latin-1: {exc}") from exc


class HeaderBlock:
    """Headers that every request of a kind sends unchanged, checked and encoded once.

    A poster sends the same seven headers with every result: checking and
    encoding them for every post took 6 of the 10 µs it took to write one.
    A block that cannot be written keeps why, and every request that sends
    it is refused with a new :class:`Refused` saying so (one exception
    object raised again and again would gather every raise's frames, from
    every thread, in its traceback).
    """

    __slots__ = ("names", "data", "error")

    def __init__(self, headers: Mapping[str, Union[str, bytes]]) -> None:
        self.names = frozenset(name.lower() for name in headers)
        self.data = b""
        self.error: Optional[str] = None  #: why the block cannot be written, if it cannot
        try:
            self.data = _header_lines(headers)
        except Refused as exc:
            self.error = str(exc)


#: The block of no headers (a request sends only those it is given).
NO_HEADERS = HeaderBlock({})


def request_bytes(method: str, target: str, host: str, headers: Mapping[str, Union[str, bytes]],
                  body: Optional[bytes], fixed: HeaderBlock = NO_HEADERS) -> bytes:
    """The request's bytes on the wire, as :mod:`http.client` writes them, or :class:`Refused`.

    ``Host`` first (unless given), ``Accept-Encoding: identity`` unless one
    is given, ``Content-Length`` when none is given and there is a body or
    the method expects one; then the ``fixed`` headers, then ``headers``,
    each in their order (a name in both is refused).
    """
    if _TARGET_FORBIDDEN.search(target) or not target.isascii():
        raise Refused(f"the URL has a space, a control character or a character that is not ASCII: {target!r}")
    if fixed.error is not None:
        raise Refused(fixed.error)
    given = fixed.names
    if headers:
        names = [name.lower() for name in headers]
        if not given.isdisjoint(names):
            raise Refused(f"a header is given twice: {sorted(given.intersection(names))}")
        given = given.union(names)
    head = f"{method} {target} HTTP/1.1\r\n"
    if "host" not in given:
        head += f"Host: {host}\r\n"
    if "accept-encoding" not in given:
        head += "Accept-Encoding: identity\r\n"
    if "content-length" not in given and (body is not None or method in _EXPECT_BODY):
        head += f"Content-Length: {len(body or b'')}\r\n"
    try:
        start = head.encode("latin-1")
    except UnicodeEncodeError as exc:  # (a method not Latin-1; the target and host are ASCII)
        raise Refused(f"the request line is not Latin-1: {exc}") from exc
    data = start + fixed.data + _header_lines(headers) + b"\r\n" if headers else start + fixed.data + b"\r\n"
    return data + body if body else data


class Connection:
    """A kept-alive HTTP/1.1 connection to one origin, used by one thread at a time."""

    def __init__(self, netloc: str, tls: Optional[ssl.SSLContext] = None) -> None:
        """``netloc``: ``host[:port]``; ``tls``: the context for HTTPS, None for HTTP."""
        default_port = 443 if tls is not None else 80
        self.host, self.port = host_port(netloc, default_port)
        self.host_header = host_header(self.host, self.port, default_port)
        self._tls = tls
        self.sock: Optional[socket.socket] = None
        self._buffer, self._at = b"", 0

    def connect(self, timeout: float) -> None:
        """Open the connection (and its TLS session) under ``timeout``."""
        sock = socket.create_connection((self.host, self.port), timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self.sock, self._buffer, self._at = sock, b"", 0

    def close(self) -> None:
        """Close the socket (idempotent); the next request opens another."""
        sock, self.sock, self._buffer, self._at = self.sock, None, b"", 0
        if sock is not None:
            sock.close()

    def send(self, data: bytes) -> None:
        """Write a whole request (the socket must be open)."""
        assert self.sock is not None
        self.sock.sendall(data)

    def read_head(self) -> Tuple[int, Dict[str, str], bool]:
        """Read an answer's status line and headers: ``(status, headers, keep_alive)``.

        Lines may end in CRLF or a bare LF, as :mod:`http.client` reads
        them. Interim answers (1xx) are skipped. Raises :class:`OSError` (a
        timeout, a reset, :class:`ProtocolError`) when no head can be read.
        """
        while True:
            lines = self._read_head_lines()
            parts = lines[0].split(None, 2)
            code = parts[1] if len(parts) > 1 else b""
            if (not parts[0].startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit()
                    or code < b"100"):
                raise ProtocolError(f"not an HTTP/1.x status line: {bytes(lines[0][:80])!r}")
            status = int(code)
            if status == 101:  # nothing asked to switch protocols
                raise ProtocolError("the answer switches protocols (101), which no request asked for")
            if status >= 200:
                break  # (1xx answers are interim: 100 Continue, 103 Early Hints; the answer follows)
        headers: Dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                continue
            key = name.strip().decode("latin-1").lower()
            if key not in headers:
                headers[key] = value.strip().decode("latin-1")
        keep_alive = parts[0] == b"HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        return status, headers, keep_alive

    def read_body(self, status: int, headers: Dict[str, str]) -> Tuple[bytes, bool]:
        """Read the body that follows a head: ``(body, ended_cleanly)``.

        Chunked when the last transfer coding is ``chunked``; else as long as
        a ``Content-Length`` that is a number says; else up to the close, as
        :mod:`http.client` reads it. ``ended_cleanly`` is False when the
        body was delimited by the close or bytes followed it: the
        connection cannot be used again.
        """
        if status in _NO_BODY:
            return b"", not self._unread()
        coding = headers.get("transfer-encoding", "")
        if coding and coding.rsplit(",", 1)[-1].strip().lower() == "chunked":
            return self._read_chunked(), not self._unread()
        length = headers.get("content-length", "")
        if length.isascii() and length.isdigit() and len(length) <= 18:
            return self._read_exactly(int(length)), not self._unread()
        return self._read_to_close(), False

    # -- reading: self._buffer[self._at:] is what was received and not yet read --
    def _unread(self) -> bool:
        return len(self._buffer) > self._at

    def _recv(self) -> bytes:
        assert self.sock is not None
        data = self.sock.recv(RECV_SIZE)
        if not data:
            raise ProtocolError("the connection was closed before the answer ended")
        return data

    def _more(self) -> None:
        """Receive more onto what is unread (the read part dropped here, once a receive)."""
        self._buffer, self._at = self._buffer[self._at:] + self._recv(), 0

    def _read_head_lines(self) -> List[bytes]:
        while True:
            found = _HEAD_END.search(self._buffer, self._at)
            if found is not None and found.start() - self._at <= MAX_HEAD:
                head = self._buffer[self._at:found.start()]
                self._at = found.end()
                return [line.rstrip(b"\r") for line in head.split(b"\n")]
            if len(self._buffer) - self._at > MAX_HEAD:
                raise ProtocolError(f"the answer's head is longer than {MAX_HEAD} bytes")
            self._more()

    def _read_exactly(self, size: int) -> bytes:
        have = len(self._buffer) - self._at
        if have >= size:
            start, self._at = self._at, self._at + size
            return self._buffer[start:self._at]
        parts = [self._buffer[self._at:]]  # (a long body: received into parts, copied once)
        self._buffer, self._at = b"", 0
        need = size - have
        while need > 0:
            data = self._recv()
            if len(data) > need:
                parts.append(data[:need])
                self._buffer = data[need:]
                break
            parts.append(data)
            need -= len(data)
        return b"".join(parts)

    def _read_line(self) -> bytes:
        while True:
            end = self._buffer.find(b"\n", self._at)
            if end >= 0:
                line, self._at = self._buffer[self._at:end], end + 1
                return line.rstrip(b"\r")
            if len(self._buffer) - self._at > MAX_HEAD:
                raise ProtocolError("a chunk's size line is too long")
            self._more()

    def _read_chunked(self) -> bytes:
        parts: List[bytes] = []
        while True:
            size_text = self._read_line().split(b";", 1)[0].strip()
            if not (size_text and len(size_text) <= 16 and all(c in _HEX for c in size_text)):
                raise ProtocolError(f"a chunk's size is not hex: {bytes(size_text[:40])!r}")
            size = int(size_text, 16)
            if size == 0:
                while self._read_line():  # trailers, up to the blank line
                    pass
                return b"".join(parts)
            parts.append(self._read_exactly(size))
            if self._read_line():
                raise ProtocolError("a chunk does not end where its size says")

    def _read_to_close(self) -> bytes:
        assert self.sock is not None
        parts = [self._buffer[self._at:]]
        self._buffer, self._at = b"", 0
        while True:
            data = self.sock.recv(RECV_SIZE)
            if not data:
                return b"".join(parts)
            parts.append(data)


__all__ = ["NO_HEADERS", "Connection", "HeaderBlock", "Refused", "ProtocolError", "host_port", "host_header", "request_bytes"]
