"""Job state of the local platform: the queue, the jobs, the recorded events.

Everything here is guarded by one re-entrant mutex, shared by all the
Conditions (as in CPython's `queue.Queue`). It is re-entrant because
`wait_until` predicates call back into the public API (`counts`, `status`)
while the mutex is held. Nothing here touches a socket.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Tuple

IN_QUEUE = "IN_QUEUE"
IN_PROGRESS = "IN_PROGRESS"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
CANCELLED = "CANCELLED"
TIMED_OUT = "TIMED_OUT"
FINAL_STATES = frozenset({COMPLETED, FAILED, CANCELLED, TIMED_OUT})

_MISSING = object()

#: In-progress changes kept for the console's timeline (two per job).
ACTIVITY_KEPT = 20_000
#: Take records kept for the console's timeline, beside the full event list.
TAKES_KEPT = 5_000


@dataclass
class RequestRecord:
    """One worker-side request as the platform saw it.

    `t_start` / `t_end` are `time.monotonic()` at arrival and when the answer
    was written (or the connection dropped). `status` is the HTTP code
    answered, 0 when the connection was dropped without an answer.
    """

    kind: str
    t_start: float
    t_end: float = 0.0
    worker_id: str = ""
    job_ids: List[str] = field(default_factory=list)
    query: Dict[str, str] = field(default_factory=dict)
    headers: Dict[str, str] = field(default_factory=dict)
    body: str = ""
    status: int = 0
    requested: int = 0
    given: int = 0
    job_in_progress: Optional[bool] = None
    # What was requested, and which fault (if any) hit it.
    method: str = ""
    path: str = ""
    fault: Optional[str] = None


@dataclass
class JobRecord:
    """A job's state and timing (monotonic seconds), for tests and benchmarks."""

    id: str
    input: Any
    extra: Dict[str, Any] = field(default_factory=dict)
    webhook: Optional[str] = None
    status: str = IN_QUEUE
    output: Any = _MISSING
    error: Any = _MISSING
    progress: Any = _MISSING
    stop_pod: bool = False
    stream: List[Any] = field(default_factory=list)
    submitted_at: float = 0.0
    first_taken_at: Optional[float] = None
    taken_at: Optional[float] = None
    finished_at: Optional[float] = None
    worker_id: Optional[str] = None
    last_seen: float = 0.0
    takes: int = 0
    retried: int = 0
    stream_cursor: int = 0

    def has_output(self) -> bool:
        """True when a result (or, in progress, a progress update) carried output."""
        return self.output is not _MISSING

    def has_error(self) -> bool:
        """True when a final result carried an error."""
        return self.error is not _MISSING

    def has_progress(self) -> bool:
        """True when a progress update was posted."""
        return self.progress is not _MISSING

    def snapshot(self) -> "JobRecord":
        """A copy safe to hand out of the lock."""
        return replace(self, stream=list(self.stream), extra=dict(self.extra))

    def wire(self) -> Dict[str, Any]:
        """The job object a take hands to a worker."""
        obj: Dict[str, Any] = {"id": self.id, "input": self.input}
        obj.update(self.extra)
        return obj

    def status_dict(self) -> Dict[str, Any]:
        """The client-facing status object."""
        d: Dict[str, Any] = {"id": self.id, "status": self.status}
        if self.status in FINAL_STATES:
            if self.output is not _MISSING:
                d["output"] = self.output
            if self.error is not _MISSING:
                d["error"] = self.error
        elif self.status == IN_PROGRESS and self.progress is not _MISSING:
            d["output"] = self.progress
        d["stream"] = list(self.stream)
        if self.taken_at is not None:
            d["delayTime"] = int(round((self.taken_at - self.submitted_at) * 1000))
            if self.finished_at is not None:
                d["executionTime"] = int(round((self.finished_at - self.taken_at) * 1000))
        if self.worker_id is not None:
            d["workerId"] = self.worker_id
        if self.stop_pod:
            d["stopPod"] = True
        return d


