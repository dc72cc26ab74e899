"""Result posters: a few reused threads, more only while results wait; none held up by a slow post."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any, Dict, List, Optional

import pytest

from slotworker.platform import Faults
from slotworker.worker import result_poster
from slotworker.worker.result_poster import BASE_THREADS, ResultPoster

from support import WorkerThread, wait_for

DEADLINE = 30.0


def test_posts_one_after_another_reuse_one_thread() -> None:
    poster = ResultPoster(name="test-post")
    ran: List[str] = []
    for i in range(20):
        done = threading.Event()

        def task(i: int = i, done: threading.Event = done) -> None:
            ran.append(threading.current_thread().name)
            done.set()
        poster.submit(task)
        assert done.wait(DEADLINE)
        # Let the thread get back to the queue before the next submit, as
        # a poster does between two results that do not overlap.
        assert wait_for(lambda: poster._idle == 1, DEADLINE)
    assert len(poster) == 1
    assert set(ran) == {"test-post_0"}
    poster.shutdown(wait=True, timeout=DEADLINE)


class HeldPosts:
    """Tasks that stand for posts the platform holds: each runs until :meth:`release`."""

    def __init__(self) -> None:
        self._started = threading.Semaphore(0)
        self._released = threading.Event()
        self.returned = threading.Event()  # a held task has returned
        self.threads: List[str] = []  # the threads that ran one

    def task(self) -> None:
        self.threads.append(threading.current_thread().name)
        self._started.release()
        self._released.wait()
        self.returned.set()

    def wait_started(self, count: int) -> None:
        for _ in range(count):
            assert self._started.acquire(timeout=DEADLINE)

    def release(self) -> None:
        self._released.set()


def test_a_post_that_hangs_does_not_hold_up_the_next() -> None:
    poster = ResultPoster()
    held = HeldPosts()
    later = threading.Event()
    later_on: List[str] = []
    try:
        poster.submit(held.task)
        held.wait_started(1)
        poster.submit(lambda: (later_on.append(threading.current_thread().name), later.set()))
        # The only poster is held: the watch adds one for the result behind.
        assert later.wait(DEADLINE)
        assert not held.returned.is_set()
        assert len(set(held.threads + later_on)) == 2
    finally:
        held.release()
        poster.shutdown(wait=True, timeout=DEADLINE)


def test_a_result_queued_behind_posts_that_all_hang_gets_a_thread(monkeypatch) -> None:
    # Every base poster is held on a post (the platform holds them); no CPU
    # share counts as idle, so only the stall rule can add the thread the
    # result behind them gets.
    monkeypatch.setattr(result_poster, "IDLE_CPU_SHARE", 0.0)
    poster = ResultPoster(name="hang-test", base_threads=2)
    held = HeldPosts()
    later = threading.Event()
    try:
        for _ in range(2):
            poster.submit(held.task)
        held.wait_started(2)
        poster.submit(later.set)
        assert later.wait(DEADLINE)
        assert not held.returned.is_set()
        assert len(set(held.threads)) == 2
    finally:
        held.release()
        poster.shutdown(wait=True, timeout=DEADLINE)
    assert not any(t.name == "hang-test-watch" for t in threading.enumerate())


@pytest.mark.parametrize("base", [1, 2])
def test_tasks_queued_behind_a_taken_one_get_a_thread(base: int) -> None:
    # The idle thread takes the first task; the second, submitted while the
    # first is being taken, must not wait for it: with two base threads it
    # gets the second, with one the watch adds one.
    for _ in range(30):
        poster = ResultPoster(base_threads=base)
        release = threading.Event()
        second = threading.Event()
        poster.submit(lambda: release.wait(DEADLINE))
        poster.submit(second.set)
        assert second.wait(DEADLINE)
        release.set()
        poster.shutdown(wait=True, timeout=DEADLINE)


def test_posts_held_get_a_thread_per_stall_logged_once(monkeypatch, records) -> None:
    # No CPU share counts as idle here, so the watch never adds a thread for
    # results merely waiting (as when the process is busy); posts held past
    # STALL_SECONDS still get one each, and the stall is logged once (INFO),
    # not once per thread added.
    monkeypatch.setattr(result_poster, "IDLE_CPU_SHARE", 0.0)
    poster = ResultPoster()
    held = HeldPosts()
    try:
        for _ in range(3):
            poster.submit(held.task)
        held.wait_started(3)  # each held; the watch added a thread for each in turn
    finally:
        held.release()
        poster.shutdown(wait=True, timeout=DEADLINE)
    stalls = [line for line in records.lines if "no result taken for posting" in line]
    assert [line.split()[0] for line in stalls] == ["INFO", "DEBUG"], stalls
    assert not any("wait on the platform's answers" in line for line in records.lines)


def test_a_result_that_finds_no_poster_free_gets_one_at_once_when_posts_are_slow() -> None:
    # Posts have taken 30 ms (the platform's latency) and a recent look
    # found the CPU idle: a result behind a busy poster would wait as long,
    # so its submit starts a thread there and then, without the watch.
    poster = ResultPoster()
    release, done = threading.Event(), threading.Event()
    try:
        for _ in range(3):
            poster.submit(lambda: (threading.Event().wait(0.03), done.set()))
            assert done.wait(DEADLINE)
            done.clear()
            assert wait_for(lambda: poster._idle == 1, DEADLINE)
        assert poster._post_seconds is not None and poster._post_seconds >= result_poster.GROW_AFTER_WAIT
        with poster._lock:  # as a look just now would have found it
            poster._share, poster._share_at = 0.0, time.monotonic()
        poster.submit(lambda: release.wait(DEADLINE))
        assert wait_for(lambda: poster._idle == 0, DEADLINE)
        poster.submit(release.wait)
        assert len(poster) == 2  # started by submit() itself
    finally:
        release.set()
        poster.shutdown(wait=True, timeout=DEADLINE)


def test_a_look_at_the_cpu_long_ago_does_not_count_once_a_watch_starts() -> None:
    # Slow posts and an idle CPU, but the look that found it idle is old:
    # starting a watch is not a look, so no thread is started at once.
    poster = ResultPoster()
    try:
        with poster._lock:
            poster._post_seconds = 0.05
            poster._share, poster._share_at = 0.0, time.monotonic() - 10 * result_poster.SHARE_FRESH_SECONDS
            assert not poster._slow_posts_on_idle_cpu()
            poster._start_watch_locked()
            assert not poster._slow_posts_on_idle_cpu()
            poster._share_at = time.monotonic()
            assert poster._slow_posts_on_idle_cpu()
    finally:
        poster.shutdown(wait=True, timeout=DEADLINE)


def post_slowly(poster: ResultPoster, count: int) -> None:
    """Submit ``count`` posts that each wait 50 ms on the platform, and wait until all are done."""
    done = threading.Semaphore(0)

    def slow_post() -> None:
        threading.Event().wait(0.05)
        done.release()
    for _ in range(count):
        poster.submit(slow_post)
    for _ in range(count):
        assert done.acquire(timeout=DEADLINE)


@pytest.mark.parametrize("answer_seconds", [None, lambda: 0.05], ids=["task time", "answer time"])
def test_posts_waiting_on_a_slow_platform_get_more_threads(answer_seconds: Any) -> None:
    # Each post waits 50 ms on the platform (measured as the task's time, or
    # as the client's answer time), the CPU idles: past the base threads, one
    # is added per look while results keep waiting.
    poster = ResultPoster(answer_seconds=answer_seconds)
    post_slowly(poster, 200)
    assert len(poster) > BASE_THREADS
    poster.shutdown(wait=True, timeout=DEADLINE)


def test_posts_whose_answers_come_fast_get_no_thread_for_an_idle_cpu(monkeypatch) -> None:
    # The same slow posts (each 50 ms) on an idle CPU, but the platform answers
    # in 0.2 ms: the time goes elsewhere in this process (the GIL behind
    # hundreds of job threads, on a real worker), which another thread
    # would not hide, so none is added. (Stalls are out of the way.)
    # Every look finds the CPU idle, so the watch always goes on to ask the answer time.
    monkeypatch.setattr(result_poster, "STALL_SECONDS", 3600.0)
    monkeypatch.setattr(result_poster, "IDLE_CPU_SHARE", float("inf"))
    looks: List[str] = []

    def answer_seconds() -> float:
        looks.append(threading.current_thread().name)
        return 0.0002
    poster = ResultPoster(answer_seconds=answer_seconds)
    post_slowly(poster, 20)
    assert any(name.endswith("-watch") for name in looks)  # the watch asked, and was told no
    assert len(poster) == BASE_THREADS
    poster.shutdown(wait=True, timeout=DEADLINE)


def test_posts_mostly_waiting_on_the_answer_get_one_more_thread_and_no_more(monkeypatch) -> None:
    # Each post takes 20 ms (or more, on a busy machine), 65 % of it the
    # platform's answer, on an idle CPU: a second poster overlaps its wait
    # with the first one's 35 % here (65 >= 1 x 35), a third would not
    # (65 < 2 x 35). (Stalls are out of the way.)
    monkeypatch.setattr(result_poster, "STALL_SECONDS", 3600.0)
    monkeypatch.setattr(result_poster, "IDLE_CPU_SHARE", float("inf"))
    poster = ResultPoster(answer_seconds=lambda: 0.65 * (poster._post_seconds or 0.02))
    most = 0
    done = threading.Semaphore(0)

    def post() -> None:
        nonlocal most
        most = max(most, len(poster))
        threading.Event().wait(0.02)
        done.release()
    for _ in range(150):
        poster.submit(post)
    for _ in range(150):
        assert done.acquire(timeout=DEADLINE)
    assert most == BASE_THREADS + 1
    poster.shutdown(wait=True, timeout=DEADLINE)


def test_the_answer_rule_counts_the_posters_at_work() -> None:
    poster = ResultPoster(answer_seconds=lambda: 0.2)
    try:
        with poster._lock:
            poster._post_seconds = 0.29  # 0.09 here, 0.2 waiting for the answer
            assert poster._answers_outlast_posting_locked()  # no thread yet
            poster._threads.extend([threading.current_thread()] * 2)  # two at work (stand-ins)
            assert poster._answers_outlast_posting_locked()  # 0.2 >= 2 x 0.09
            poster._threads.append(threading.current_thread())
            assert not poster._answers_outlast_posting_locked()  # 0.2 < 3 x 0.09
            poster._aside = 1  # one of them waits to retry: not at work
            assert poster._answers_outlast_posting_locked()
            poster._post_seconds = 5.0  # the time goes here, not to the answer
            assert not poster._answers_outlast_posting_locked()
            del poster._threads[:]
            poster._aside = 0
    finally:
        poster.shutdown(wait=True, timeout=DEADLINE)


def test_without_a_recent_answer_time_only_a_slow_post_counts_as_waiting_on_the_platform() -> None:
    answer: List[Any] = [None]  # no answer in the last second (a burst after a quiet spell)
    poster = ResultPoster(answer_seconds=lambda: answer[0])
    try:
        with poster._lock:
            poster._post_seconds = 0.0005  # a post's whole time, the GIL's part unknown
            assert not poster._answers_outlast_posting_locked()
            poster._post_seconds = 0.05
            assert poster._answers_outlast_posting_locked()
            answer[0] = 0.0002  # a measure again: the time is here, not in the answer
            poster._threads.append(threading.current_thread())  # one at work (a stand-in)
            assert not poster._answers_outlast_posting_locked()
            del poster._threads[:]
    finally:
        poster.shutdown(wait=True, timeout=DEADLINE)


def test_shutdown_runs_what_was_queued_first() -> None:
    poster = ResultPoster()
    ran: List[int] = []
    gate = threading.Event()
    poster.submit(lambda: gate.wait(DEADLINE))
    for i in range(5):
        poster.submit(lambda i=i: ran.append(i))
    gate.set()
    poster.shutdown(wait=True, timeout=DEADLINE)
    assert sorted(ran) == [0, 1, 2, 3, 4]
    assert not any(t.is_alive() for t in poster._threads)


def test_results_waiting_to_retry_hold_up_no_other_result() -> None:
    # As many results as there are base threads keep failing (each poster
    # waits to retry): the next result is still posted, by another thread.
    poster = ResultPoster()
    retrying = threading.Semaphore(0)
    gate = threading.Event()
    posted = threading.Event()

    def failing() -> None:
        def wait() -> None:
            retrying.release()
            gate.wait()  # until the test ends (the finally below)
        poster.step_aside(wait)
    try:
        for _ in range(BASE_THREADS):
            poster.submit(failing)
        for _ in range(BASE_THREADS):
            assert retrying.acquire(timeout=DEADLINE)
        poster.submit(posted.set)
        # Started at once for it, as if the threads waiting to retry were not there.
        assert len(poster) == 2 * BASE_THREADS
        assert posted.wait(DEADLINE)
        assert not gate.is_set()
    finally:
        gate.set()
        poster.shutdown(wait=True, timeout=DEADLINE)


def test_results_the_platform_keeps_refusing_do_not_hold_up_the_others(make_platform, records) -> None:
    # More refused results than there are base poster threads, each retried
    # through deliver(): a later job's result still gets through.
    refused = [f"refused-{i}" for i in range(BASE_THREADS + 2)]
    platform = make_platform(faults=Faults(refuse_results_of=frozenset(refused)))
    for job_id in refused:
        platform.submit({"i": job_id}, job_id=job_id)
    with WorkerThread(platform, lambda job: job["input"], concurrency=len(refused) + 1):
        def refused_twice(p) -> bool:  # every refused result is being retried
            tries = Counter(e.job_ids[0] for e in p.events if e.kind == "done" and e.fault == "error")
            return all(tries[job_id] >= 2 for job_id in refused)
        assert platform.wait_until(refused_twice, DEADLINE)
        healthy = platform.submit({"i": "healthy"})
        assert platform.wait_final([healthy], DEADLINE)
        assert all(platform.job(j).status == "IN_PROGRESS" for j in refused)
        platform.faults = None
        assert platform.wait_final(refused, DEADLINE)
    counts = platform.counts()
    assert counts["completed"] == len(refused) + 1 and counts["duplicates"] == 0, counts


def test_a_task_run_off_the_poster_threads_just_waits_when_it_steps_aside() -> None:
    poster = ResultPoster()
    waited: List[bool] = []
    poster.step_aside(lambda: waited.append(True))
    assert waited == [True] and len(poster) == 0
    poster.shutdown(wait=True, timeout=DEADLINE)


def test_shutdown_while_a_poster_waits_to_retry_lets_it_finish() -> None:
    poster = ResultPoster()
    aside, gate, done = threading.Event(), threading.Event(), threading.Event()

    def failing() -> None:
        poster.step_aside(lambda: (aside.set(), gate.wait(DEADLINE)))
        done.set()
    poster.submit(failing)
    assert aside.wait(DEADLINE)
    stopper = threading.Thread(target=poster.shutdown, kwargs={"wait": True, "timeout": DEADLINE})
    stopper.start()
    gate.set()
    stopper.join(DEADLINE)
    assert not stopper.is_alive() and done.is_set()
    assert not any(t.is_alive() for t in poster._threads)


def test_with_no_post_backlog_a_job_keeps_its_slot_until_its_result_is_posted(make_platform, records) -> None:
    # post_backlog=0 (runpod's way): the handler is done, the result is not
    # in, so the one slot is still the job's and the second job does not
    # start until the post gets through (a policy that takes ahead may
    # already hold it, waiting).
    platform = make_platform(faults=Faults(error_rate=1.0, routes={"done"}))
    first = platform.submit({"i": 1})
    started: List[Any] = []

    def handler(job: Dict[str, Any]) -> Dict[str, Any]:
        started.append((job["input"]["i"], platform.job(first).status))
        return job["input"]
    with WorkerThread(platform, handler, concurrency=1, post_backlog=0):
        assert records.wait_for("not delivered (attempt 2)", DEADLINE)
        second = platform.submit({"i": 2})
        assert records.wait_for("not delivered (attempt 3)", DEADLINE)
        assert [i for i, _ in started] == [1]
        assert platform.job(first).status == "IN_PROGRESS"
        platform.faults = None
        assert platform.wait_final([first, second], DEADLINE)
    counts = platform.counts()
    assert counts["completed"] == 2 and counts["duplicates"] == 0, counts
    assert started == [(1, "IN_PROGRESS"), (2, "COMPLETED")]


def test_a_job_gives_its_slot_back_while_its_result_waits_to_post_up_to_the_backlog(
        make_platform, records) -> None:
    # By default as many results may wait to post as there are slots: with
    # one slot and a platform slow to answer posts, the second job runs
    # while the first result is on its way. The second result finds the
    # backlog full: its slot goes to the third job as the first result is
    # in, not when its own is. Every job stays in progress (and in the
    # heartbeat) until its result is in.
    platform = make_platform(faults=Faults(slow_rate=1.0, slow_seconds=1.0, routes={"done"}))
    work = [0.0, 0.5, 0.0]  # the second job's work keeps its post well behind the first's
    ids = [platform.submit({"i": i, "work": w}) for i, w in enumerate(work)]
    started: List[Any] = []

    def handler(job: Dict[str, Any]) -> Dict[str, Any]:
        i = job["input"]["i"]
        started.append((i, time.monotonic(), [platform.job(j).status for j in ids[:i]]))
        threading.Event().wait(job["input"]["work"])
        return job["input"]
    with WorkerThread(platform, handler, concurrency=1) as worker:
        assert platform.wait_final(ids, DEADLINE)
        assert wait_for(lambda: worker.worker.take_loop._posting == 0, DEADLINE)  # every early give-back ended
        assert not worker.worker.take_loop._queued
    assert platform.counts()["completed"] == 3 and platform.counts()["duplicates"] == 0
    assert [(i, statuses) for i, _, statuses in started[:2]] == [(0, []), (1, ["IN_PROGRESS"])]
    third, at, statuses = started[2]
    assert third == 2 and statuses[0] == "COMPLETED"
    assert at < platform.job(ids[1]).finished_at  # before the second result was in


def test_slots_given_back_and_queued_results_balance_out_under_mixed_post_times(make_platform) -> None:
    # Posts answered at once or late, at random, past a backlog smaller than
    # the slots: results are given back early, queued, given back as others
    # end, or end first. Every job ends exactly once and every count returns to zero.
    platform = make_platform(faults=Faults(slow_rate=0.5, slow_seconds=0.1, routes={"done"}, seed=7))
    ids = [platform.submit({"i": i}) for i in range(80)]
    rng = random.Random(11)
    waits = {i: rng.choice([0.0, 0.0, 0.01, 0.03]) for i in range(80)}

    def handler(job: Dict[str, Any]) -> Dict[str, Any]:
        threading.Event().wait(waits[job["input"]["i"]])
        return job["input"]
    with WorkerThread(platform, handler, concurrency=4, post_backlog=2) as worker:
        loop = worker.worker.take_loop
        assert platform.wait_final(ids, DEADLINE)
        assert wait_for(lambda: loop._posting == 0 and loop.slots.in_use == 0, DEADLINE)
        assert not loop._queued and loop.given_back_queued > 0  # the queue was used
    counts = platform.counts()
    assert counts["completed"] == 80 and counts["duplicates"] == 0, counts


def test_a_failing_policy_update_still_gives_each_slot_back_once(make_platform, records) -> None:
    # The policy's bookkeeping on a job's exit raising (a bug of ours) must
    # cost neither a slot nor a job: slots given back early and slots held
    # through a slow post both return, once each.
    platform = make_platform(faults=Faults(slow_rate=1.0, slow_seconds=0.2, routes={"done"}))
    ids = [platform.submit({"i": i}) for i in range(8)]
    worker = WorkerThread(platform, lambda job: job["input"], concurrency=2)
    loop = worker.worker.take_loop

    def broken(started: float, ended: float, began: Optional[float] = None) -> None:
        raise RuntimeError("policy bookkeeping failed")
    loop.policy.observe_exit = broken  # type: ignore[method-assign]
    with worker:
        assert platform.wait_final(ids, DEADLINE)
        assert wait_for(lambda: loop._posting == 0 and loop.slots.in_use == 0, DEADLINE)
    counts = platform.counts()
    assert counts["completed"] == 8 and counts["duplicates"] == 0, counts
    assert "policy bookkeeping failed" in records.text()


def test_no_slot_is_given_back_early_while_a_result_waits_to_retry(make_platform, records) -> None:
    # A platform refusing results gets no more jobs taken on their slots:
    # with two slots, at most the first job gives its slot back before a
    # post has failed; the rest hold theirs until their results are in.
    platform = make_platform(faults=Faults(error_rate=1.0, routes={"done"}))
    first = platform.submit({"i": 0})
    started: List[int] = []

    def handler(job: Dict[str, Any]) -> Dict[str, Any]:
        started.append(job["input"]["i"])
        return job["input"]
    with WorkerThread(platform, handler, concurrency=2):
        assert records.wait_for(f"{first} result not delivered (attempt 2)", DEADLINE)
        rest = [platform.submit({"i": i}) for i in range(1, 5)]
        assert wait_for(lambda: sum("not delivered (attempt 3)" in line for line in records.lines) >= 3, DEADLINE)
        assert sorted(started) == [0, 1, 2]
        platform.faults = None
        assert platform.wait_final([first, *rest], DEADLINE)
    assert platform.counts()["completed"] == 5 and platform.counts()["duplicates"] == 0


class ScriptedPosts(Faults):
    """Result posts answered as scripted, in the order they arrive: ``(fault, delay)`` each, then at once."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.script: List[Any] = []
        self.drawn = 0

    def draw(self, kind: str) -> Any:
        if kind != "done":
            return None, 0.0
        with self._lock:
            self.drawn += 1
            return self.script.pop(0) if self.script else (None, 0.0)


