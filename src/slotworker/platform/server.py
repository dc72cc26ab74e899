"""The local platform's HTTP server: connections, routes, one-send answers.

Requests are framed by h11 (:mod:`.framing`), strictly, as RFC 9112 asks:
a request whose length could be read two ways (two different
``Content-Length`` values, ``Transfer-Encoding`` beside ``Content-Length``,
a length or chunk size that is not plain digits or hex), an unknown coding,
a head over 64 KiB, a line that is not HTTP: each is answered with a JSON
error and the connection is closed, so nothing after it on the connection
is ever taken for a request. A body is capped at the platform's
``max_body`` as it arrives, whatever its framing. This file holds no
parsing of the request's framing; what it reads of a request is the
target's meaning (:mod:`.targets`) and the headers' values.

Every answer is built in one buffer and written with one ``sendall``:
writing head and body separately stalls ~40 ms per request on a kept-alive
loopback connection (Nagle against delayed ACK), which would be all that
any benchmark measured.
"""

from __future__ import annotations

import json
import logging
import socket
import socketserver
import sys
import threading
import time
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Protocol, Tuple

from . import console
from . import faults as F
from .framing import FramingError, RequestHead, RequestStream
from .state import JobStore, RequestRecord
from .targets import split_target

log = logging.getLogger("slotworker.platform")

_WORKER_ROUTES = {
    "job-take": "take",
    "job-take-batch": "take_batch",
    "job-done": "done",
    "job-stream": "stream",
    "ping": "ping",
    "job-stop": "stop_poll",
}

#: Methods with routes; any other is answered 405 (HEAD too, as before).
_ROUTED_METHODS = frozenset({"GET", "POST", "PUT", "DELETE"})

GARBAGE_BODY = b"<html>oops</html>"


