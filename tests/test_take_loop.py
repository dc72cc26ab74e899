"""The fetch loop: when a worker takes, how much, and how it waits when full.

Tests of how a full worker waits for a whole batch name ``drain``, the policy
that does that; the rest run under the default policy (``pipeline``; its own
timing is tested in test_pipeline.py). Run with SLOTWORKER_TEST_POLICY=fixed
to see the tests a fixed 1 s sleep fails.
"""

from __future__ import annotations

import os
import random
import threading
import time

from slotworker.worker.take_policies import FULL_WAIT_SECONDS

from support import Gate, WorkerThread, wait_for

DEADLINE = 20.0
#: The policy that waits, when full, for the whole batch (or the full-wait bound);
#: SLOTWORKER_TEST_POLICY puts another in its place, to compare.
DRAIN = os.environ.get("SLOTWORKER_TEST_POLICY", "drain")


def job_takes(platform):
    """Takes that handed out at least one job."""
    return [t for t in platform.takes() if t.given > 0]


def finished_at(platform, job_id):
    return platform.job(job_id).finished_at


def wait_full(wt):
    """Wait until the fetch thread waits as full (its predicate is listed, under the loop's lock)."""
    assert wait_for(lambda: bool(wt.worker.take_loop._wake_when), DEADLINE)



def test_full_worker_takes_full_batch_as_soon_as_it_drains(platform):
    gate = Gate()
    ids = [platform.submit({"i": i}) for i in range(8)]
    with WorkerThread(platform, gate.enter, concurrency=4, take_policy=DRAIN) as wt:
        assert gate.wait_started(4)
        # Opened only once the fetch thread waits: a job over before it came
        # round would leave a free slot that it takes at once, as it should.
        wait_full(wt)
        first = list(gate.started)
        gate.open(*first)
        assert gate.wait_started(8, DEADLINE)
        assert platform.wait_final(first, DEADLINE)
        drained = max(finished_at(platform, j) for j in first)
        second = job_takes(platform)[1]
        assert (second.requested, second.given) == (4, 4)
        # Drained means take now: well under the 1 s a fixed sleep would cost.
        assert second.t_start - drained < 0.5
        gate.open_all()
        assert platform.wait_final(ids, DEADLINE)


def test_full_worker_does_not_take_while_partly_drained(platform):
    gate = Gate()
    ids = [platform.submit({"i": i}) for i in range(8)]
    with WorkerThread(platform, gate.enter, concurrency=4, take_policy=DRAIN) as wt:
        assert gate.wait_started(4)
        # Opened only once the fetch thread waits: a job over before it came
        # round would leave a free slot that it takes at once, as it should.
        wait_full(wt)
        full_at = time.monotonic()
        gate.open(*gate.started[:2])
        assert platform.wait_final(gate.started[:2], DEADLINE)
        window_end = full_at + FULL_WAIT_SECONDS * 0.8
        assert not platform.wait_until(lambda p: len(job_takes(p)) > 1, window_end - time.monotonic())
        gate.open_all()
        assert platform.wait_final(ids, DEADLINE)


def test_straggler_cannot_hold_freed_slots_past_full_wait(platform):
    gate = Gate()
    ids = [platform.submit({"i": i}) for i in range(8)]
    with WorkerThread(platform, gate.enter, concurrency=4, take_policy=DRAIN) as wt:
        assert gate.wait_started(4)
        # Opened only once the fetch thread waits: a job over before it came
        # round would leave a free slot that it takes at once, as it should.
        wait_full(wt)
        full_at = time.monotonic()
        stragglers = gate.started[2:4]
        gate.open(*gate.started[:2])
        # Two slots free, two stragglers hold theirs: the freed ones are
        # taken within the full-wait bound, without waiting for the stragglers.
        assert platform.wait_until(lambda p: len(job_takes(p)) > 1, DEADLINE)
        second = job_takes(platform)[1]
        assert second.requested == 2
        assert second.t_start - full_at < FULL_WAIT_SECONDS + 0.5
        assert set(stragglers) <= set(gate.running())
        gate.open_all()
        assert platform.wait_final(ids, DEADLINE)


def test_full_worker_stops_taking_promptly_on_shutdown(platform):
    gate = Gate()
    ids = [platform.submit({"i": i}) for i in range(8)]
    wt = WorkerThread(platform, gate.enter, concurrency=4).start()
    try:
        assert gate.wait_started(4)
        # The fetch loop has come round after its take: it is full, and waits.
        assert wait_for(lambda: wt.worker.take_loop.loops >= 2)
        asked = time.monotonic()
        wt.worker.shutdown("test")
        assert wt.worker.fetch_stopped.wait(DEADLINE)
        assert time.monotonic() - asked < 0.5
        takes_at_shutdown = len(platform.takes())
    finally:
        gate.open_all()
    wt.thread.join(DEADLINE)
    assert wt.exit_code == 0
    assert len(platform.takes()) == takes_at_shutdown
    assert [platform.status(j)["status"] for j in gate.started] == ["COMPLETED"] * 4
    assert platform.counts()["queued"] == 4
    assert len(set(ids) - set(gate.started)) == 4


