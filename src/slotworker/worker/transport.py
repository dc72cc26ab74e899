"""The worker's HTTP transport: each sending thread's own kept-alive connection, framed by h11.

The worker's requests come from a few long-lived threads: result posts
from the poster threads, takes from the fetch thread, the heartbeat's pings
and the stop channel's polls, each from its own thread. :class:`Transport`
gives every such thread its own persistent connection per origin, so a
request takes no pool lock and finds a warm connection. h11 writes each
request and reads each answer (status line, headers, ``Content-Length``,
chunked or read-to-close bodies, and it refuses what RFC 9112 refuses);
:mod:`zlib` undoes a gzip or deflate answer; :mod:`ssl` checks the
platform's certificate and host name against :mod:`.trust`'s context.

Why not urllib3's pools, the engine under requests: measured on the local
platform, a ping through ``HTTPConnectionPool.urlopen`` cost 300-450 µs of
the client's CPU, about 120-160 µs through this module, and a post is
every job's cost (docs/decisions/transport.md has the numbers).

Every call has a timeout and none is retried here: the fetch loop owns the
takes' backoff and ``deliver()`` is the one retry loop of result posts.
Redirects are never followed, and nothing is read from the environment but
the CA variables: no proxy, no ``.netrc``, so the API key goes only to the
URLs the platform gave. Every answer is read up to a cap, after decoding,
so a gzip bomb cannot grow the worker: over it, :class:`TooLarge`.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import threading
import time
import weakref
import zlib
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import h11

from .trust import HOW_TO_TRUST, is_verification_failure, trust_context

log = logging.getLogger("slotworker")

Timeout = Tuple[float, float]
Header = Tuple[bytes, bytes]

#: Answer times kept for :meth:`Transport.answer_seconds`, and how long (seconds) one counts.
ANSWERS_KEPT = 16
ANSWER_FRESH_SECONDS = 1.0
#: The longest answer head (status line and headers) read, in bytes.
MAX_HEAD = 65536
#: How much one ``recv`` asks for.
RECV_SIZE = 65536

_EXPECT_BODY = ("PATCH", "POST", "PUT")  # a Content-Length (0) even without a body, as http.client sends


class SendFailed(Exception):
    """The request could not be sent or its answer not read (the connection is closed)."""


class BodyLost(SendFailed):
    """The answer's status came but its body could not be read in full."""

    #: The answer's status (0 until the answer's head was read).
    status = 0


class TooLarge(BodyLost):
    """The answer's body (decoded) is longer than the cap for its kind."""


class Untrusted(SendFailed):
    """The platform's certificate or host name did not verify."""


class Refused(ValueError):
    """The request cannot be sent as given (nothing was sent): a header h11 will not write, a bad URL."""


def split_url(url: str) -> Tuple[str, str]:
    """``(scheme://host:port, path?query)`` of an absolute URL, without its fragment."""
    url = url.split("#", 1)[0]  # a fragment is not sent, as requests does not send it
    start = url.find("//") + 2
    end = min((i for i in (url.find("/", start), url.find("?", start)) if i >= 0), default=-1)
    if end < 0:
        return url, "/"
    target = url[end:]
    return url[:end], target if target.startswith("/") else "/" + target


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


def host_header(host: str, port: int, default_port: int) -> bytes:
    """The ``Host`` value :mod:`http.client` (so requests) sends for ``host`` and ``port``."""
    try:
        name = host.encode("ascii")
    except UnicodeEncodeError:
        try:
            name = host.encode("idna")
        except UnicodeError as exc:
            raise Refused(f"the host cannot be encoded: {exc}") from exc
    if b":" in name:  # an IPv6 address, bracketed, without its zone
        name = b"[" + name.split(b"%", 1)[0] + b"]"
    return name if port == default_port else name + b":%d" % port


def encode_headers(headers: Mapping[str, str]) -> List[Header]:
    """``headers`` as h11 takes them (bytes), in order; :class:`Refused` for one that is not Latin-1."""
    try:
        return [(name.encode("ascii"), str(value).encode("latin-1")) for name, value in headers.items()]
    except UnicodeEncodeError as exc:
        raise Refused(f"a header cannot be sent: {exc}") from exc


