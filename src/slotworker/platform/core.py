"""`Platform`: the local platform object that tests, benchmarks and
`--rp_serve_api` hold. It owns the job store, the HTTP server thread, the
job-timeout reaper thread and the webhook sender."""

from __future__ import annotations

import errno
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, Iterable, List, Optional

from ..backoff import Backoff
from .faults import Faults
from .server import PlatformHTTPServer
from .state import FINAL_STATES, RequestRecord, JobRecord, JobStore

log = logging.getLogger("slotworker.platform")


class BindError(OSError):
    """The platform could not listen on its address: the port is taken, needs
    privileges or is out of range, or the host is not an address of this machine.

    An :class:`OSError` (what ``bind`` raised is its ``__cause__``) that keeps
    the address it tried, so that a command can say which of its flags to change.
    """

    def __init__(self, host: str, port: int, cause: Exception) -> None:
        self.host = host
        self.port = port
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        code = getattr(cause, "errno", None)
        # strerror is the bare reason; str() of an OSError prefixes "[Errno N]".
        reason = "address already in use" if code == errno.EADDRINUSE else (
            getattr(cause, "strerror", None) or str(cause)).lower().rstrip(".")
        self.message = f"cannot listen on {self.address}: {reason}"
        super().__init__(code, reason)

    def __str__(self) -> str:
        return self.message

    @property
    def in_use(self) -> bool:
        """True when another process holds the port."""
        return self.errno == errno.EADDRINUSE

    def hint(self, port_flag: str, host_flag: str) -> str:
        """This error and what to change, one line, naming the command's own flags."""
        if self.in_use:
            return f"{self}; pick another port with {port_flag} N (0: any free port)"
        return f"{self}; change {host_flag} or {port_flag}"


WEBHOOK_ATTEMPTS = 3
#: Waits between webhook attempts: the first, and the cap it doubles up to.
WEBHOOK_BACKOFF = (0.2, 0.8)