class ServedPlatform(Protocol):
    """What the HTTP layer needs of the platform it serves (``core.Platform``).

    Declared here so that this module does not import ``core``, which
    imports it to start the server.
    """

    store: JobStore
    faults: Optional[F.Faults]
    api_key: Optional[str]
    take_cost: float
    long_poll: float
    max_body: int

    @property
    def url(self) -> str: ...
    def is_down(self) -> bool: ...
    def pause(self, seconds: float) -> None: ...
    def submit(self, input: Any, *, job_id: Optional[str] = None, webhook: Optional[str] = None,
               **extra: Any) -> str: ...
    def cancel(self, job_id: str) -> Dict[str, Any]: ...
    def purge_queue(self) -> int: ...


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class PlatformHTTPServer(ThreadingHTTPServer):
    """A threading server that knows its Platform and its open connections,
    so that closing it also ends idle keep-alive connections."""

    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 resets bursts of client connections
    # (32 parallel /runsync calls against --rp_serve_api).
    request_queue_size = 128

    def __init__(self, address: Tuple[str, int], platform: ServedPlatform) -> None:
        self.platform = platform
        self._conns: "set[socket.socket]" = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, PlatformHandler)

    def get_request(self) -> Tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._conns_lock:
            self._conns.add(sock)
        return sock, addr

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client vanishing mid-answer is routine here (drop faults, close): a debug line.

        Anything else escaping a connection's handler is a bug of this
        module, logged as an error so that tests see it.
        """
        if isinstance(sys.exc_info()[1], OSError):
            log.debug("connection error from %s", client_address, exc_info=True)
        else:
            log.error("platform: unexpected error on a connection from %s", client_address, exc_info=True)


class PlatformHandler(socketserver.BaseRequestHandler):
    """One connection: its requests in order, each routed to the worker or client side."""

    protocol_version = "HTTP/1.1"
    server_version = "slotworker-platform"
    timeout = 300  # idle keep-alive connections end eventually
    server: PlatformHTTPServer

    # ------------------------------------------------------------ plumbing
    def setup(self) -> None:
        self.connection: socket.socket = self.request
        self.connection.settimeout(self.timeout)
        self.stream = RequestStream(self.connection)
        self.close_connection = True
        self.command = ""
        self.path = ""
        self.headers = RequestHead("", "", "", False, 0, [])  # until the first request
        self._dropped = False

    def handle(self) -> None:
        try:
            self._serve()
        except OSError:  # the client went away, or the idle timeout, or close_connections()
            log.debug("connection from %s ended", self.client_address, exc_info=True)

    def _serve(self) -> None:
        stream = self.stream
        while True:
            try:
                head = stream.next_request()
            except FramingError as exc:
                self._error(exc.status, exc.message, close=True)
                stream.linger()
                return
            if head is None:
                return
            self.headers = head
            self.command = head.method
            path = head.target
            if path.startswith("//"):  # as http.server does: not a scheme-relative URL
                path = "/" + path.lstrip("/")
            self.path = path
            self.close_connection = not head.keep_alive
            if head.method in _ROUTED_METHODS:
                self._dispatch(head.method)
            elif head.method == "HEAD":
                self._head_not_allowed()
            else:
                self._not_allowed()
            if self._dropped:
                return
            if not self.close_connection and not stream.finish(self.server.platform.max_body):
                self.close_connection = True
            if self.close_connection:
                stream.linger()
                return

    def _write(
        self,
        status: int,
        body: bytes = b"",
        content_type: str = "application/json",
        close: bool = False,
        headers: Optional[Dict[str, str]] = None,
    ) -> None:
        """Status line, headers (`headers`: extra ones) and body in one send."""
        if close:
            self.close_connection = True
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        head = [f"{self.protocol_version} {status} {reason}", f"Server: {self.server_version}"]
        if status != 204 and status >= 200:
            head.append(f"Content-Type: {content_type}")
            head.append(f"Content-Length: {len(body)}")
        else:
            body = b""
        head.extend(f"{name}: {value}" for name, value in (headers or {}).items())
        head.append("Connection: close" if self.close_connection else "Connection: keep-alive")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        self.connection.sendall(data)

    def _json(self, status: int, obj: Any, close: bool = False) -> None:
        self._write(status, json.dumps(obj).encode("utf-8"), close=close)

    def _error(self, status: int, message: str, close: bool = False) -> None:
        self._json(status, {"error": message, "status": status}, close=close)

    def _drop(self) -> None:
        """End the connection without an answer."""
        self.close_connection = True
        self._dropped = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _read_body(self) -> bytes:
        """The request's body (h11 frames it), at most the platform's ``max_body`` bytes."""
        try:
            return self.stream.read_body(self.headers, self.server.platform.max_body)
        except FramingError as exc:
            # The body is not read to its end, so this connection cannot go on.
            self.close_connection = True
            raise _BadRequest(exc.status, exc.message) from None

    # ------------------------------------------------------------ dispatch
    def _not_allowed(self) -> None:
        # The body stays unread, so the connection closes.
        self._error(405, f"method {self.command} is not allowed", close=True)

    def _head_not_allowed(self) -> None:
        self.close_connection = True
        self.connection.sendall(f"{self.protocol_version} 405 Method Not Allowed\r\n"
                                "Content-Length: 0\r\nConnection: close\r\n\r\n".encode("latin-1"))

    def _dispatch(self, method: str) -> None:
        t_start = time.monotonic()
        platform = self.server.platform
        seq = platform.store.begin_event()
        parts, query = split_target(self.path)
        try:
            if len(parts) >= 3 and parts[0] == "v2" and parts[2] in _WORKER_ROUTES:
                self._worker(method, parts, query, t_start, seq)
            else:
                if len(parts) >= 2 and parts[0] == "v2":
                    parts = parts[2:]
                self._client(method, parts, query)
        except _BadRequest as exc:
            self._error(exc.status, exc.message)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # a bug here must still answer JSON, not a traceback
            log.exception("platform: internal error on %s %s", method, self.path)
            try:
                self._error(500, "internal platform error", close=True)
            except OSError:
                pass

    # ------------------------------------------------------------ worker side
    def _worker(self, method: str, parts: List[str], query: Dict[str, str], t_start: float, seq: int) -> None:
        platform = self.server.platform
        store = platform.store
        route = _WORKER_ROUTES[parts[2]]
        worker = parts[3] if len(parts) > 3 else ""
        job_id = parts[4] if len(parts) > 4 else ""
        ev = RequestRecord(
            kind=route,
            t_start=t_start,
            worker_id=worker,
            query=query,
            headers=self.headers.as_sent(),
            method=method,
            path=self.path,
        )
        if "job_in_progress" in query:
            ev.job_in_progress = query["job_in_progress"] in ("1", "true", "True")

        def finish(status: int) -> None:
            # Published just before the answer is written, so that a client
            # holding the answer always finds its event (t_end is the moment
            # the answer was ready, microseconds before it is sent).
            ev.status = status
            ev.t_end = time.monotonic()
            store.record(seq, ev)

        try:
            body = self._read_body()
        except _BadRequest as exc:
            finish(exc.status)
            self._error(exc.status, exc.message)
            return
        ev.body = body.decode("utf-8", "replace")

        if platform.is_down():
            ev.fault = F.DOWN
            finish(503)
            self._error(503, "platform is down")
            return
        if platform.api_key is not None and self.headers.get("Authorization") != platform.api_key:
            ev.kind = "rejected"
            finish(401)
            self._error(401, "missing or wrong Authorization")
            return
        expected = {"take": 4, "take_batch": 4, "ping": 4, "stop_poll": 4, "done": 5, "stream": 5}[route]
        if len(parts) != expected:
            finish(404)
            self._error(404, f"bad {parts[2]} path: {self.path}")
            return
        store.seen_worker(worker)

        parsed: Any = None
        if route in ("done", "stream"):
            ev.job_ids = [job_id]
            # The body is JSON whatever the Content-Type says (runpod sends
            # application/x-www-form-urlencoded).
            try:
                parsed = json.loads(body.decode("utf-8")) if body else None
            except (ValueError, UnicodeDecodeError) as exc:
                finish(400)
                self._error(400, f"body is not JSON: {exc}")
                return
            if not isinstance(parsed, dict):
                finish(400)
                self._error(400, "body must be a JSON object")
                return
            if route == "done" and parsed.get("status") == "IN_PROGRESS":
                ev.kind = "progress"
        elif route == "ping":
            ev.job_ids = [j for j in query.get("job_id", "").split(",") if j]

        fault, delay = platform.faults.draw(ev.kind) if platform.faults is not None else (None, 0.0)
        if ev.kind == "done" and platform.faults is not None and job_id in platform.faults.refuse_results_of:
            fault = F.ERROR
        if delay > 0:
            ev.fault = F.SLOW
            platform.pause(delay)
        # Garbage on a take or stop poll hands nothing out; on a post or a
        # ping the request is processed and only the answer is garbage, so
        # that the fault tests the worker's parsing without losing a result.
        garbage_answer = fault == F.GARBAGE and ev.kind in ("done", "progress", "stream", "ping")
        if garbage_answer:
            ev.fault = fault

        def ok() -> None:
            finish(200)
            if garbage_answer:
                self._write(200, GARBAGE_BODY, content_type="text/html")
            else:
                self._write(200, b"{}")

        if fault is not None and fault != F.DROP_AFTER_ASSIGN and not garbage_answer:
            ev.fault = fault
            if fault == F.ERROR:
                finish(500)
                self._error(500, "injected fault")
            elif fault == F.THROTTLE:
                finish(429)
                self._error(429, "injected throttle")
            elif fault == F.GARBAGE:
                finish(200)
                self._write(200, GARBAGE_BODY, content_type="text/html")
            else:
                finish(0)
                self._drop()
            return

        if route in ("take", "take_batch"):
            self._take(route, worker, query, ev, fault, finish)
        elif route == "done":
            outcome = store.post_result(worker, job_id, parsed)
            if outcome == "unknown":
                finish(404)
                self._error(404, f"unknown job id: {job_id}")
            else:
                ok()
        elif route == "stream":
            outcome = store.post_stream(job_id, parsed)
            if outcome == "unknown":
                finish(404)
                self._error(404, f"unknown job id: {job_id}")
            else:
                ok()
        elif route == "ping":
            store.ping(worker, ev.job_ids)
            ok()
        else:  # stop_poll
            ids = store.take_stops(worker, time.monotonic() + platform.long_poll)
            ev.job_ids = ids
            if ids:
                finish(200)
                self._json(200, {"jobsToStop": ids})
            else:
                finish(204)
                self._write(204)

    def _take(self, route: str, worker: str, query: Dict[str, str], ev: RequestRecord, fault: Optional[str], finish: Any) -> None:
        platform = self.server.platform
        if route == "take_batch":
            try:
                n = int(query.get("batch_size", "1"))
            except ValueError:
                n = 0
            if n < 1:
                finish(400)
                self._error(400, "batch_size must be a positive integer")
                return
        else:
            n = 1
        ev.requested = n
        if platform.take_cost > 0:
            platform.pause(platform.take_cost)
        items = platform.store.take(worker, n, time.monotonic() + platform.long_poll)
        wire = [obj.wire() if kind == "job" else obj for kind, obj in items]
        ev.given = len(wire)
        ev.job_ids = [
            w["id"] for w in wire if isinstance(w, dict) and isinstance(w.get("id"), str)
        ]
        if fault == F.DROP_AFTER_ASSIGN and wire:
            ev.fault = fault
            finish(0)
            self._drop()
            return
        if not wire:
            finish(204)
            self._write(204)
            return
        payload = wire if route == "take_batch" else wire[0]
        finish(200)
        self._write(200, json.dumps(payload).encode("utf-8"))

    # ------------------------------------------------------------ client side
    def _client_body(self) -> Any:
        body = self._read_body()
        if not body:
            return {}
        try:
            return json.loads(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise _BadRequest(400, f"body is not JSON: {exc}") from None

    def _client(self, method: str, parts: List[str], query: Dict[str, str]) -> None:
        platform = self.server.platform
        store = platform.store
        name = parts[0] if parts else ""
        # Always drain the body so the keep-alive connection stays in step.
        body = self._client_body() if method in ("POST", "PUT") else {}

        if name in ("run", "runsync") and len(parts) == 1:
            if method != "POST":
                raise _BadRequest(405, f"use POST for /{name}")
            job_id = self._submit(body)
            if name == "run":
                self._json(200, {"id": job_id, "status": "IN_QUEUE"})
                return
            wait_s = self._wait_seconds(query, 90.0)
            d = store.wait_final(job_id, time.monotonic() + wait_s)
            d.pop("stream", None)
            self._json(200, d)
        elif name == "status" and len(parts) == 2:
            d = self._known(parts[1], store.status)
            d.pop("stream", None)
            self._json(200, d)
        elif name == "stream" and len(parts) == 2:
            everything = query.get("all") in ("1", "true")
            wait_s = self._wait_seconds(query, platform.long_poll)
            d = self._known(parts[1], lambda i: store.stream_since_cursor(i, time.monotonic() + wait_s, everything))
            self._json(200, d)
        elif name == "cancel" and len(parts) == 2:
            if method != "POST":
                raise _BadRequest(405, "use POST for /cancel")
            d = self._known(parts[1], platform.cancel)
            d.pop("stream", None)
            self._json(200, d)
        elif name == "health" and len(parts) == 1:
            self._json(200, store.health())
        elif name == "openapi.json" and len(parts) == 1:
            from .openapi import openapi_document

            self._json(200, openapi_document(platform.url))
        elif name == "purge-queue" and len(parts) == 1:
            if method != "POST":
                raise _BadRequest(405, "use POST for /purge-queue")
            self._json(200, {"removed": platform.purge_queue(), "status": "completed"})
        else:
            answer = console.route(platform, method, parts, query)
            if answer is None:
                raise _BadRequest(404, f"no such route: {method} {self.path}")
            self._write(answer.status, answer.body, content_type=answer.content_type, headers=answer.headers)

    @staticmethod
    def _wait_seconds(query: Dict[str, str], default: float) -> float:
        raw = query.get("wait")
        if raw is None:
            return default
        try:
            ms = float(raw)
        except ValueError:
            raise _BadRequest(400, "wait must be a number of milliseconds") from None
        return max(0.0, min(ms / 1000.0, 300.0))

    @staticmethod
    def _known(job_id: str, fn: Any) -> Dict[str, Any]:
        try:
            return fn(job_id)
        except KeyError:
            raise _BadRequest(404, f"unknown job id: {job_id}") from None

    def _submit(self, body: Any) -> str:
        if not isinstance(body, dict):
            raise _BadRequest(400, "body must be a JSON object with an 'input' key")
        if "input" not in body:
            raise _BadRequest(400, "missing 'input' in the request body")
        webhook = body.get("webhook")
        if webhook is not None and not (isinstance(webhook, str) and webhook.startswith(("http://", "https://"))):
            raise _BadRequest(400, "'webhook' must be a URL string")
        job_id = body.get("id")
        if job_id is not None and not isinstance(job_id, str):
            raise _BadRequest(400, "'id' must be a string")
        try:
            return self.server.platform.submit(body["input"], job_id=job_id, webhook=webhook)
        except ValueError as exc:
            raise _BadRequest(409, str(exc)) from None
