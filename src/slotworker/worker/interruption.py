"""Stopping a running job: by the platform's stop channel, or by a timeout.

A generator handler is stopped at its next yield (the runner checks
:attr:`RunningJob.stop_reason` between chunks). A plain handler is
interrupted in its own thread by an asynchronous exception, of a class that
derives from :class:`BaseException` so handler code's ``except Exception:``
cannot swallow it. The exception is only ever raised while the thread is
inside the handler: entering and leaving the handler, and raising, all
happen under the job's lock, and a raise still pending when the handler
returns is withdrawn.

The exception is only delivered when the thread next runs Python bytecode:
a handler blocked in one long C call (``time.sleep(600)``, a blocking read)
is interrupted when that call returns, and its slot stays held until then.
"""

from __future__ import annotations

import collections
import ctypes
import heapq
import itertools
import logging
import platform
import threading
import time
from typing import Dict, List, Optional, Tuple

log = logging.getLogger("slotworker")


#: A stop for a job not (yet) running here is applied if the job starts
#: within this many seconds...
EARLY_STOP_SECONDS = 120.0
#: ...and at most this many such stops are remembered.
EARLY_STOP_MAX = 1024


class JobInterrupted(BaseException):
    """Raised inside a handler's thread to end it; never caught by ``except Exception``."""


class JobStopped(JobInterrupted):
    """The platform asked for this job to stop: it sends no result."""


class JobTimedOut(JobInterrupted):
    """The job ran past its configured timeout: it is reported as an error."""


def _async_raise_supported() -> bool:
    return platform.python_implementation() == "CPython" and hasattr(ctypes, "pythonapi")


def _set_async_exc(thread_id: int, exc: Optional[type]) -> int:
    func = ctypes.pythonapi.PyThreadState_SetAsyncExc
    func.argtypes = (ctypes.c_ulong, ctypes.py_object)
    func.restype = ctypes.c_int
    return func(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else ctypes.py_object())


class RunningJob:
    """One job while its thread runs it."""

    __slots__ = ("job_id", "thread_id", "stop_reason", "in_handler", "done", "_raised", "_lock")

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.thread_id = threading.get_ident()
        self.stop_reason: Optional[type] = None  # JobStopped or JobTimedOut once asked
        self.in_handler = False
        self.done = False
        self._raised = False
        self._lock = threading.Lock()

    def enter_handler(self) -> None:
        """Mark the thread as inside user code; raises at once if already stopped."""
        with self._lock:
            if self.stop_reason is not None:
                raise self.stop_reason(self.job_id)
            self.in_handler = True

    def leave_handler(self) -> None:
        """Mark the thread as out of user code, withdrawing a raise not yet delivered."""
        with self._lock:
            self.in_handler = False
            if self._raised and _async_raise_supported():
                _set_async_exc(self.thread_id, None)
            self._raised = False

    def finish(self) -> None:
        """The job is over: later stops and timeouts are no-ops."""
        with self._lock:
            self.done = True

    def interrupt(self, reason: type) -> bool:
        """Ask the job to end for ``reason``; True if this is the first ask."""
        with self._lock:
            if self.done or self.stop_reason is not None:
                return False
            self.stop_reason = reason
            if self.in_handler and _async_raise_supported():
                if _set_async_exc(self.thread_id, reason) == 1:
                    self._raised = True
            return True


class Watchdog:
    """Interrupts jobs that pass their deadline; one thread for all of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # deadline_changed: notified when a job is armed earlier than the
        # current earliest, or on close; waited on by the watchdog thread.
        self._deadline_changed = threading.Condition(self._lock)
        self._heap: List[Tuple[float, int, RunningJob]] = []
        self._seq = itertools.count()
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        self._finished = 0  # entries in the heap whose job is over

    def __len__(self) -> int:
        """Entries in the deadline heap (finished jobs included until compacted)."""
        return len(self._heap)

    def disarm(self, job: RunningJob) -> None:
        """``job`` is over (already :meth:`RunningJob.finish`-ed): its entry may go.

        Entries are not removed one by one (that is O(n)); once most of the
        heap is finished jobs it is rebuilt, so a long timeout at a high job
        rate does not keep every job ever run in memory until its deadline.
        """
        with self._lock:
            self._finished += 1
            if self._finished > 256 and self._finished * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].done]
                heapq.heapify(self._heap)
                self._finished = 0

    def arm(self, job: RunningJob, seconds: float) -> None:
        """Interrupt ``job`` with :class:`JobTimedOut` after ``seconds``."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="slotworker-watchdog", daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._seq), job))
            self._deadline_changed.notify()

    def close(self) -> None:
        """Stop the watchdog thread (idempotent)."""
        with self._lock:
            self._closed = True
            self._deadline_changed.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closed:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    timeout = self._heap[0][0] - now if self._heap else None
                    self._deadline_changed.wait(timeout)
                if self._closed:
                    return
                _, _, job = heapq.heappop(self._heap)
                if job.done and self._finished > 0:
                    self._finished -= 1
            # Finished jobs are left in the heap; interrupting them is a no-op
            # because the runner marks them done on exit.
            if job.interrupt(JobTimedOut):
                log.warning("job ran past its timeout; interrupting it", extra={"job_id": job.job_id})


class Registry:
    """The jobs running on this worker, by id.

    A stop can arrive before its job is registered: the platform assigns a
    job, then names it on the stop channel, while the take's answer is still
    on its way to the fetch thread or the job's thread is starting. Such
    stops are remembered for a while (:data:`EARLY_STOP_SECONDS`, at most
    :data:`EARLY_STOP_MAX` of them) and applied when the job is added.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: Dict[str, RunningJob] = {}
        self._early: "collections.OrderedDict[str, float]" = collections.OrderedDict()

    def add(self, job: RunningJob) -> bool:
        """Register a job that starts running here (stopping it at once if asked already).

        False, and nothing registered, when a job with its id runs here already.
        """
        with self._lock:
            if job.job_id in self._jobs:
                return False
            self._jobs[job.job_id] = job
            asked = self._early.pop(job.job_id, None)
        if asked is not None and time.monotonic() - asked <= EARLY_STOP_SECONDS:
            job.interrupt(JobStopped)
        return True

    def remove(self, job: RunningJob) -> None:
        with self._lock:
            if self._jobs.get(job.job_id) is job:
                del self._jobs[job.job_id]

    def ids(self) -> List[str]:
        with self._lock:
            return list(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def stop(self, job_id: str) -> bool:
        """Stop the job with this id if it runs here; else remember the ask for a while."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                now = time.monotonic()
                self._early[job_id] = now
                self._early.move_to_end(job_id)
                while self._early and (len(self._early) > EARLY_STOP_MAX
                                       or now - next(iter(self._early.values())) > EARLY_STOP_SECONDS):
                    self._early.popitem(last=False)
        if job is None:
            return False
        return job.interrupt(JobStopped)
