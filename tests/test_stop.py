"""Stopping running jobs: by the platform's stop channel, and by the per-job timeout.

A plain handler is interrupted by an exception raised asynchronously in its
thread (``PyThreadState_SetAsyncExc``). That exception only lands while the
thread runs Python bytecode: a handler blocked in one long C call, such as
``time.sleep(60)``, is interrupted only when that call returns. So the
handlers here sleep in small steps, and one test pins what happens to a
long sleep (it runs to its end, then the job is stopped, with no result).
CPython only: elsewhere a plain handler cannot be interrupted.
"""

from __future__ import annotations

import platform as _platform
import threading
import time
from typing import Any, Dict, Iterator

import pytest

from support import WorkerThread

DEADLINE = 20.0

cpython_only = pytest.mark.skipif(_platform.python_implementation() != "CPython",
                                  reason="async exceptions in threads need CPython")


class Handlers:
    """Handlers that run until released, and record how they ended."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.cond = threading.Condition()
        self.started: Dict[str, float] = {}
        self.ended: Dict[str, str] = {}

    def _start(self, job: Dict[str, Any]) -> None:
        with self.cond:
            self.started[job["id"]] = time.monotonic()
            self.cond.notify_all()

    def _end(self, job: Dict[str, Any], how: str) -> None:
        with self.cond:
            self.ended[job["id"]] = how
            self.cond.notify_all()

    def wait(self, predicate: Any, timeout: float = DEADLINE) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout)

    def stepping(self, job: Dict[str, Any]) -> Any:
        """Sleeps in small steps until released; swallows every ``Exception``."""
        self._start(job)
        try:
            while not self.release.is_set():
                try:
                    time.sleep(0.01)
                except Exception:  # handler code that swallows errors cannot swallow a stop
                    pass
        finally:
            self._end(job, "exited")
        return {"done": job["id"]}

    def busy(self, job: Dict[str, Any]) -> Any:
        """A pure-Python busy loop, no calls out, inside ``except Exception``."""
        self._start(job)
        n = 0
        try:
            while True:
                try:
                    n += 1
                    if n % 100000 == 0 and self.release.is_set():
                        break
                except Exception:
                    pass
        finally:
            self._end(job, "exited")
        return n

    def streaming(self, job: Dict[str, Any]) -> Iterator[int]:
        self._start(job)
        i = 0
        try:
            while not self.release.is_set():
                yield i
                i += 1
                time.sleep(0.02)
        finally:
            self._end(job, "exited")


def done_posts(platform: Any, job_id: str) -> list:
    return [e for e in platform.events if e.kind == "done" and job_id in e.job_ids]


def running(platform: Any, job_id: str) -> bool:
    return platform.status(job_id)["status"] == "IN_PROGRESS"


@cpython_only
def test_stop_ends_exactly_the_named_jobs_and_the_others_run_on(platform):
    h = Handlers()
    ids = [platform.submit({"i": i}) for i in range(4)]
    with WorkerThread(platform, h.stepping, concurrency=4):
        assert h.wait(lambda: len(h.started) == 4)
        stopped, kept = ids[:2], ids[2:]
        platform.stop_jobs(stopped)
        assert h.wait(lambda: set(stopped) <= set(h.ended))
        assert not set(kept) & set(h.ended)
        h.release.set()
        assert platform.wait_final(kept, DEADLINE)
        for job_id in kept:
            assert platform.status(job_id)["output"] == {"done": job_id}
        # The stopped jobs send nothing: still IN_PROGRESS as far as the platform knows.
        for job_id in stopped:
            assert running(platform, job_id)
            assert done_posts(platform, job_id) == []
    assert platform.counts()["duplicates"] == 0


@cpython_only
def test_stop_interrupts_a_pure_python_busy_loop_and_frees_its_slot(platform):
    h = Handlers()
    first = platform.submit({"i": 0})
    with WorkerThread(platform, h.busy, concurrency=1):
        assert h.wait(lambda: first in h.started)
        second = platform.submit({"i": 1})
        platform.stop_jobs([first])
        assert h.wait(lambda: first in h.ended)
        # The one slot is free again: the next job runs.
        assert h.wait(lambda: second in h.started)
        h.release.set()
        assert platform.wait_final([second], DEADLINE)
        assert done_posts(platform, first) == []


@cpython_only
def test_a_long_sleep_is_stopped_when_it_returns_and_sends_no_result(platform):
    h = Handlers()

    def sleeper(job: Dict[str, Any]) -> Any:
        h._start(job)
        time.sleep(1.0)  # one C call: the stop lands when it returns
        h._end(job, "after-sleep")  # never reached: the stop lands first
        return "finished"

    job_id = platform.submit({})
    with WorkerThread(platform, sleeper, concurrency=1):
        assert h.wait(lambda: job_id in h.started)
        platform.stop_jobs([job_id])
        after = platform.submit({})
        assert platform.wait_final([after], DEADLINE)
        assert job_id not in h.ended
        assert done_posts(platform, job_id) == []
        assert running(platform, job_id)


def test_stop_ends_a_generator_at_its_next_yield(platform):
    h = Handlers()
    job_id = platform.submit({})
    with WorkerThread(platform, h.streaming, concurrency=1):
        assert platform.wait_until(lambda p: len(p.status(job_id)["stream"]) >= 2, DEADLINE)
        platform.stop_jobs([job_id])
        assert h.wait(lambda: job_id in h.ended)
        after = platform.submit({})
        assert platform.wait_until(lambda p: len(p.status(after)["stream"]) >= 1, DEADLINE)
        h.release.set()
        assert platform.wait_final([after], DEADLINE)
        assert done_posts(platform, job_id) == []
        assert running(platform, job_id)


@cpython_only
def test_cancel_stops_the_job_on_its_worker_and_nothing_comes_late(platform):
    h = Handlers()
    job_id = platform.submit({})
    with WorkerThread(platform, h.stepping, concurrency=1):
        assert h.wait(lambda: job_id in h.started)
        platform.cancel(job_id)
        assert h.wait(lambda: job_id in h.ended)
        after = platform.submit({})
        h.release.set()
        assert platform.wait_final([after], DEADLINE)
    assert platform.status(job_id)["status"] == "CANCELLED"
    counts = platform.counts()
    assert counts["late"] == 0 and counts["duplicates"] == 0, counts


def test_stop_for_a_job_not_running_here_changes_nothing(platform):
    job_id = platform.submit({})
    with WorkerThread(platform, lambda job: "ok", concurrency=1):
        assert platform.wait_final([job_id], DEADLINE)
        platform.stop_jobs([job_id, "no-such-job"])
        after = platform.submit({})
        assert platform.wait_final([after], DEADLINE)
    assert platform.status(job_id)["status"] == "COMPLETED"


# -- per-job timeout -----------------------------------------------------------
@cpython_only
def test_job_past_its_timeout_is_interrupted_and_reported_as_a_timeout(platform):
    h = Handlers()
    slow = platform.submit({})
    with WorkerThread(platform, h.busy, concurrency=2, job_timeout=0.5):
        assert platform.wait_final([slow], DEADLINE)
        assert slow in h.ended
    status = platform.status(slow)
    assert status["status"] == "FAILED"
    assert "timed out" in str(status["error"]) and "0.5" in str(status["error"])


def test_generator_past_its_timeout_is_reported_as_a_timeout(platform):
    h = Handlers()
    job_id = platform.submit({})
    with WorkerThread(platform, h.streaming, concurrency=1, job_timeout=0.5):
        assert platform.wait_final([job_id], DEADLINE)
    status = platform.status(job_id)
    assert status["status"] == "FAILED"
    assert "timed out" in str(status["error"])


def test_jobs_within_their_timeout_are_not_touched(platform):
    ids = [platform.submit({"i": i}) for i in range(6)]
    with WorkerThread(platform, lambda job: job["input"]["i"], concurrency=3, job_timeout=10):
        assert platform.wait_final(ids, DEADLINE)
    assert [platform.status(j)["output"] for j in ids] == list(range(6))


def test_the_timeout_watchdog_does_not_keep_every_finished_job():
    from slotworker.worker.interruption import RunningJob, Watchdog

    watchdog = Watchdog()
    try:
        for i in range(5000):
            job = RunningJob(f"job-{i}")
            watchdog.arm(job, 3600.0)
            job.finish()
            watchdog.disarm(job)
        assert len(watchdog) < 1000
    finally:
        watchdog.close()


def test_a_stop_that_arrives_before_its_job_starts_is_applied_when_it_does():
    from slotworker.worker.interruption import JobStopped, Registry, RunningJob

    registry = Registry()
    assert registry.stop("early") is False  # assigned to us, not started yet
    job = RunningJob("early")
    registry.add(job)
    assert job.stop_reason is JobStopped
    other = RunningJob("other")
    registry.add(other)
    assert other.stop_reason is None


@cpython_only
def test_a_job_stopped_before_it_starts_never_runs_and_sends_nothing(platform):
    h = Handlers()
    blocker = platform.submit({})
    with WorkerThread(platform, h.stepping, concurrency=1) as worker:
        assert h.wait(lambda: blocker in h.started)
        queued = platform.submit({})
        # The worker's registry learns of the stop before the job is taken.
        worker.worker.registry.stop(queued)
        h.release.set()
        assert platform.wait_final([blocker], DEADLINE)
        assert platform.wait_until(lambda p: p.status(queued)["status"] == "IN_PROGRESS", DEADLINE)
        after = platform.submit({})
        assert platform.wait_final([after], DEADLINE)
    assert queued not in h.started
    assert done_posts(platform, queued) == []


def test_a_plain_job_asked_to_stop_sends_no_result_even_where_it_cannot_be_interrupted(platform):
    # Where no exception can be raised in its thread (PyPy) the handler runs
    # out; either way the platform gets nothing for a stopped job.
    h = Handlers()
    job_id = platform.submit({})
    with WorkerThread(platform, h.stepping, concurrency=1) as worker:
        assert h.wait(lambda: job_id in h.started)
        platform.stop_jobs([job_id])
        assert platform.wait_until(lambda p: any(e.kind == "stop_poll" and job_id in e.job_ids
                                                 for e in p.events), DEADLINE)
        assert worker.worker.registry.ids() == [job_id] or job_id in h.ended
        h.release.set()
        after = platform.submit({})
        assert platform.wait_final([after], DEADLINE)
    assert done_posts(platform, job_id) == []
    assert running(platform, job_id)


def test_a_plain_job_past_its_timeout_reports_the_timeout_even_where_it_cannot_be_interrupted(platform):
    def slow(job: Dict[str, Any]) -> Any:
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            time.sleep(0.01)
        return "too late"

    job_id = platform.submit({})
    with WorkerThread(platform, slow, concurrency=1, job_timeout=0.3):
        assert platform.wait_final([job_id], DEADLINE)
    status = platform.status(job_id)
    assert status["status"] == "FAILED" and "timed out" in str(status["error"])
