"""Job threads: one per slot in use, reused, stopped on shutdown."""

from __future__ import annotations

import threading

import pytest

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


def _blocked_jobs(count: int):
    """A target whose jobs wait on a gate, and a way to wait until ``count`` of them are in."""
    gate = threading.Event()
    inside = threading.Condition()
    names = []

    def run(i: int) -> None:
        with inside:
            names.append(threading.current_thread().name)
            inside.notify_all()
        gate.wait(30)

    def wait_inside() -> bool:
        with inside:
            return inside.wait_for(lambda: len(names) >= count, timeout=30)

    return run, gate, names, wait_inside


def test_a_batch_gets_a_thread_per_slot_started_by_its_submitter() -> None:
    run, gate, names, wait_inside = _blocked_jobs(40)
    threads = JobThreads(run, name="test-job")
    threads.submit_all([(i,) for i in range(40)], busy=40)
    try:
        assert len(threads) == 40  # all started before submit_all returned
        assert wait_inside()  # every job runs at once: one thread each
        assert len(set(names)) == 40
    finally:
        gate.set()
        threads.shutdown(wait=True, timeout=30)
    assert not any(t.is_alive() for t in threads._threads)


def test_more_slots_in_a_later_lot_get_their_threads_too() -> None:
    run, gate, names, wait_inside = _blocked_jobs(30)
    threads = JobThreads(run, name="test-job")
    threads.submit_all([(i,) for i in range(10)], busy=10)
    threads.submit_all([(i,) for i in range(10, 30)], busy=30)
    try:
        assert wait_inside()
        assert len(threads) == 30
    finally:
        gate.set()
        threads.shutdown(wait=True, timeout=30)


def test_a_thread_that_cannot_start_leaves_its_jobs_to_the_threads_there_are(records) -> None:
    ran = []
    done = threading.Semaphore(0)

    def run(i: int) -> None:
        ran.append(i)
        done.release()

    threads = JobThreads(run, name="test-job")
    original = threads._start_thread_locked

    def only_three(serve):  # the process may start no more threads
        if len(threads._threads) >= 3:
            raise RuntimeError("can't start new thread")
        original(serve)

    threads._start_thread_locked = only_three
    threads.submit_all([(i,) for i in range(20)], busy=20)
    for _ in range(20):
        assert done.acquire(timeout=30)
    assert sorted(ran) == list(range(20))
    assert records.wait_for("could not start a job thread")
    assert len(threads) == 3
    threads.shutdown(wait=True, timeout=30)


def test_no_thread_at_all_is_an_error_for_the_submitter() -> None:
    threads = JobThreads(lambda i: None, name="test-job")

    def refuse(serve):
        raise RuntimeError("can't start new thread")

    threads._start_thread_locked = refuse
    with pytest.raises(RuntimeError, match="can't start new thread"):
        threads.submit(0, busy=1)  # no thread would ever take the job