class JobStore:
    """The queue and every job, plus the recorded events.

    Conditions, all over `mutex`:
      - `jobs_ready`: notified when something is queued, and at close;
        waited on by takes (long poll).
      - `stops_ready`: notified when a stop is queued for a worker, and at
        close; waited on by stop-channel polls.
      - `changed`: notified on every recorded event and state change, and at
        close; waited on by `wait_until`, runsync and the /stream long poll.
      - `reaper_wake`: notified when a job is taken, when the job timeout
        changes, and at close; waited on (with a timeout) by the reaper.
    """

    def __init__(self) -> None:
        self.mutex = threading.RLock()
        self.jobs_ready = threading.Condition(self.mutex)
        self.stops_ready = threading.Condition(self.mutex)
        self.changed = threading.Condition(self.mutex)
        self.reaper_wake = threading.Condition(self.mutex)
        self.closed = False
        # The queue holds ("job", JobRecord) and ("raw", value); a job that
        # left IN_QUEUE while still in the deque is skipped when reached.
        self._queue: Deque[Tuple[str, Any]] = collections.deque()
        self._jobs: Dict[str, JobRecord] = {}
        self._in_progress: Dict[str, JobRecord] = {}
        self._stops: Dict[str, List[str]] = {}
        self._workers_seen: Dict[str, float] = {}
        self._events: List[RequestRecord] = []
        self._event_seqs: List[int] = []
        self._seq = itertools.count()
        self._counts = {
            "submitted": 0,
            "queued": 0,
            "in_progress": 0,
            "completed": 0,
            "failed": 0,
            "cancelled": 0,
            "duplicates": 0,
            "late": 0,
            "requeued": 0,
            "takes": 0,
            "unknown": 0,
            "raw_queued": 0,
            "waiting_takes": 0,
            "waiting_stops": 0,
        }
        self._final_listeners: List[Callable[[JobRecord], None]] = []
        # For the console: jobs in progress per worker, the last changes of
        # those counts as (time, worker, before, after), and the last takes;
        # bounded, so a long run does not grow them.
        self._held: Dict[str, int] = {}
        self._activity: Deque[Tuple[float, str, int, int]] = collections.deque(maxlen=ACTIVITY_KEPT)
        self._recent_takes: Deque[RequestRecord] = collections.deque(maxlen=TAKES_KEPT)

    # ------------------------------------------------------------ helpers
    _STATE_COUNTER = {
        IN_QUEUE: "queued",
        IN_PROGRESS: "in_progress",
        COMPLETED: "completed",
        FAILED: "failed",
        CANCELLED: "cancelled",
    }

    def _set_status(self, job: JobRecord, new: str) -> None:
        was_running = job.status == IN_PROGRESS
        old = self._STATE_COUNTER.get(job.status)
        if old is not None:
            self._counts[old] -= 1
        job.status = new
        key = self._STATE_COUNTER.get(new)
        if key is not None:
            self._counts[key] += 1
        if new == IN_PROGRESS:
            self._in_progress[job.id] = job
        else:
            self._in_progress.pop(job.id, None)
        if was_running != (new == IN_PROGRESS) and job.worker_id is not None:
            self._note_held(job.worker_id, 1 if new == IN_PROGRESS else -1)

    def _note_held(self, worker: str, delta: int) -> None:
        before = self._held.get(worker, 0)
        after = before + delta
        if after:
            self._held[worker] = after
        else:
            self._held.pop(worker, None)
        self._activity.append((time.monotonic(), worker, before, after))

    def _finish(self, job: JobRecord, new: str, now: float) -> None:
        self._set_status(job, new)
        job.finished_at = now
        for listener in self._final_listeners:
            listener(job)

    def _waiting(self, key: str, delta: int) -> None:
        # Long polls held open, so tests can wait for "the take is parked".
        self._counts[key] += delta
        self.changed.notify_all()

    def on_final(self, listener: Callable[[JobRecord], None]) -> None:
        """Call `listener(job)` (under the mutex; must not block) on every final state."""
        self._final_listeners.append(listener)

    def close(self) -> None:
        """Wake every waiter; later waits return at once."""
        with self.mutex:
            self.closed = True
            for cond in (self.jobs_ready, self.stops_ready, self.changed, self.reaper_wake):
                cond.notify_all()

    # ------------------------------------------------------------ events
    def begin_event(self) -> int:
        """A sequence number fixing the event's place (arrival order)."""
        return next(self._seq)

    def record(self, seq: int, event: RequestRecord) -> None:
        """Publish a finished event at its arrival position."""
        with self.mutex:
            i = bisect.bisect(self._event_seqs, seq)
            self._event_seqs.insert(i, seq)
            self._events.insert(i, event)
            if event.kind in ("take", "take_batch"):
                self._counts["takes"] += 1
                self._recent_takes.append(event)
            self.changed.notify_all()

    def events(self) -> List[RequestRecord]:
        with self.mutex:
            return list(self._events)

    def recent_takes(self) -> List[RequestRecord]:
        """The last `TAKES_KEPT` take records, in the order they were answered."""
        with self.mutex:
            return list(self._recent_takes)

    def activity(self) -> Tuple[List[Tuple[float, str, int, int]], Dict[str, int]]:
        """The last `ACTIVITY_KEPT` changes of a worker's in-progress count,
        as (monotonic time, worker, before, after) in time order, and the
        counts now."""
        with self.mutex:
            return list(self._activity), dict(self._held)

    def workers(self) -> Dict[str, Tuple[float, int]]:
        """Every worker seen: (monotonic time last seen, jobs in progress now)."""
        with self.mutex:
            seen = dict(self._workers_seen)
            for worker in self._held:
                seen.setdefault(worker, 0.0)
            return {w: (t, self._held.get(w, 0)) for w, t in seen.items()}

    # ------------------------------------------------------------ client side
    def submit(
        self,
        input: Any,
        job_id: Optional[str] = None,
        webhook: Optional[str] = None,
        extra: Optional[Dict[str, Any]] = None,
    ) -> str:
        now = time.monotonic()
        with self.mutex:
            if job_id is None:
                job_id = str(uuid.uuid4())
            elif job_id in self._jobs:
                raise ValueError(f"job id already submitted: {job_id!r}")
            job = JobRecord(
                id=job_id,
                input=input,
                extra=dict(extra or {}),
                webhook=webhook,
                status="",
                submitted_at=now,
                last_seen=now,
            )
            self._jobs[job_id] = job
            self._set_status(job, IN_QUEUE)
            self._counts["submitted"] += 1
            self._queue.append(("job", job))
            self.jobs_ready.notify()
            self.changed.notify_all()
            return job_id

    def submit_raw(self, obj: Any) -> None:
        with self.mutex:
            self._queue.append(("raw", obj))
            self._counts["raw_queued"] += 1
            self.jobs_ready.notify()
            self.changed.notify_all()

    def get(self, job_id: str) -> JobRecord:
        """The live record (caller holds the mutex) — KeyError when unknown."""
        return self._jobs[job_id]

    def status(self, job_id: str) -> Dict[str, Any]:
        with self.mutex:
            return self._jobs[job_id].status_dict()

    def snapshot(self, job_id: str) -> JobRecord:
        with self.mutex:
            return self._jobs[job_id].snapshot()

    def snapshots(self) -> List[JobRecord]:
        with self.mutex:
            return [j.snapshot() for j in self._jobs.values()]

    def page(self, before: Optional[int], limit: int) -> Tuple[int, List[Tuple[int, JobRecord]]]:
        """The total number of jobs, and snapshots of up to `limit` of them,
        newest first, each with its submission index; only those with an
        index below `before` when given."""
        with self.mutex:
            total = len(self._jobs)
            end = total if before is None else max(0, min(before, total))
            # Walked from the newest end, so the newest page costs `limit`
            # steps however many jobs there are.
            newest_first = itertools.islice(reversed(self._jobs.values()), total - end, total - end + limit)
            return total, [(end - 1 - i, job.snapshot()) for i, job in enumerate(newest_first)]

    def cancel(self, job_id: str) -> Dict[str, Any]:
        now = time.monotonic()
        with self.mutex:
            job = self._jobs[job_id]
            if job.status == IN_QUEUE:
                self._finish(job, CANCELLED, now)
            elif job.status == IN_PROGRESS:
                worker = job.worker_id
                self._finish(job, CANCELLED, now)
                if worker is not None:
                    self._queue_stop(worker, job_id)
            self.changed.notify_all()
            return job.status_dict()

    def stop_jobs(self, ids: Iterable[str]) -> None:
        with self.mutex:
            for job_id in ids:
                job = self._jobs.get(job_id)
                if job is not None and job.worker_id is not None:
                    self._queue_stop(job.worker_id, job_id)

    def _queue_stop(self, worker: str, job_id: str) -> None:
        pending = self._stops.setdefault(worker, [])
        if job_id not in pending:
            pending.append(job_id)
        self.stops_ready.notify_all()

    def counts(self) -> Dict[str, int]:
        with self.mutex:
            return dict(self._counts)

    def health(self, idle_window: float = 60.0) -> Dict[str, Any]:
        now = time.monotonic()
        with self.mutex:
            running = {j.worker_id for j in self._in_progress.values()}
            idle = [
                w for w, seen in self._workers_seen.items()
                if w not in running and now - seen <= idle_window
            ]
            return {
                "jobs": {
                    "completed": self._counts["completed"],
                    "failed": self._counts["failed"],
                    "inProgress": self._counts["in_progress"],
                    "inQueue": self._counts["queued"],
                    "retried": self._counts["requeued"],
                },
                "workers": {"idle": len(idle), "running": len(running)},
            }

    # ------------------------------------------------------------ worker side
    def seen_worker(self, worker: str) -> None:
        with self.mutex:
            self._workers_seen[worker] = time.monotonic()

    def take(self, worker: str, n: int, deadline: float) -> List[Tuple[str, Any]]:
        """Wait until `deadline` for something queued, then assign up to `n` items.

        Returns [("job", JobRecord) | ("raw", value)], empty on timeout/close.
        """
        with self.mutex:
            items = self._pop(worker, n)
            if not items:
                self._waiting("waiting_takes", +1)
                try:
                    while not items and not self.closed:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self.jobs_ready.wait(remaining)
                        items = self._pop(worker, n)
                finally:
                    self._waiting("waiting_takes", -1)
            if items:
                self.reaper_wake.notify_all()
                self.changed.notify_all()
                # Another taker may find what this one left.
                if self._queue:
                    self.jobs_ready.notify()
            return items

    def _pop(self, worker: str, n: int) -> List[Tuple[str, Any]]:
        items: List[Tuple[str, Any]] = []
        now = time.monotonic()
        while self._queue and len(items) < n:
            kind, obj = self._queue.popleft()
            if kind == "raw":
                self._counts["raw_queued"] -= 1
                items.append((kind, obj))
                continue
            job = obj
            if job.status != IN_QUEUE:
                continue  # cancelled or finished while queued
            job.worker_id = worker  # before the status: its worker's count changes
            self._set_status(job, IN_PROGRESS)
            job.taken_at = now
            if job.first_taken_at is None:
                job.first_taken_at = now
            job.last_seen = now
            job.takes += 1
            items.append((kind, job))
        return items

    def post_result(self, worker: str, job_id: str, body: Dict[str, Any]) -> str:
        """Record a job-done post. Returns the outcome:
        "progress", "final", "duplicate", "late" or "unknown"."""
        now = time.monotonic()
        with self.mutex:
            job = self._jobs.get(job_id)
            if job is None:
                self._counts["unknown"] += 1
                outcome = "unknown"
            elif body.get("status") == IN_PROGRESS:
                job.last_seen = now
                if job.status not in FINAL_STATES:
                    job.progress = body.get("output")
                outcome = "progress"
            elif job.status == CANCELLED:
                self._counts["late"] += 1
                outcome = "late"
            elif job.status in FINAL_STATES:
                self._counts["duplicates"] += 1
                outcome = "duplicate"
            else:
                # Accepted from IN_PROGRESS, and from IN_QUEUE too (the job
                # timed out and was requeued, then its first worker finished).
                if "output" in body:
                    job.output = body["output"]
                if "error" in body:
                    job.error = body["error"]
                job.stop_pod = bool(body.get("stopPod"))
                if job.worker_id is None:
                    job.worker_id = worker
                self._finish(job, FAILED if "error" in body else COMPLETED, now)
                outcome = "final"
            self.changed.notify_all()
            return outcome

    def post_stream(self, job_id: str, body: Any) -> str:
        """Append a stream chunk. Returns "stream", "late" or "unknown"."""
        now = time.monotonic()
        with self.mutex:
            job = self._jobs.get(job_id)
            if job is None:
                self._counts["unknown"] += 1
                return "unknown"
            job.last_seen = now
            if job.status in FINAL_STATES:
                return "late"
            chunk = body.get("output") if isinstance(body, dict) else body
            job.stream.append(chunk)
            self.changed.notify_all()
            return "stream"

    def ping(self, worker: str, job_ids: Iterable[str]) -> None:
        now = time.monotonic()
        with self.mutex:
            self._workers_seen[worker] = now
            for job_id in job_ids:
                job = self._in_progress.get(job_id)
                if job is not None:
                    job.last_seen = now

    def take_stops(self, worker: str, deadline: float) -> List[str]:
        """Wait until `deadline` for stops of `worker`; each id is delivered once."""
        with self.mutex:
            if not self._stops.get(worker):
                self._waiting("waiting_stops", +1)
                try:
                    while not self._stops.get(worker) and not self.closed:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self.stops_ready.wait(remaining)
                finally:
                    self._waiting("waiting_stops", -1)
            return self._stops.pop(worker, [])

    def stream_since_cursor(self, job_id: str, deadline: float, everything: bool) -> Dict[str, Any]:
        """The /stream answer: chunks not yet returned by /stream (or all),
        waiting until `deadline` for one when there is none and the job runs."""
        with self.mutex:
            job = self._jobs[job_id]
            while not everything:
                if (
                    job.stream_cursor < len(job.stream)
                    or job.status in FINAL_STATES
                    or self.closed
                ):
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.changed.wait(remaining)
            start = 0 if everything else job.stream_cursor
            chunks = job.stream[start:]
            job.stream_cursor = len(job.stream)
            d: Dict[str, Any] = {
                "id": job.id,
                "status": job.status,
                "stream": [{"output": c} for c in chunks],
            }
            if job.status in FINAL_STATES and job.error is not _MISSING:
                d["error"] = job.error
            return d

    def wait_final(self, job_id: str, deadline: float) -> Dict[str, Any]:
        with self.mutex:
            job = self._jobs[job_id]
            while job.status not in FINAL_STATES and not self.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.changed.wait(remaining)
            return job.status_dict()

    # ------------------------------------------------------------ job timeout
    def reap(self, job_timeout: Optional[float]) -> Optional[float]:
        """Requeue (at the front) every silent in-progress job.

        Returns the seconds until the next job could time out, None if none
        can. Caller holds the mutex.
        """
        if job_timeout is None:
            return None
        now = time.monotonic()
        next_due: Optional[float] = None
        expired = []
        for job in self._in_progress.values():
            due = job.last_seen + job_timeout
            if due <= now:
                expired.append(job)
            elif next_due is None or due - now < next_due:
                next_due = due - now
        # Requeue the oldest last, so that it ends up first in the queue.
        for job in sorted(expired, key=lambda j: j.taken_at or 0.0, reverse=True):
            worker = job.worker_id
            self._set_status(job, IN_QUEUE)
            job.worker_id = None
            job.retried += 1
            job.last_seen = now
            self._counts["requeued"] += 1
            if worker is not None and worker in self._stops and job.id in self._stops[worker]:
                self._stops[worker].remove(job.id)
            self._queue.appendleft(("job", job))
        if expired:
            self.jobs_ready.notify(len(expired))
            self.changed.notify_all()
        return next_due