class Platform:
    """A local RunPod-style platform on loopback: worker side and client side
    of the protocol (docs/protocol.md) on one port.

    Nothing happens until `start()` (or `with Platform(...) as p:`).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        endpoint: str = "local",
        api_key: Optional[str] = None,
        take_cost: float = 0.0,
        long_poll: float = 1.0,
        job_timeout: Optional[float] = None,
        faults: Optional[Faults] = None,
        max_body: int = 64 * 1024 * 1024,
    ) -> None:
        self.host = host
        self.port = port
        self.endpoint = endpoint
        self.api_key = api_key
        self.take_cost = float(take_cost)
        self.long_poll = float(long_poll)
        self._job_timeout = job_timeout
        #: Settable at runtime; None means no faults.
        self.faults: Optional[Faults] = faults
        self.max_body = int(max_body)
        #: The job store; the HTTP layer reads and changes jobs through it.
        self.store = JobStore()
        self.store.on_final(self._on_final)
        self._server: Optional[PlatformHTTPServer] = None
        self._threads: List[threading.Thread] = []
        self._closed_event = threading.Event()
        self._down_until = 0.0
        self._lifecycle = threading.Lock()
        self._started = False
        self._closed = False

    # ------------------------------------------------------------ lifecycle
    def start(self) -> "Platform":
        """Bind and serve in background daemon threads. Idempotent.

        Raises :class:`BindError` when the address cannot be listened on.
        """
        with self._lifecycle:
            if self._closed:
                raise RuntimeError("Platform is closed")
            if self._started:
                return self
            try:
                self._server = PlatformHTTPServer((self.host, self.port), self)
            except (OSError, OverflowError) as exc:  # OverflowError: a port past 65535
                raise BindError(self.host, self.port, exc) from exc
            self.port = self._server.server_address[1]
            serve = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.1},
                name=f"slotworker-platform-serve-{self.port}",
                daemon=True,
            )
            reaper = threading.Thread(
                target=self._reap_loop, name=f"slotworker-platform-reaper-{self.port}", daemon=True
            )
            self._threads = [serve, reaper]
            for t in self._threads:
                t.start()
            self._started = True
            return self

    def close(self) -> None:
        """Stop serving and wake every long poll. Idempotent."""
        with self._lifecycle:
            if self._closed:
                return
            self._closed = True
            self._closed_event.set()
            self.store.close()
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
                self._server.close_connections()
            for t in self._threads:
                t.join(timeout=5)

    def __enter__(self) -> "Platform":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def url(self) -> str:
        """Base URL, e.g. "http://127.0.0.1:8000" (the real port once started)."""
        host = self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    # ------------------------------------------------------------ worker env
    def worker_env(self, worker_id: str = "w1", api_key: Optional[str] = None,
                   query: str = "gpu=local") -> Dict[str, str]:
        """The environment a worker needs to run against this platform.

        ``query`` is the query string every URL template carries (the real
        platform's routing parameters stand there). The automatic fitness
        checks are switched off: they test a production machine (and one of
        them opens a connection to a public address), which a worker
        developed or benchmarked against this platform is not.
        """
        base = f"{self.url}/v2/{self.endpoint}"
        return {
            "RUNPOD_WEBHOOK_GET_JOB": f"{base}/job-take/$ID?{query}",
            "RUNPOD_WEBHOOK_POST_OUTPUT": f"{base}/job-done/$RUNPOD_POD_ID/$ID?{query}",
            "RUNPOD_WEBHOOK_POST_STREAM": f"{base}/job-stream/$RUNPOD_POD_ID/$ID?{query}",
            "RUNPOD_WEBHOOK_PING": f"{base}/ping/$RUNPOD_POD_ID?{query}",
            "RUNPOD_POD_ID": worker_id,
            "RUNPOD_AI_API_KEY": api_key or self.api_key or "local-key",
            "RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true",
            "RUNPOD_SKIP_GPU_CHECK": "true",
        }

    # ------------------------------------------------------------ jobs
    def submit(self, input: Any, *, job_id: Optional[str] = None, webhook: Optional[str] = None, **extra: Any) -> str:
        """Queue a job; returns its id (a uuid4 unless given). `extra` keys
        go into the job object handed to the worker."""
        return self.store.submit(input, job_id=job_id, webhook=webhook, extra=extra)

    def submit_raw(self, obj: Any) -> None:
        """Queue any JSON value as-is; takes hand it out, it is not tracked."""
        self.store.submit_raw(obj)

    def status(self, job_id: str) -> Dict[str, Any]:
        """The status object of a job (KeyError when unknown)."""
        return self.store.status(job_id)

    def job(self, job_id: str) -> JobRecord:
        """A snapshot of a job's record, with its monotonic timings."""
        return self.store.snapshot(job_id)

    def jobs(self) -> List[JobRecord]:
        """Snapshots of every tracked job, in submission order."""
        return self.store.snapshots()

    def cancel(self, job_id: str) -> Dict[str, Any]:
        """Cancel a job: queued ones at once; in-progress ones also get their
        id sent on their worker's stop channel. Final jobs are left alone."""
        return self.store.cancel(job_id)

    def stop_jobs(self, ids: Iterable[str]) -> None:
        """Deliver `ids` on the stop channel of the worker holding each (no state change)."""
        self.store.stop_jobs(list(ids))

    def purge_queue(self) -> int:
        """Cancel every queued job; returns how many."""
        with self.store.mutex:
            queued = [j.id for j in self.store.snapshots() if j.status == "IN_QUEUE"]
            for job_id in queued:
                self.store.cancel(job_id)
            return len(queued)

    # ------------------------------------------------------------ observation
    @property
    def events(self) -> List[RequestRecord]:
        """Every worker-side request so far, in arrival order (a copy)."""
        return self.store.events()

    def takes(self) -> List[RequestRecord]:
        """Only the take and take-batch events."""
        return [e for e in self.store.events() if e.kind in ("take", "take_batch")]

    def counts(self) -> Dict[str, int]:
        """Counters: submitted, queued, in_progress, completed, failed,
        cancelled, duplicates, late, requeued, takes; and
        unknown (posts for unknown job ids), raw_queued, waiting_takes and
        waiting_stops (long polls held open right now)."""
        return self.store.counts()

    def wait_until(self, predicate: Callable[["Platform"], bool], timeout: float) -> bool:
        """Wait until `predicate(self)` holds, re-checked on every recorded
        event or state change. False on timeout (or when closed)."""
        store = self.store
        deadline = time.monotonic() + timeout
        with store.mutex:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or store.closed:
                    return False
                store.changed.wait(remaining)
            return True

    def wait_final(self, job_ids: Iterable[str], timeout: float) -> bool:
        """Wait until every job in `job_ids` is in a final state."""
        ids = list(job_ids)

        def done(p: "Platform") -> bool:
            return all(p.store.get(i).status in FINAL_STATES for i in ids)

        with self.store.mutex:
            for i in ids:
                self.store.get(i)  # KeyError early for an unknown id
        return self.wait_until(done, timeout)

    # ------------------------------------------------------------ faults
    def set_down(self, seconds: float) -> None:
        """For `seconds` from now, every worker-side request answers 503."""
        self._down_until = time.monotonic() + seconds

    def is_down(self) -> bool:
        """True while `set_down` is in force."""
        return time.monotonic() < self._down_until

    def pause(self, seconds: float) -> None:
        """Sleep `seconds` (a take's cost, an injected delay); `close()` ends it early."""
        self._closed_event.wait(seconds)

    @property
    def job_timeout(self) -> Optional[float]:
        """Seconds of silence after which an in-progress job is requeued (None: off)."""
        return self._job_timeout

    @job_timeout.setter
    def job_timeout(self, value: Optional[float]) -> None:
        with self.store.mutex:
            self._job_timeout = value
            self.store.reaper_wake.notify_all()

    # ------------------------------------------------------------ internals
    def _reap_loop(self) -> None:
        store = self.store
        with store.mutex:
            while not store.closed:
                wait = store.reap(self._job_timeout)
                store.reaper_wake.wait(wait)

    def _on_final(self, job: JobRecord) -> None:
        # Called under the store mutex: only start a thread here.
        if job.webhook:
            payload = job.status_dict()
            payload.pop("stream", None)
            threading.Thread(
                target=_send_webhook,
                args=(job.webhook, payload),
                name=f"slotworker-platform-webhook-{job.id}",
                daemon=True,
            ).start()


def _send_webhook(url: str, payload: Dict[str, Any]) -> bool:
    """POST `payload` as JSON to `url`, with a few retries and backoff."""
    data = json.dumps(payload).encode("utf-8")
    backoff = Backoff(*WEBHOOK_BACKOFF)
    for attempt in range(1, WEBHOOK_ATTEMPTS + 1):
        req = urllib.request.Request(
            url, data=data, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                resp.read()
                if 200 <= resp.status < 300:
                    return True
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.warning("webhook %s for job %s failed (attempt %d/%d): %s",
                        url, payload.get("id"), attempt, WEBHOOK_ATTEMPTS, exc)
        if attempt < WEBHOOK_ATTEMPTS:
            time.sleep(backoff.next())
    log.error("webhook %s for job %s gave up after %d attempts", url, payload.get("id"), WEBHOOK_ATTEMPTS)
    return False
