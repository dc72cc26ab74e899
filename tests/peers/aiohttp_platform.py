"""A platform stand-in built on aiohttp's web server, to test the worker
against an HTTP server this project did not write.

:class:`AiohttpPlatform` speaks the worker side of the protocol
(docs/protocol.md) and nothing more: take and batch take, job-done (final
results and progress updates), job-stream, ping, and a stop channel that
never stops anything. It runs its own event
loop on its own thread, so a test drives it from plain synchronous code.

What makes it a different peer from ``slotworker.platform`` is the server
underneath (aiohttp's HTTP/1.1 parser and writer, asyncio's TLS) and the
options that change what goes over the wire:

- ``tls``: an :class:`ssl.SSLContext` for HTTPS (see :func:`server_tls`,
  which also counts the handshakes the worker started and refused);
- ``gzip``: every answer with a body is gzip-compressed;
- ``chunked``: every answer with a body is sent with
  ``Transfer-Encoding: chunked``, in several chunks;
- ``keepalive_timeout``: how long the server keeps an idle connection
  (aiohttp closes it after that: a short one makes the worker find its
  kept-alive connections closed under it);
- ``host``: ``"::1"`` serves on IPv6 loopback.

The test reads what it saw through one :class:`threading.Condition`
(:meth:`AiohttpPlatform.wait_until`), notified on every request recorded and
every TLS handshake.
"""

from __future__ import annotations

import asyncio
import gzip as gzip_module
import json
import socket
import ssl
import threading
from collections import Counter, deque
from typing import Any, Callable, Deque, Dict, List, Optional

from aiohttp import web

#: Pieces a chunked answer's body is cut into (one chunk each).
CHUNKS = 3


class _CountingSSLObject(ssl.SSLObject):
    """An :class:`ssl.SSLObject` that tells its context when its handshake fails.

    asyncio drives the server side of TLS through ``SSLObject.do_handshake``;
    a worker that refuses the certificate sends an alert, which surfaces here
    as an :class:`ssl.SSLError`. asyncio itself only logs that at DEBUG.
    """

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise  # not a failure: the handshake waits for more bytes
        except ssl.SSLError as exc:
            context = self.context
            if isinstance(context, CountingServerContext) and context.on_failure is not None:
                context.on_failure(getattr(exc, "reason", None) or str(exc))
            raise


class CountingServerContext(ssl.SSLContext):
    """A server-side TLS context that reports each handshake it starts and each one that fails.

    ``on_start()`` is called per connection (when asyncio wraps it),
    ``on_failure(reason)`` when the peer refuses the handshake, with
    OpenSSL's reason (e.g. ``TLSV1_ALERT_UNKNOWN_CA``). A worker that
    checks the server's name after the handshake, rather than in it, shows
    as a started handshake with no request after it.
    """

    sslobject_class = _CountingSSLObject
    on_start: Optional[Callable[[], None]] = None
    on_failure: Optional[Callable[[str], None]] = None

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:  # type: ignore[override]
        if self.on_start is not None:
            self.on_start()
        return super().wrap_bio(*args, **kwargs)


def server_tls(configure: Callable[[ssl.SSLContext], None]) -> CountingServerContext:
    """A :class:`CountingServerContext` for a server; ``configure`` loads its
    certificate (e.g. a trustme ``LeafCert.configure_cert``)."""
    context = CountingServerContext(ssl.PROTOCOL_TLS_SERVER)
    configure(context)
    return context