def test_a_queued_result_gives_its_slot_back_once_the_retried_result_ahead_is_in(make_platform) -> None:
    # One slot. The first result posts with the slot given back; the
    # second finds the backlog full and queues. The first post fails once
    # and is retried; once it is in (and no result waits to retry), the
    # queued second gives its slot to the third job, long before its own
    # slow post is answered.
    faults = ScriptedPosts(routes={"done"})
    faults.script = [("error", 1.0), (None, 4.0)]  # the first result's first try; the second result
    platform = make_platform(faults=faults)
    ids = [platform.submit({"i": i}) for i in range(3)]
    started: Dict[int, float] = {}

    def handler(job: Dict[str, Any]) -> Dict[str, Any]:
        i = job["input"]["i"]
        started[i] = time.monotonic()
        if i == 1:  # the second post arrives after the first's first try
            assert wait_for(lambda: faults.drawn >= 1, DEADLINE)
        return job["input"]
    with WorkerThread(platform, handler, concurrency=1) as worker:
        assert platform.wait_final(ids, DEADLINE)
        loop = worker.worker.take_loop
        assert wait_for(lambda: loop._posting == 0 and loop.slots.in_use == 0, DEADLINE)
        assert loop.given_back_queued >= 1 and not loop._queued
    counts = platform.counts()
    assert counts["completed"] == 3 and counts["duplicates"] == 0, counts
    assert started[2] < platform.job(ids[1]).finished_at  # before the second result was in