class _Connection:
    """One kept-alive connection to one origin and its h11 state; used by one thread at a time."""

    __slots__ = ("host", "port", "host_header", "tls", "sock", "http", "__weakref__")

    def __init__(self, netloc: str, tls: Optional[ssl.SSLContext]) -> None:
        default_port = 443 if tls is not None else 80
        self.host, self.port = host_port(netloc, default_port)
        self.host_header = host_header(self.host, self.port, default_port)
        self.tls = tls
        self.sock: Optional[socket.socket] = None
        self.http = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)

    def open(self, timeout: float) -> socket.socket:
        """The socket, connected (and its TLS session made) under ``timeout`` if it was not."""
        sock = self.sock
        if sock is not None and _dropped(sock):
            self.close()
            sock = None
        if sock is None:
            sock = socket.create_connection((self.host, self.port), timeout)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.tls is not None:
                    sock = self.tls.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
            self.sock = sock
            self.http = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        return sock

    def close(self) -> None:
        """Close the socket (idempotent); the next request opens another."""
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()

    def next_cycle(self) -> None:
        """Keep the connection for the next request if h11 says it can be, else close it."""
        http = self.http
        if http.our_state is h11.DONE and http.their_state is h11.DONE:
            http.start_next_cycle()
        else:
            self.close()

    def next_event(self, sock: socket.socket) -> object:
        """The next h11 event of the answer, receiving as needed."""
        http = self.http
        while True:
            event = http.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = sock.recv(RECV_SIZE)
            http.receive_data(data)  # (b"" says the other end closed)


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle kept-alive connection was closed by the other end.

    An idle connection has nothing to read unless the peer closed it (or
    sent something unasked, which makes it unusable too).
    """
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class _Decoder:
    """Undoes the gzip or deflate that an answer says it is in, up to ``cap`` bytes out."""

    def __init__(self, encoding: bytes, cap: int) -> None:
        self.cap = cap
        self.raw_deflate = False
        coding = encoding.strip().lower()
        if coding in (b"gzip", b"x-gzip", b"deflate"):
            self._zlib: Optional["zlib._Decompress"] = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib
        else:
            self._zlib = None
        self.parts: List[bytes] = []
        self.size = 0

    def feed(self, data: bytes) -> None:
        """Decode ``data``; :class:`TooLarge` as soon as the output passes the cap."""
        if self._zlib is None:
            self._keep(data)
            return
        while data:
            try:
                out = self._zlib.decompress(data, self.cap + 1 - self.size)
            except zlib.error as exc:
                if self.size == 0 and not self.raw_deflate:  # raw deflate, as some servers send it
                    self.raw_deflate = True
                    self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise BodyLost(f"the answer's body does not decode: {exc}") from exc
            self._keep(out)  # (output is at most one byte over the cap: that raises)
            if self._zlib.eof and self._zlib.unused_data:  # another gzip member
                data = self._zlib.unused_data
                self._zlib = zlib.decompressobj(zlib.MAX_WBITS | 32)
            else:
                data = b""

    def _keep(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.cap:
            raise TooLarge(f"the answer's body is longer than {self.cap} bytes")
        if data:
            self.parts.append(data)

    def result(self) -> bytes:
        return b"".join(self.parts)


class Answer:
    """What came back: the status, the headers h11 read (lower-case names) and the body, decoded."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Sequence[Header], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def header(self, name: bytes) -> str:
        """The first value of header ``name`` (lower-case), or ``""``."""
        return _first(self.headers, name).decode("latin-1")