def test_zero_concurrency_waits_without_busy_looping(platform):
    platform.submit({"i": 0})
    with WorkerThread(platform, lambda job: None, concurrency_modifier=lambda c: 0) as wt:
        window = 2.5
        assert not platform.wait_until(lambda p: len(p.takes()) > 0, window)
        # One loop per FULL_WAIT_SECONDS, give or take the first and the last.
        assert wt.worker.take_loop.loops <= window / FULL_WAIT_SECONDS + 2
        assert wt.worker.take_loop.takes == 0


def test_single_slot_worker_takes_again_as_soon_as_its_job_finishes(platform):
    ids = [platform.submit({"i": i}) for i in range(5)]
    with WorkerThread(platform, lambda job: job["input"]["i"]):
        assert platform.wait_final(ids, DEADLINE)
    takes = job_takes(platform)
    assert [t.requested for t in takes] == [1] * 5
    for before, after in zip(takes, takes[1:]):
        assert after.t_start - finished_at(platform, before.job_ids[0]) < 0.5


def test_sync_handler_runs_32_at_a_time_on_32_slots(platform):
    barrier = threading.Barrier(32, timeout=DEADLINE)

    def handler(job):
        barrier.wait()  # passes only when 32 handlers are inside at once
        time.sleep(0.05)
        return "ok"

    ids = [platform.submit({"i": i}) for i in range(64)]
    with WorkerThread(platform, handler, concurrency=32):
        assert platform.wait_final(ids, DEADLINE)
    assert all(platform.status(j).get("output") == "ok" for j in ids)


def test_raising_concurrency_takes_effect_while_jobs_run(platform):
    gate = Gate()
    limit = {"n": 1}
    ids = [platform.submit({"i": i}) for i in range(4)]
    with WorkerThread(platform, gate.enter, concurrency_modifier=lambda c: limit["n"]):
        assert gate.wait_started(1)
        limit["n"] = 3
        assert gate.wait_started(3, DEADLINE)
        assert len(gate.running()) == 3
        gate.open_all()
        assert platform.wait_final(ids, DEADLINE)


def test_lowering_concurrency_never_interrupts_running_jobs(platform):
    gate = Gate()
    limit = {"n": 3}
    ids = [platform.submit({"i": i}) for i in range(5)]
    with WorkerThread(platform, lambda job: (gate.enter(job), "done")[1],
                      concurrency_modifier=lambda c: limit["n"]):
        assert gate.wait_started(3)
        limit["n"] = 1
        first = list(gate.started)
        gate.open(*first)
        assert platform.wait_final(first, DEADLINE)
        assert [platform.status(j)["output"] for j in first] == ["done"] * 3
        assert gate.wait_started(4, DEADLINE)
        assert len(gate.running()) == 1  # now one at a time
        gate.open_all()
        assert platform.wait_final(ids, DEADLINE)


def test_every_job_taken_gets_exactly_one_final_result(platform):
    def handler(job):
        time.sleep(random.random() * 0.005)
        return {"i": job["input"]["i"]}

    ids = [platform.submit({"i": i}) for i in range(300)]
    with WorkerThread(platform, handler, concurrency=16):
        assert platform.wait_final(ids, 60)
    counts = platform.counts()
    assert counts["completed"] == 300 and counts["duplicates"] == 0
    done = [e for e in platform.events if e.kind == "done"]
    assert sorted(j for e in done for j in e.job_ids) == sorted(ids)
    assert [platform.status(j)["output"] for j in ids] == [{"i": i} for i in range(300)]


def test_generator_output_arrives_in_order_before_the_final_result(platform):
    def handler(job):
        for k in range(5):
            time.sleep(0.001)
            yield {"job": job["input"]["i"], "k": k}

    ids = [platform.submit({"i": i}) for i in range(20)]
    with WorkerThread(platform, handler, concurrency=4):
        assert platform.wait_final(ids, DEADLINE)
    events = platform.events
    for i, job_id in enumerate(ids):
        mine = [e for e in events if job_id in e.job_ids and e.kind in ("stream", "done")]
        assert [e.kind for e in mine] == ["stream"] * 5 + ["done"]
        assert [platform.status(job_id)["stream"][k] for k in range(5)] == [{"job": i, "k": k} for k in range(5)]
        assert mine[-1].query.get("isStream") == "true"
        assert all(e.t_end <= mine[-1].t_start for e in mine[:-1])
        assert platform.status(job_id)["output"] == []
