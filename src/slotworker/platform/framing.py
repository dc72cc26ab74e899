"""Requests read off one connection of the local platform, framed by h11.

h11 reads every request line, header block, ``Content-Length`` and chunk
(RFC 9112) and refuses what is malformed; nothing here parses any of them.
On top of what h11 refuses, :class:`RequestStream` refuses what h11
accepts but a strict server must not: ``Transfer-Encoding`` together with
``Content-Length`` (h11 lets the coding win; a request a proxy in front
reads by its length could hide another in the body, so aiohttp and nginx
refuse it), an HTTP version other than 1.x, and a body over the
platform's limit, counted as it arrives whatever the framing. Every
refusal is a :class:`FramingError`, after which the connection is closed:
nothing received after a request that could not be read is ever read as a
request. (h11 0.16 or later: earlier ones took any two bytes after a
chunk's data for its CRLF, CVE-2025-43859.)

Each request gets an ``h11.Connection`` of its own, handed the bytes the
last one received past its request (pipelined requests). h11 writes
nothing but the interim ``100 Continue``: the server writes its answers
itself, each in one buffer (see :mod:`.server`). One h11 connection per
socket would need every answer sent through h11 to reach
``start_next_cycle``, and that cost about as much again as h11's reading
of the request (the platform's CPU per result post: 258 µs that way, 176
this way, 92 with the hand-written parser this replaced; 4 alternating
runs of 6,000 posts).
"""

from __future__ import annotations

import socket
import time
from typing import Dict, List, Optional, Tuple

import h11

#: The most bytes of one request's line and headers (h11 answers 431 past it).
MAX_HEAD = 64 * 1024
#: Bytes asked of the socket per read.
RECV_SIZE = 64 * 1024
#: After an answer that closes the connection, how long input is still read
#: and dropped, and how long a silence ends that early. Closing a socket with
#: unread input sends a reset, which can destroy the answer before the client
#: reads it (a 413 to a client still sending its body); nginx lingers so too.
LINGER_SECONDS = 2.0
LINGER_IDLE = 0.5