def test_a_result_that_stops_the_worker_keeps_its_slot_until_it_is_in(make_platform, records) -> None:
    # refresh_worker: the worker stops once this result is in, so its slot
    # must not run another job meanwhile.
    platform = make_platform(faults=Faults(error_rate=1.0, routes={"done"}))
    first = platform.submit({"i": 1})
    platform.submit({"i": 2})
    started: List[int] = []

    def handler(job: Dict[str, Any]) -> Dict[str, Any]:
        started.append(job["input"]["i"])
        return job["input"]
    worker = WorkerThread(platform, handler, concurrency=1, refresh_worker=True).start()
    try:
        assert records.wait_for(f"{first} result not delivered (attempt 3)", DEADLINE)
        assert started == [1]
        platform.faults = None
        assert platform.wait_final([first], DEADLINE)
        worker.thread.join(DEADLINE)
        assert not worker.thread.is_alive() and worker.exit_code == 0
    finally:
        platform.faults = None
        if worker.thread.is_alive():
            worker.stop(DEADLINE)
    assert platform.status(first).get("stopPod") is True
    assert platform.counts()["duplicates"] == 0


def test_shutdown_waits_for_a_result_still_posting_after_its_slot_was_given_back(make_platform) -> None:
    # The job gave its slot back when its result was queued; at shutdown it
    # is still the worker's until the result is in: the heartbeat keeps
    # listing it, and the worker exits cleanly once the post gets through.
    platform = make_platform(faults=Faults(slow_rate=1.0, slow_seconds=1.5, routes={"done"}))
    job = platform.submit({"i": 1})
    worker = WorkerThread(platform, lambda job: job["input"], concurrency=2,
                          env={"RUNPOD_PING_INTERVAL": "100"}).start()
    loop = worker.worker.take_loop

    def pings_listing_it(p: Any) -> int:
        return sum(e.kind == "ping" and job in e.query.get("job_id", "").split(",") for e in p.events)
    try:
        assert wait_for(lambda: loop._posting == 1, DEADLINE)
        worker.worker.shutdown("test")
        assert worker.worker.fetch_stopped.wait(DEADLINE)
        before = pings_listing_it(platform)
        assert platform.wait_until(lambda p: pings_listing_it(p) >= before + 2, DEADLINE)
        assert platform.job(job).status == "IN_PROGRESS" and worker.thread.is_alive()
        assert platform.wait_final([job], DEADLINE)
        worker.thread.join(DEADLINE)
        assert not worker.thread.is_alive() and worker.exit_code == 0
    finally:
        if worker.thread.is_alive():
            worker.stop(DEADLINE)
    assert platform.counts()["completed"] == 1 and platform.counts()["duplicates"] == 0


def test_a_result_that_cannot_be_sent_is_lost_loudly(make_platform, records) -> None:
    # http.client refuses a header with a line break: the job id goes into
    # X-Request-ID, so this result can never be posted. It must be counted
    # and logged as lost (exit 1), not retried forever or dropped quietly.
    platform = make_platform()
    bad = platform.submit({"i": 1}, job_id="bad\nid")
    good = platform.submit({"i": 2})
    worker = WorkerThread(platform, lambda job: job["input"], concurrency=2).start()
    assert platform.wait_final([good], DEADLINE)
    assert records.wait_for("LOST", DEADLINE)
    assert worker.stop(DEADLINE) == 1
    assert worker.worker.runner.lost_results == 1
    assert any("LOST" in line and "not sendable" in line for line in records.lines), records.text()
    assert platform.job(bad).status == "IN_PROGRESS"


def test_a_poster_that_cannot_start_posts_from_the_submitting_thread(monkeypatch, records) -> None:
    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(threading.Thread, "start", refuse)
    poster = ResultPoster()
    ran: List[str] = []
    poster.submit(lambda: ran.append(threading.current_thread().name))
    assert ran == [threading.current_thread().name]
    assert len(poster) == 0
    assert "could not start a result poster thread" in records.text()
