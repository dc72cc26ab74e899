"""Job threads: one per slot in use, reused, stopped on shutdown."""

from __future__ import annotations

import threading

from slotworker.worker.job_threads import JobThreads


def test_threads_follow_the_slots_in_use_and_are_reused() -> None:
    done = threading.Semaphore(0)
    gate = threading.Event()
    seen = []

    def run(i: int) -> None:
        gate.wait(30)
        seen.append((i, threading.current_thread().name))
        done.release()

    threads = JobThreads(run, name="test-job")
    for i in range(3):
        threads.submit(i, busy=i + 1)  # three slots in use at once
    gate.set()
    for _ in range(3):
        assert done.acquire(timeout=30)
    for i in range(3, 10):  # one slot at a time from now on: no thread is added
        threads.submit(i, busy=1)
        assert done.acquire(timeout=30)
    assert len(threads) == 3
    assert sorted(i for i, _ in seen) == list(range(10))
    assert {name for _, name in seen} <= {"test-job_0", "test-job_1", "test-job_2"}
    threads.shutdown(wait=True, timeout=30)
    assert not any(t.is_alive() for t in threads._threads)


def test_shutdown_lets_queued_jobs_run_first() -> None:
    ran = []
    threads = JobThreads(ran.append)
    for i in range(5):
        threads.submit(i, busy=1)
    threads.shutdown(wait=True, timeout=30)
    assert ran == [0, 1, 2, 3, 4]