class FramingError(Exception):
    """A request that cannot be read as HTTP/1.1 allows; ``status`` is its answer.

    The connection closes after that answer.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class RequestHead:
    """What the routes read of one request: method, target, headers, keep-alive.

    ``get`` matches header names without regard to case and answers the
    first of a repeated name; :meth:`as_sent` keeps the names' case as the
    client sent it (h11's ``raw_items``).
    """

    __slots__ = ("method", "target", "http_version", "keep_alive", "content_length", "_raw")

    def __init__(self, method: str, target: str, http_version: str, keep_alive: bool,
                 content_length: Optional[int], raw: List[Tuple[bytes, bytes]]) -> None:
        self.method = method
        self.target = target
        self.http_version = http_version
        self.keep_alive = keep_alive
        #: The declared body length (h11 checked it), None for a chunked body.
        self.content_length = content_length
        self._raw = raw

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:
        """The first value of header ``name`` (any case), else ``default``."""
        key = name.lower().encode("ascii")
        for raw_name, value in self._raw:
            if raw_name.lower() == key:
                return value.decode("latin-1")
        return default

    def as_sent(self) -> Dict[str, str]:
        """Header name (as sent) -> value; of a name sent twice, the last value."""
        return {name.decode("ascii"): value.decode("latin-1") for name, value in self._raw}


#: The interim answer to ``Expect: 100-continue``, sent when the body is first waited for.
_CONTINUE = h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")


def _next_event(conn: h11.Connection) -> object:
    """``conn.next_event()``, with h11's refusal of the input as a FramingError (h11's status)."""
    try:
        return conn.next_event()
    except h11.RemoteProtocolError as exc:
        raise FramingError(exc.error_status_hint, str(exc)[:300]) from None


def _head(event: h11.Request) -> RequestHead:
    """The :class:`RequestHead` of a request h11 has read, or a FramingError for what h11 lets by."""
    version = event.http_version
    if version[:2] != b"1.":
        raise FramingError(505, f"HTTP version {version.decode('ascii')} is not supported")
    raw = event.headers.raw_items()
    length: Optional[int] = None
    chunked = False
    close = version < b"1.1"
    for name, value in raw:
        lower = name.lower()
        if lower == b"content-length":
            length = int(value)  # one run of digits: h11 refused anything else
        elif lower == b"transfer-encoding":
            chunked = True  # "chunked", once: h11 refused any other coding (501)
        elif lower == b"connection" and b"close" in [t.strip() for t in value.lower().split(b",")]:
            close = True
    if chunked and length is not None:
        raise FramingError(400, "both Transfer-Encoding and Content-Length: the body's length is ambiguous")
    if length is None and not chunked:
        length = 0  # a request without either has no body (RFC 9112 6.3)
    return RequestHead(event.method.decode("ascii"), event.target.decode("ascii"),
                       version.decode("ascii"), not close, length, raw)


class RequestStream:
    """The requests on one socket, one after another (pipelined ones in order).

    Call :meth:`next_request`; the route may call :meth:`read_body`; then
    :meth:`finish` before the next request, or :meth:`linger` to close.
    Socket errors (the client gone, the idle timeout) propagate as OSError.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._conn: Optional[h11.Connection] = None
        self._held = b""  # bytes received and not yet given to h11 (pipelined requests)
        self._eof = False
        self._body: Optional[bytes] = None
        self._ended = True  # the request's body has been read to its end
        self._expected: Optional[int] = None  # the declared body length, None when chunked

    def _feed(self, conn: h11.Connection, cap: Optional[int] = None) -> int:
        """Give h11 more input, held bytes first, at most ``cap`` bytes; how many were given."""
        data = self._held
        if data:
            self._held = b""
        elif self._eof:
            conn.receive_data(b"")
            return 0
        else:
            if conn.they_are_waiting_for_100_continue:  # and nothing of the body is here yet
                self._sock.sendall(conn.send(_CONTINUE))
            data = self._sock.recv(RECV_SIZE)
            if not data:
                self._eof = True
                conn.receive_data(b"")
                return 0
        if cap is not None and len(data) > cap:
            data, self._held = data[:cap], data[cap:]
        conn.receive_data(data)
        return len(data)

    def _event(self, conn: h11.Connection) -> object:
        """h11's next event, feeding it while it needs data."""
        while True:
            event = _next_event(conn)
            if event is not h11.NEED_DATA:
                return event
            self._feed(conn)

    def next_request(self) -> Optional[RequestHead]:
        """The next request's head; None when the client closed between requests.

        Raises FramingError for a request that cannot be read.
        """
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self._conn = conn
        self._body = None
        self._ended = False
        # h11 only looks at its limit while an event is incomplete, so a head
        # a little over it, received whole, would pass: h11 is given no more
        # than the limit and one byte until the head is read, and past that
        # says 431 itself. (Given first, not asked for: asking h11 of an empty
        # buffer only to hear NEED_DATA costs a parse attempt.)
        fed = self._feed(conn, MAX_HEAD + 1)
        while True:
            event = _next_event(conn)
            if event is not h11.NEED_DATA:
                break
            if fed > MAX_HEAD:  # h11 has raised already; kept in case it ever does not
                raise FramingError(431, f"the request's head is over {MAX_HEAD} bytes")
            fed += self._feed(conn, MAX_HEAD + 1 - fed)
        if type(event) is h11.ConnectionClosed:
            self._ended = True
            return None
        if type(event) is not h11.Request:  # cannot happen on a fresh connection; refused all the same
            raise FramingError(400, "no request")
        head = _head(event)
        self._expected = head.content_length
        if head.content_length == 0:
            # h11 frames no byte of a body of length 0: its EndOfMessage is
            # a formality, not asked for (the next request gets a fresh
            # h11 connection with the bytes that follow).
            self._ended = True
            self._body = b""
        return head

    def read_body(self, head: RequestHead, limit: int) -> bytes:
        """The request's whole body, at most ``limit`` bytes (413 past it).

        A declared length over the limit is refused before anything is
        read; a chunked body as soon as what arrived passes the limit.
        """
        if self._body is not None:
            return self._body
        if head.content_length is not None and head.content_length > limit:
            raise FramingError(413, f"body of {head.content_length} bytes is over the limit of {limit}")
        self._body = self._read_to_end(limit, keep=True)
        return self._body

    def _read_to_end(self, limit: int, keep: bool) -> bytes:
        conn = self._conn
        assert conn is not None
        parts: List[bytes] = []
        total = 0
        while True:
            event = self._event(conn)
            if type(event) is h11.Data:
                data = event.data
                total += len(data)
                if total > limit:
                    raise FramingError(413, f"body is over the limit of {limit} bytes")
                if keep:
                    parts.append(data)
                if total == self._expected:
                    # The whole declared length came: h11's EndOfMessage
                    # would consume nothing more, so it is not asked for.
                    break
            elif type(event) is h11.EndOfMessage:
                break
            else:  # ConnectionClosed cannot come before EndOfMessage; h11 raises first
                raise FramingError(400, "the request ended early")
        self._ended = True
        return b"".join(parts)

    def finish(self, limit: int) -> bool:
        """End the request after its answer: True when the connection can read the next one.

        A body no route read is read and dropped (still at most ``limit``
        bytes), so that it is never taken for a request. A client still
        waiting for ``100 Continue`` will not send a body to drop: close.
        """
        conn = self._conn
        assert conn is not None
        if not self._ended:
            if conn.they_are_waiting_for_100_continue:
                return False
            try:
                self._read_to_end(limit, keep=False)
            except FramingError:
                return False
        rest = conn.trailing_data[0]
        if rest:
            self._held = rest + self._held
        return True

    def linger(self) -> None:
        """Close gently: no more output, then read and drop input for a while (see LINGER_SECONDS)."""
        sock = self._sock
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return
        deadline = time.monotonic() + LINGER_SECONDS
        scratch = bytearray(RECV_SIZE)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                sock.settimeout(min(remaining, LINGER_IDLE))
                if not sock.recv_into(scratch):
                    return
            except OSError:
                return
