"""Requests over each thread's own keep-alive connection.

The worker's requests come from a few long-lived threads: result posts
from the poster threads, one or more per job; takes from the fetch thread;
the heartbeat's pings and the stop channel's polls, each from its own thread.
:class:`ThreadConnections` gives every such thread its own persistent
:class:`~.http_exchange.Connection` per origin, so a request needs no pool,
no lock held across it and no objects around it but its bytes. On the
local platform a post costs about 0.08 ms of CPU, against 0.16 ms through
:mod:`http.client` and 0.2 ms through urllib3's pool, and a ping with 32
job ids 0.09 ms, against 0.16-0.19 ms through :mod:`http.client` and about
0.5 ms through a :class:`requests.Session`. The request on the wire is the
same: the request line, ``Host`` as urllib3 (:mod:`http.client`) sends it,
then the headers given, in their order. The request is sent under the
connect timeout, as urllib3 sends it; the answer is waited for under the
read timeout.

What is kept from requests: certificates are checked against its CA bundle
(certifi's), redirects are never followed, a gzip or deflate answer is
decoded, a header with a line break is refused, and nothing is read from
the environment (no proxy, no ``.netrc``): the API key goes only to the URL
given.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
import weakref
import zlib
from typing import Dict, List, Optional, Tuple

from requests.utils import DEFAULT_CA_BUNDLE_PATH

from .http_exchange import NO_HEADERS, Connection, HeaderBlock, Refused, request_bytes

Timeout = Tuple[float, float]

#: Answer times kept for :meth:`ThreadConnections.answer_seconds`, and how long (seconds) one counts.
ANSWERS_KEPT = 16
ANSWER_FRESH_SECONDS = 1.0


class SendFailed(Exception):
    """The request could not be sent or its answer not read (the connection is closed)."""


class BodyLost(SendFailed):
    """The answer's status came but its body could not be read in full (a GET's)."""


def _split(url: str) -> Tuple[str, str]:
    """``(scheme://host:port, path?query)`` of an absolute URL, without its fragment."""
    url = url.split("#", 1)[0]  # a fragment is not sent, as requests does not send it
    start = url.find("//") + 2
    end = min((i for i in (url.find("/", start), url.find("?", start)) if i >= 0), default=-1)
    if end < 0:
        return url, "/"
    target = url[end:]
    return url[:end], target if target.startswith("/") else "/" + target


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle kept-alive connection was closed by the other end.

    An idle connection has nothing to read unless the peer closed it (or
    sent something unasked, which makes it unusable too).
    """
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class ThreadConnections:
    """Each thread's own keep-alive connection per origin.

    One instance per kind of request whose answer times belong together:
    :meth:`answer_seconds` reads the answers of this instance's requests.
    """

    def __init__(self, ca_bundle: str = DEFAULT_CA_BUNDLE_PATH) -> None:
        """``ca_bundle``: the certificates HTTPS posts trust (requests' bundle by default)."""
        self._ca_bundle = ca_bundle
        self._local = threading.local()
        self._lock = threading.Lock()
        # Guarded by _lock: the connections opened (by id; a thread that ends
        # drops its own, and the garbage collector closes them), those a post
        # is using, and whether closed.
        self._open: Dict[int, "weakref.ReferenceType[Connection]"] = {}
        self._busy: "set[Connection]" = set()
        self._closed = False
        self._tls: Optional[ssl.SSLContext] = None
        # The last ANSWERS_KEPT answer times (seconds), a ring every posting
        # thread writes without a lock: a write lost to a race loses one sample.
        self._answers: List[Optional[Tuple[float, float]]] = [None] * ANSWERS_KEPT  # (when, took)
        self._answer_at = 0

    def post(self, url: str, body: bytes, headers: Dict[str, str], timeout: Timeout,
             fixed: HeaderBlock = NO_HEADERS) -> Tuple[int, str]:
        """POST ``body`` to ``url``; the status, and the answer's text unless it is 2xx.

        The ``fixed`` headers are sent first, then ``headers``.

        Raises :class:`SendFailed` when the request could not be sent or its
        answer not read (or :meth:`close` was called), and :class:`Refused`
        for a request that cannot be written at all (nothing is sent). An answer cut
        short after a 2xx status line still counts: the platform has the
        result.
        """
        status, data, encoding, _ = self._exchange("POST", url, body, headers, timeout, fixed)
        return status, ("" if status < 300 else _decoded(data, encoding).decode("utf-8", "replace"))

    def get(self, url: str, headers: Dict[str, str], timeout: Timeout,
            fixed: HeaderBlock = NO_HEADERS) -> Tuple[int, bytes, str]:
        """GET ``url``; the status, the answer's body (decoded if gzipped), and its Content-Type.

        Raises as :meth:`post` does, and :class:`BodyLost` when the status
        came but the body could not be read in full.
        """
        status, data, encoding, content_type = self._exchange("GET", url, None, headers, timeout, fixed)
        return status, _decoded(data, encoding), content_type

    def _exchange(self, method: str, url: str, body: Optional[bytes], headers: Dict[str, str],
                  timeout: Timeout, fixed: HeaderBlock) -> Tuple[int, bytes, Optional[str], str]:
        """One request on the calling thread's connection: status, raw body, Content-Encoding, Content-Type."""
        origin, path = _split(url)
        conns = self._local.__dict__
        conn: Optional[Connection] = None
        try:
            with self._lock:
                if self._closed:
                    raise SendFailed("the connections were closed (the worker is stopping)")
                conn = conns.get(origin)
                if conn is None:
                    conns[origin] = conn = self._connection(origin)
                self._busy.add(conn)
            return self._send(conn, method, path, body, headers, timeout, fixed)
        except Refused:
            raise  # nothing was sent: the connection is as it was
        except BaseException:
            if conn is not None:
                # Closed, and a new one next time: whatever it was doing is unknown.
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
        """How long the platform takes to answer a post: the least of the last few.

        Timed from just before the request is written to its answer's
        headers read. The least, because the time a thread waits for the GIL
        (tens of ms behind hundreds of job threads) only ever adds to that:
        the quickest recent answer is the platform's own latency. Only
        answers of the last :data:`ANSWER_FRESH_SECONDS` count, so fast ones
        from before the platform slowed down do not hide it; None without
        any.
        """
        since = time.monotonic() - ANSWER_FRESH_SECONDS
        fresh = [sample[1] for sample in self._answers if sample is not None and sample[0] >= since]
        return min(fresh) if fresh else None

    def _send(self, conn: Connection, method: str, path: str, body: Optional[bytes],
              headers: Dict[str, str], timeout: Timeout, fixed: HeaderBlock) -> Tuple[int, bytes, Optional[str], str]:
        data = request_bytes(method, path, conn.host_header, headers, body, fixed)  # Refused: nothing sent
        try:
            if conn.sock is not None and _dropped(conn.sock):
                conn.close()
            if conn.sock is None:
                conn.connect(timeout[0])
            assert conn.sock is not None
            conn.sock.settimeout(timeout[0])
            sent = time.monotonic()  # before writing: a GIL wait after the write only adds
            try:
                conn.send(data)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
                # The platform may answer before it has read the whole body (a
                # 413 for one over its limit) and close: read that answer.
                pass
            conn.sock.settimeout(timeout[1])
            status, answer_headers, keep_alive = conn.read_head()
        except (OSError, ValueError) as exc:  # (a certificate refused, an answer that is not HTTP, ...)
            # ValueError too: whatever the answer was, it must not pass for a
            # request that could not be written (Refused), which is not retried.
            raise SendFailed(f"{type(exc).__name__}: {exc}") from exc
        at, answered = self._answer_at, time.monotonic()
        self._answers[at] = (answered, answered - sent)
        self._answer_at = (at + 1) % ANSWERS_KEPT
        try:
            body_read, clean = conn.read_body(status, answer_headers)
        except (OSError, ValueError) as exc:
            conn.close()
            if method != "POST":  # a post's status is its answer; a GET's is in its body
                raise BodyLost(f"the answer's body could not be read: {type(exc).__name__}: {exc}") from exc
            body_read, clean = b"", True
        if not (keep_alive and clean):
            conn.close()
        return (status, body_read, answer_headers.get("content-encoding"),
                answer_headers.get("content-type", ""))

    def _connection(self, origin: str) -> Connection:  # (hold _lock)
        scheme, _, netloc = origin.partition("://")
        try:
            tls = self._tls_context() if scheme.lower() == "https" else None
        except OSError as exc:  # the CA bundle missing or unreadable: worth another try
            raise SendFailed(f"{type(exc).__name__}: {exc}") from exc
        conn = Connection(netloc, tls)  # Refused: a port that is not a number
        for key in [key for key, ref in self._open.items() if ref() is None]:
            del self._open[key]
        self._open[id(conn)] = weakref.ref(conn)
        return conn

    def _tls_context(self) -> ssl.SSLContext:  # (hold _lock)
        if self._tls is None:
            context = ssl.create_default_context(cafile=self._ca_bundle)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            self._tls = context
        return self._tls

    def close(self) -> None:
        """Close every connection: idle ones now, one a post is using once that post ends.

        Posts after this fail with :class:`SendFailed`.
        """
        with self._lock:
            self._closed = True
            alive = [ref() for ref in self._open.values()]
            idle: List[Connection] = [
                conn for conn in alive if conn is not None and conn not in self._busy]
        for conn in idle:
            conn.close()


def _decoded(data: bytes, encoding: Optional[str]) -> bytes:
    """An answer's body with the gzip or deflate we said we accept undone.

    Every gzip member is decoded, not only the first, and bytes after the
    last one that do not decode are dropped, as urllib3 does. A body that
    does not decode at all is returned as it came (its reader then says it
    is not what the protocol says).
    """
    if not encoding or encoding.strip().lower() not in ("gzip", "deflate", "x-gzip"):
        return data
    parts: List[bytes] = []
    rest = data
    try:
        while rest:
            member = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib, by its header
            parts.append(member.decompress(rest) + member.flush())
            rest = member.unused_data
    except zlib.error:
        if not parts:
            try:
                return zlib.decompress(data, -zlib.MAX_WBITS)  # raw deflate, as some servers send it
            except zlib.error:
                return data
    return b"".join(parts)


__all__ = ["ThreadConnections", "SendFailed", "BodyLost", "Refused"]