class Transport:
    """Each sending thread's own keep-alive connection per origin, for one kind of request.

    One instance per kind of request whose answer times belong together:
    :meth:`answer_seconds` reads the answers of this instance's requests.
    Thread-safe. After :meth:`close`, idle connections are closed at once,
    busy ones when their request ends, and every call fails with
    :class:`SendFailed`.
    """

    def __init__(self, context_factory: Callable[[], ssl.SSLContext] = trust_context) -> None:
        """``context_factory``: makes the TLS context; called once, for the first HTTPS origin."""
        self._context_factory = context_factory
        self._local = threading.local()
        self._lock = threading.Lock()
        # Guarded by _lock: the connections opened (by id; a thread that ends
        # drops its own, and the garbage collector closes them), those in
        # use, whether closed, the TLS context, and whether a certificate
        # that did not verify was told at ERROR (once per transport).
        self._open: Dict[int, "weakref.ReferenceType[_Connection]"] = {}
        self._busy: "set[_Connection]" = set()
        self._closed = False
        self._context: Optional[ssl.SSLContext] = None
        self._told_untrusted = False
        # The last ANSWERS_KEPT answer times, a ring every sending thread
        # writes without a lock: a write lost to a race loses one sample.
        self._answers: List[Optional[Tuple[float, float]]] = [None] * ANSWERS_KEPT  # (when, took)
        self._answer_at = 0

    def request(self, method: str, url: str, headers: Sequence[Header], body: Optional[bytes],
                timeout: Timeout, cap: int) -> Answer:
        """Send one request on the calling thread's connection; its answer, the body at most ``cap`` bytes.

        ``headers`` go out after ``Host`` and ``Content-Length`` (added
        when there is a body or the method expects one), in their order.
        Raises :class:`Refused` when the request cannot be written (nothing
        was sent), :class:`Untrusted` when the certificate does not verify,
        :class:`BodyLost` (or :class:`TooLarge`) when the status came but
        the body could not be read, and :class:`SendFailed` otherwise.
        """
        origin, target = split_url(url)
        conns = self._local.__dict__
        conn: Optional[_Connection] = None
        try:
            with self._lock:
                if self._closed:
                    raise SendFailed("the connections were closed (the worker is stopping)")
                conn = conns.get(origin)
                if conn is None:
                    conns[origin] = conn = self._connection(origin)
                self._busy.add(conn)
            return self._exchange(conn, origin, method, target, headers, body, timeout, cap)
        except Refused:
            raise  # nothing was sent: the connection is as it was
        except BaseException:
            if conn is not None:  # whatever it was doing is unknown: a new one next time
                conn.close()
                conns.pop(origin, None)
            raise
        finally:
            if conn is not None:
                with self._lock:
                    self._busy.discard(conn)
                    closed = self._closed
                if closed:
                    conn.close()

    def answer_seconds(self) -> Optional[float]:
        """How long the platform takes to answer: the least of the last few answers.

        Timed from just before the request is written to its answer's
        headers read. The least, because the time a thread waits for the
        GIL (tens of ms behind hundreds of job threads) only ever adds to
        that. Only answers of the last :data:`ANSWER_FRESH_SECONDS` count,
        so fast ones from before the platform slowed down do not hide it;
        None without any.
        """
        since = time.monotonic() - ANSWER_FRESH_SECONDS
        fresh = [sample[1] for sample in self._answers if sample is not None and sample[0] >= since]
        return min(fresh) if fresh else None

    def close(self) -> None:
        """Close every connection: idle ones now, one in use once its request ends (idempotent)."""
        with self._lock:
            self._closed = True
            alive = [ref() for ref in self._open.values()]
            idle = [conn for conn in alive if conn is not None and conn not in self._busy]
        for conn in idle:
            conn.close()

    # -- internals --------------------------------------------------------------
    def _exchange(self, conn: _Connection, origin: str, method: str, target: str, headers: Sequence[Header],
                  body: Optional[bytes], timeout: Timeout, cap: int) -> Answer:
        head: List[Header] = [(b"Host", conn.host_header)]
        if body is not None or method in _EXPECT_BODY:
            head.append((b"Content-Length", b"%d" % len(body or b"")))
        head.extend(headers)
        try:
            sock = conn.open(timeout[0])
            http = conn.http
            try:
                data = http.send(h11.Request(method=method, target=target.encode("ascii"), headers=head))
                if body:
                    data += http.send(h11.Data(data=body))
                data += http.send(h11.EndOfMessage())
            except (h11.LocalProtocolError, UnicodeEncodeError) as exc:  # a header value with a line break, ...
                conn.close()  # (its h11 state is spent; nothing was sent)
                raise Refused(f"the request cannot be written: {exc}") from exc
            sock.settimeout(timeout[0])
            sent = time.monotonic()  # before writing: a GIL wait after the write only adds
            try:
                sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
                # The platform may answer before it has read the whole body (a
                # 413 for one over its limit) and close: read that answer.
                pass
            sock.settimeout(timeout[1])
            response = conn.next_event(sock)
            while isinstance(response, h11.InformationalResponse):  # 100 Continue, 103 Early Hints
                response = conn.next_event(sock)
            if not isinstance(response, h11.Response):
                raise h11.RemoteProtocolError(f"the connection ended before an answer ({type(response).__name__})")
        except (OSError, h11.ProtocolError) as exc:
            if is_verification_failure(exc):
                self._tell_untrusted(origin, conn.host, exc)
                raise Untrusted(f"the certificate of {origin} did not verify (see the ERROR logged before)") from exc
            raise SendFailed(f"{type(exc).__name__}: {exc}") from exc
        at, answered = self._answer_at, time.monotonic()
        self._answers[at] = (answered, answered - sent)
        self._answer_at = (at + 1) % ANSWERS_KEPT
        answer_headers = response.headers
        decoder = _Decoder(_first(answer_headers, b"content-encoding"), cap)
        try:
            while True:
                event = conn.next_event(sock)
                if isinstance(event, h11.Data):
                    decoder.feed(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    break
                else:  # ConnectionClosed before the body's end
                    raise h11.RemoteProtocolError("the connection was closed before the answer ended")
        except TooLarge as exc:
            conn.close()
            exc.status = response.status_code
            raise
        except (OSError, h11.ProtocolError, BodyLost) as exc:
            conn.close()
            lost = BodyLost(f"the answer's body could not be read: {type(exc).__name__}: {exc}")
            lost.status = response.status_code
            raise lost from exc
        conn.next_cycle()
        return Answer(response.status_code, answer_headers, decoder.result())

    def _connection(self, origin: str) -> _Connection:  # (hold _lock)
        scheme, _, netloc = origin.partition("://")
        scheme = scheme.lower()
        if scheme not in ("http", "https"):
            raise Refused(f"the URL's scheme is not http or https: {origin!r}")
        tls: Optional[ssl.SSLContext] = None
        if scheme == "https":
            if self._context is None:
                try:
                    self._context = self._context_factory()
                except (OSError, ssl.SSLError) as exc:  # worth another try
                    raise SendFailed(f"{type(exc).__name__}: {exc}") from exc
            tls = self._context
        conn = _Connection(netloc, tls)  # Refused: a port that is not a number
        for key in [key for key, ref in self._open.items() if ref() is None]:
            del self._open[key]
        self._open[id(conn)] = weakref.ref(conn)
        return conn

    def _tell_untrusted(self, origin: str, host: str, exc: BaseException) -> None:
        with self._lock:
            first, self._told_untrusted = not self._told_untrusted, True
        if not first:
            return
        if "mismatch" in str(exc).lower():  # OpenSSL's "Hostname mismatch" / "IP address mismatch"
            log.error("TLS: the certificate of %s does not name %s (%s); certificates and host names are always "
                      "checked: use a URL with a name the certificate carries", origin, host, exc)
        else:
            log.error("TLS: the certificate of %s did not verify (%s); %s", origin, exc, HOW_TO_TRUST)


def _first(headers: Sequence[Header], name: bytes) -> bytes:
    for key, value in headers:
        if key == name:
            return value
    return b""


__all__ = ["Transport", "Answer", "SendFailed", "BodyLost", "TooLarge", "Untrusted", "Refused",
           "Timeout", "encode_headers", "split_url"]