class AiohttpPlatform:
    """The worker side of the protocol on aiohttp, on a thread of its own.

    Queue jobs with :meth:`queue_jobs` (before or while a worker runs), point
    a worker at :meth:`worker_env`, then wait with :meth:`wait_until`, e.g.
    ``wait_until(lambda p: p.all_final())``. Every final result is kept per
    job id (:attr:`finals`), so a job reported twice shows as a duplicate.
    """

    def __init__(self, *, host: str = "127.0.0.1", tls: Optional[CountingServerContext] = None,
                 gzip: bool = False, chunked: bool = False, keepalive_timeout: float = 75.0,
                 long_poll: float = 0.2, endpoint: str = "peer", api_key: str = "peer-key") -> None:
        self.host = host
        self.tls = tls
        self.gzip = gzip
        self.chunked = chunked
        self.keepalive_timeout = keepalive_timeout
        self.long_poll = long_poll
        self.endpoint = endpoint
        self.api_key = api_key
        self.port = 0
        # Notified (notify_all) whenever anything below changes: a request
        # recorded, a result kept, a TLS handshake started or refused; waited
        # on by the test thread in wait_until. The server's handlers only
        # take it for a moment, never wait on it.
        self._changed = threading.Condition()
        self._queue: Deque[Dict[str, Any]] = deque()
        self._inputs: Dict[str, Any] = {}
        #: Every final result body per job id, in arrival order (one per job is right).
        self.finals: Dict[str, List[Any]] = {}
        #: Progress updates (``"status": "IN_PROGRESS"``) per job id.
        self.progress: Dict[str, List[Any]] = {}
        #: Stream chunks per job id.
        self.streams: Dict[str, List[Any]] = {}
        #: Requests by kind: take, take_batch, done, stream, ping, stop, other.
        self.requests: Counter = Counter()
        #: Results posted for job ids never handed out.
        self.unknown: List[str] = []
        #: Requests whose Authorization header was not the API key.
        self.bad_auth = 0
        #: Answers sent gzip-compressed, and sent chunked (with a body).
        self.gzipped = 0
        self.chunked_answers = 0
        #: Distinct client connections a request came on (peer address, port).
        self.connections: set = set()
        # The transports that carried each kind of request, for idle_closed().
        self._transports: Dict[str, List[asyncio.BaseTransport]] = {}
        #: TLS handshakes started, and the reasons of those the worker refused.
        self.handshakes = 0
        self.handshake_failures: List[str] = []
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._runner: Optional[web.AppRunner] = None
        self._thread: Optional[threading.Thread] = None
        self._ready = threading.Event()
        # Set (on the loop) when jobs are queued; the long-polled takes wait on it.
        self._arrived: Optional[asyncio.Event] = None
        self._start_error: Optional[BaseException] = None
        if tls is not None:
            tls.on_start = self._handshake_started
            tls.on_failure = self._handshake_failed

    # ------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 30.0) -> "AiohttpPlatform":
        """Bind a free port and serve on a daemon thread; returns once serving. Idempotent."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._serve, name=f"aiohttp-platform-{self.host}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the aiohttp platform did not start")
        if self._start_error is not None:
            raise RuntimeError("the aiohttp platform did not start") from self._start_error
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Stop serving, close every connection and end the thread. Idempotent."""
        loop, runner = self._loop, self._runner
        if loop is None or loop.is_closed():
            return
        if runner is not None:
            # Open long polls end within long_poll, so the runner's own
            # shutdown wait is not reached.
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> "AiohttpPlatform":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._setup())
        except BaseException as exc:  # reported by start()
            self._start_error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _setup(self) -> None:
        self._arrived = asyncio.Event()
        app = web.Application()
        base = f"/v2/{self.endpoint}"
        app.router.add_get(base + "/job-take/{worker}", self._take)
        app.router.add_get(base + "/job-take-batch/{worker}", self._take_batch)
        app.router.add_post(base + "/job-done/{worker}/{job_id}", self._done)
        app.router.add_post(base + "/job-stream/{worker}/{job_id}", self._stream)
        app.router.add_get(base + "/ping/{worker}", self._ping)
        app.router.add_get(base + "/job-stop/{worker}", self._stop)
        # access_log=None: a line per request would only bury the worker's log.
        self._runner = web.AppRunner(app, access_log=None, keepalive_timeout=self.keepalive_timeout)
        await self._runner.setup()
        # Our own socket, so the port is known without reading the site's privates.
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock, ssl_context=self.tls).start()

    # ------------------------------------------------------------ for the test
    @property
    def url(self) -> str:
        """Base URL, e.g. ``https://127.0.0.1:43210`` or ``http://[::1]:43210``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls is not None else 'http'}://{host}:{self.port}"

    def worker_env(self, worker_id: str = "w1", query: str = "gpu=peer") -> Dict[str, str]:
        """The platform variables a worker needs to run against this stand-in,
        with the placeholders a deployed worker gets."""
        base = f"{self.url}/v2/{self.endpoint}"
        return {
            "RUNPOD_WEBHOOK_GET_JOB": f"{base}/job-take/$ID?{query}",
            "RUNPOD_WEBHOOK_POST_OUTPUT": f"{base}/job-done/$RUNPOD_POD_ID/$ID?{query}",
            "RUNPOD_WEBHOOK_POST_STREAM": f"{base}/job-stream/$RUNPOD_POD_ID/$ID?{query}",
            "RUNPOD_WEBHOOK_PING": f"{base}/ping/$RUNPOD_POD_ID?{query}",
            "RUNPOD_POD_ID": worker_id,
            "RUNPOD_AI_API_KEY": self.api_key,
        }

    def queue_jobs(self, n: int, pad: int = 0) -> List[str]:
        """Queue ``n`` jobs, each input ``{"n": i, "pad": "x" * pad}``; their ids."""
        ids = []
        with self._changed:
            start = len(self._inputs)
            for i in range(start, start + n):
                job_id = f"job-{i:04d}"
                job_input = {"n": i, "pad": "x" * pad}
                self._inputs[job_id] = job_input
                self._queue.append({"id": job_id, "input": job_input})
                ids.append(job_id)
            self._changed.notify_all()
        loop = self._loop
        if loop is not None and self._arrived is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._arrived.set)  # wakes the takes held open
        return ids

    def input_of(self, job_id: str) -> Any:
        """The input a queued job was given."""
        with self._changed:
            return self._inputs[job_id]

    def wait_until(self, predicate: Callable[["AiohttpPlatform"], bool], timeout: float) -> bool:
        """Wait until ``predicate(self)`` holds (re-checked on every change); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def all_final(self) -> bool:
        """Every queued job has at least one final result."""
        with self._changed:
            return all(job_id in self.finals for job_id in self._inputs)

    def missing(self) -> List[str]:
        """Queued jobs with no final result yet."""
        with self._changed:
            return [job_id for job_id in self._inputs if job_id not in self.finals]

    def duplicates(self) -> Dict[str, int]:
        """Jobs with more than one final result, and how many each had."""
        with self._changed:
            return {job_id: len(bodies) for job_id, bodies in self.finals.items() if len(bodies) > 1}

    def idle_closed(self, kind: str) -> bool:
        """Whether every connection that carried a ``kind`` request (at least one) is
        closed or closing: after a burst of results, the server's keep-alive
        timer has closed the posters' idle connections. Nothing announces a
        close, so poll this."""
        with self._changed:
            transports = list(self._transports.get(kind, ()))
        # is_closing() is only read here, from another thread: a stale False
        # just means one more look.
        return bool(transports) and all(t.is_closing() for t in transports)

    def summary(self) -> str:
        """What the stand-in saw, for an assertion message."""
        with self._changed:
            return (f"{self.url}: queued {len(self._inputs)}, waiting {len(self._queue)}, final {len(self.finals)}, "
                    f"requests {dict(self.requests)}, connections {len(self.connections)}, "
                    f"gzipped {self.gzipped}, chunked {self.chunked_answers}, handshakes {self.handshakes}, "
                    f"refused {len(self.handshake_failures)} {sorted(set(self.handshake_failures))}, "
                    f"unknown ids {self.unknown[:5]}, bad auth {self.bad_auth}")

    # ------------------------------------------------------------ TLS events
    def _handshake_started(self) -> None:
        with self._changed:
            self.handshakes += 1
            self._changed.notify_all()

    def _handshake_failed(self, reason: str) -> None:
        with self._changed:
            self.handshake_failures.append(reason)
            self._changed.notify_all()

    # ------------------------------------------------------------ handlers
    def _record(self, request: web.Request, kind: str) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        with self._changed:
            self.requests[kind] += 1
            if request.headers.get("Authorization") != self.api_key:
                self.bad_auth += 1
            if peer:
                self.connections.add(tuple(peer[:2]))
            if request.transport is not None and request.transport not in self._transports.get(kind, ()):
                self._transports.setdefault(kind, []).append(request.transport)
            self._changed.notify_all()

    async def _answer(self, request: web.Request, status: int, payload: Any = None) -> web.StreamResponse:
        """An answer with ``payload`` as JSON (or 204 without one), gzipped and chunked as configured."""
        if payload is None:
            return web.Response(status=status)
        body = json.dumps(payload).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.gzip:
            # Compressed here rather than by aiohttp's enable_compression, so
            # it is gzip (not deflate) in every aiohttp version. The worker
            # asks for it: it sends Accept-Encoding: gzip, deflate.
            body = gzip_module.compress(body)
            headers["Content-Encoding"] = "gzip"
        response: web.StreamResponse
        if not self.chunked:
            response = web.Response(status=status, body=body, headers=headers)
        else:
            response = web.StreamResponse(status=status, headers=headers)
            response.enable_chunked_encoding()
            await response.prepare(request)
            step = max(1, -(-len(body) // CHUNKS))
            for at in range(0, len(body), step):
                await response.write(body[at:at + step])  # one chunk on the wire each
            await response.write_eof()
        with self._changed:
            self.gzipped += self.gzip
            self.chunked_answers += self.chunked
        return response

    async def _hand_out(self, n: int) -> List[Dict[str, Any]]:
        """Up to ``n`` queued jobs; when none is queued, wait up to ``long_poll`` for some."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.long_poll
        while True:
            with self._changed:
                jobs = [self._queue.popleft() for _ in range(min(n, len(self._queue)))]
            left = deadline - loop.time()
            if jobs or left <= 0:
                return jobs
            # A long poll: queue_jobs (on the test's thread) sets the event
            # through the loop. Cleared here, after looking at the queue with
            # no await in between, so a wake-up cannot fall between the two.
            assert self._arrived is not None
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def _take(self, request: web.Request) -> web.StreamResponse:
        self._record(request, "take")
        jobs = await self._hand_out(1)
        return await self._answer(request, 200, jobs[0]) if jobs else await self._answer(request, 204)

    async def _take_batch(self, request: web.Request) -> web.StreamResponse:
        self._record(request, "take_batch")
        try:
            size = int(request.query.get("batch_size", "1"))
        except ValueError:
            return web.Response(status=400, text="batch_size is not a number")
        jobs = await self._hand_out(max(1, size))
        return await self._answer(request, 200, jobs) if jobs else await self._answer(request, 204)

    async def _done(self, request: web.Request) -> web.StreamResponse:
        self._record(request, "done")
        job_id = request.match_info["job_id"]
        try:
            body = json.loads(await request.read())
        except ValueError:
            return web.Response(status=400, text="body is not JSON")
        with self._changed:
            if job_id not in self._inputs:
                self.unknown.append(job_id)
            elif isinstance(body, dict) and body.get("status") == "IN_PROGRESS":
                self.progress.setdefault(job_id, []).append(body)
            else:
                self.finals.setdefault(job_id, []).append(body)
            self._changed.notify_all()
        return await self._answer(request, 200, {"ok": True})

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        self._record(request, "stream")
        job_id = request.match_info["job_id"]
        try:
            body = json.loads(await request.read())
        except ValueError:
            return web.Response(status=400, text="body is not JSON")
        with self._changed:
            self.streams.setdefault(job_id, []).append(body)
            self._changed.notify_all()
        return await self._answer(request, 200, {"ok": True})

    async def _ping(self, request: web.Request) -> web.StreamResponse:
        self._record(request, "ping")
        return await self._answer(request, 200, {"ok": True})

    async def _stop(self, request: web.Request) -> web.StreamResponse:
        self._record(request, "stop")
        # A long poll that never has anything to stop.
        await asyncio.sleep(self.long_poll)
        return await self._answer(request, 204)
