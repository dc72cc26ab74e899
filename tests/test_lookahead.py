"""The lookahead take policy: takes before its slots free, and jobs taken
ahead wait in the worker, in order, until a slot frees."""

from __future__ import annotations

import random
import threading
import time

from support import Gate, WorkerThread, wait_for

DEADLINE = 30.0


class Starts:
    """Records when each job's handler started (monotonic), then calls ``inner``."""

    def __init__(self, inner):
        self.inner = inner
        self.at = {}
        self._lock = threading.Lock()

    def __call__(self, job):
        with self._lock:
            self.at[job["id"]] = time.monotonic()
        return self.inner(job)



def sleeper(seconds):
    def handler(job):
        time.sleep(seconds)
        return {"ok": True}
    return handler


def job_takes(platform):
    return [t for t in platform.takes() if t.given > 0]


def taken(platform, ids):
    return [j for j in ids if platform.job(j).first_taken_at is not None]


def primed_with_pending(platform, gate, starts, slots=2, env=None):
    """A lookahead worker with ``slots`` jobs blocked in the gate and ``slots`` taken
    ahead of them (pending). Returns (worker, blocked ids, pending ids, all ids)."""
    warm = [platform.submit({"warm": i}) for i in range(slots)]
    wt = WorkerThread(platform, starts, concurrency=slots, take_policy="lookahead", env=env).start()
    # The first full take measures the round trip; the warm jobs' exits, a job's run time.
    assert gate.wait_started(slots, DEADLINE)
    gate.open(*warm)
    assert platform.wait_final(warm, DEADLINE)
    ids = [platform.submit({"i": i}) for i in range(3 * slots)]
    assert platform.wait_until(lambda p: len(taken(p, ids)) >= 2 * slots, DEADLINE)
    blocked, ahead = ids[:slots], ids[slots:2 * slots]
    # The platform marks a job taken before the answer reaches the worker.
    assert wait_for(lambda: len(wt.worker.take_loop.pending) == slots)
    assert gate.wait_started(2 * slots, DEADLINE)
    assert sorted(gate.running()) == sorted(blocked)
    return wt, blocked, ahead, ids


def test_takes_before_its_slots_free(make_platform):
    platform = make_platform(take_cost=0.3, long_poll=0.5)
    ids = [platform.submit({"i": i}) for i in range(24)]
    with WorkerThread(platform, sleeper(0.4), concurrency=4, take_policy="lookahead"):
        assert platform.wait_final(ids, DEADLINE)
    takes = job_takes(platform)
    early = 0
    for k, take in enumerate(takes[1:], 1):
        before = [j for t in takes[:k] for j in t.job_ids]
        still_running = [j for j in before if platform.job(j).finished_at > take.t_start]
        if len(still_running) == 4:  # every slot busy when the take was sent
            early += 1
    assert early >= 2


def test_no_job_lost_or_duplicated_over_a_burst(make_platform):
    platform = make_platform(take_cost=0.02, long_poll=0.2)
    rng = random.Random(5)
    ids = [platform.submit({"s": rng.uniform(0, 0.03)}) for _ in range(300)]

    def handler(job):
        time.sleep(job["input"]["s"])
        return {"ok": True}

    with WorkerThread(platform, handler, concurrency=8, take_policy="lookahead") as wt:
        assert platform.wait_final(ids, 60)
        assert wt.stop() == 0
    assert all(platform.job(j).status == "COMPLETED" for j in ids)
    assert all(platform.job(j).takes == 1 for j in ids)
    assert platform.counts()["duplicates"] == 0


def test_jobs_taken_ahead_start_in_order_as_slots_free(make_platform):
    platform = make_platform(take_cost=0.5, long_poll=0.5)
    gate = Gate()
    starts = Starts(gate.enter)
    wt, blocked, ahead, ids = None, [], [], []
    try:
        wt, blocked, ahead, ids = primed_with_pending(platform, gate, starts)
        # Taken, not started: they wait for a slot rather than oversubscribe.
        assert not set(ahead) & set(gate.started)
        assert list(wt.worker.take_loop.pending)[0]["id"] == ahead[0]
        # gate.started: the two warm jobs, the two blocked, then the ones taken ahead.
        gate.open(blocked[0])
        assert gate.wait_started(5, DEADLINE)
        assert gate.started[4] == ahead[0]
        assert starts.at[ahead[0]] - gate.exited[blocked[0]] < 0.5
        gate.open(blocked[1])
        assert gate.wait_started(6, DEADLINE)
        assert gate.started[5] == ahead[1]
    finally:
        gate.open_all()
        if wt is not None:
            assert platform.wait_final(ids, DEADLINE)
            wt.stop()


def test_never_holds_unstarted_jobs_much_longer_than_a_round_trip(make_platform):
    take_cost = 0.25
    platform = make_platform(take_cost=take_cost, long_poll=0.5)
    starts = Starts(sleeper(0.3))
    ids = [platform.submit({"i": i}) for i in range(48)]
    with WorkerThread(platform, starts, concurrency=4, take_policy="lookahead"):
        assert platform.wait_final(ids, DEADLINE)
    held = [starts.at[j] - platform.job(j).taken_at for j in ids]
    assert max(held) < 2 * take_cost + 0.3, sorted(held)[-5:]


def test_shutdown_runs_and_reports_every_pending_job(make_platform):
    platform = make_platform(take_cost=0.5, long_poll=0.5)
    gate = Gate()
    wt, blocked, ahead, ids = primed_with_pending(platform, gate, Starts(gate.enter))
    try:
        assert len(wt.worker.take_loop.pending) == 2
        wt.worker.shutdown("test: pending jobs")
    finally:
        gate.open_all()
    assert wt.stop() == 0
    for j in blocked + ahead:
        assert platform.job(j).status == "COMPLETED", j
    assert platform.counts()["duplicates"] == 0


def test_heartbeat_reports_jobs_taken_ahead_as_in_progress(make_platform):
    platform = make_platform(take_cost=0.5, long_poll=0.5)
    gate = Gate()
    wt, blocked, ahead, ids = None, [], [], []
    try:
        wt, blocked, ahead, ids = primed_with_pending(platform, gate, Starts(gate.enter),
                                                      env={"RUNPOD_PING_INTERVAL": "100"})
        held = set(blocked + ahead)
        # A job waiting for its slot is the worker's: the platform must not requeue it.
        assert platform.wait_until(
            lambda p: any(e.kind == "ping" and held <= set(e.query.get("job_id", "").split(","))
                          for e in p.events), DEADLINE)
    finally:
        gate.open_all()
        if wt is not None:
            assert platform.wait_final(ids, DEADLINE)
            wt.stop()
