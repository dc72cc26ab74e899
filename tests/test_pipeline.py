"""The pipeline take policy: one take in flight, landing as a wave of jobs ends.

The decision itself is a pure function of the estimates and the running
jobs' starts, tested directly; the worker tests run it against the local
platform with a take cost, jobs of a fixed length and real threads.
"""

from __future__ import annotations

import random
import time

from slotworker.worker.take_policies import PipelinePolicy, Snapshot

from support import Gate, WorkerThread, wait_for

DEADLINE = 60.0


def learned(rtt: float, est: float, starts: list) -> PipelinePolicy:
    policy = PipelinePolicy()
    policy.round_trip, policy.job_seconds = rtt, est
    policy._samples = PipelinePolicy.MIN_SAMPLES
    policy._starts = sorted(starts)
    return policy


def test_a_batch_about_to_end_is_worth_a_short_wait() -> None:
    now = 100.0
    # 4 slots: one job ends just before a take sent now would land, three just after.
    policy = learned(0.5, 1.0, [now - 0.51, now - 0.49, now - 0.49, now - 0.49])
    n, look_again = policy._plan(Snapshot(free=0, in_use=4, pending=0), now)
    assert n == 0 and look_again is not None and now < look_again < now + 0.05


def test_back_from_its_wait_it_takes_rather_than_wait_again() -> None:
    now = 100.0
    # Back at the time it chose (jobs ran late: the batch it waited for is
    # again a few ms past the landing), it takes now rather than wait once
    # more (waiting for each next few ends re-planned every few ms as a
    # large wave's ends spread out): what will be free, and the batch about
    # to end, whose jobs wait here for their slots.
    policy = learned(0.5, 1.0, [now - 0.51, now - 0.49, now - 0.49, now - 0.49])
    assert policy._plan(Snapshot(free=0, in_use=4, pending=0), now)[0] == 0
    n, look_again = policy._plan(Snapshot(free=0, in_use=4, pending=0), now, waited=True)
    assert (n, look_again) == (4, None)


def test_a_wave_whose_ends_spread_out_is_taken_whole_as_its_first_jobs_end() -> None:
    now = 100.0
    # 1,024 slots whose jobs end over 0.12 s, from 0.37 s after a take sent
    # now would land (a wave started as the slots of one handed out at once
    # freed, its threads waking in turn). One take for the whole wave,
    # landing as its first jobs end: its jobs for slots still held wait
    # here and start as those free. Landing as the last end (as this policy
    # did) left the slots that freed first idle for up to 0.12 s a wave; a
    # take of the first few would leave the rest idle a round trip more.
    starts = [now - 1.0 + 0.5 + 0.37 + 0.12 * i / 1024 for i in range(1024)]
    policy = learned(0.5, 1.0, starts)
    full = Snapshot(free=0, in_use=1024, pending=0)
    assert policy._look(full, now) == 0
    look_again = policy._look_again
    assert look_again is not None and 0.37 <= look_again - now < 0.38  # (the first end, less a round trip)
    assert policy._look(full, look_again) == 1024


def test_a_look_set_a_round_trip_before_a_wave_ends_weighs_afresh_rather_than_take_its_first_few() -> None:
    # As recorded at 1,024 slots x 1 s jobs: 4 jobs of the wave started a
    # little before the other 1,020 (handed out as the last take's batch
    # landed). The plan looks again one round trip before the first ends;
    # there, a take of those 4 would leave the 1,020 that end 20-30 ms later
    # idle until the next take lands: it waits for them and takes the wave.
    now = 100.0
    # Their ends: 4 at now + 1.05, the rest from now + 1.07 to now + 1.08.
    starts = [now + 0.05] * 4 + [now + 0.07 + 0.01 * k / 1019 for k in range(1020)]
    policy = learned(0.5, 1.0, starts)
    full = Snapshot(free=0, in_use=1024, pending=0)
    assert policy._look(full, now) == 0
    look_again = policy._look_again
    assert look_again is not None and abs(look_again - (now + 0.55)) < 1e-6
    assert policy._look(full, look_again) == 0  # (it took those 4 before)
    gather = policy._look_again
    assert gather is not None and look_again + 0.02 < gather < look_again + 0.04
    assert policy._look(full, gather) == 1024


def test_back_from_a_wait_it_may_wait_once_more_for_the_few_that_started_late() -> None:
    # As recorded at 128 slots x 1 s jobs: a batch landed while 21 of the
    # last wave's slots were still held, so 14 of its jobs started a few ms
    # after the rest. Back from the wait for the first 114 to end, the 14
    # end 5 ms after a take sent then would land: a take of the 114 alone
    # would split the wave for good (the 14 a take behind, to the burst's
    # end). It waits once more; back from that second wait it takes now,
    # the 14 (late again) with the rest.
    now = 100.0
    policy = learned(0.5, 1.0, [now - 0.49] * 114 + [now - 0.48] * 14)
    full = Snapshot(free=0, in_use=128, pending=0)
    assert policy._look(full, now) == 0
    first = policy._look_again
    assert first is not None and now + 0.01 < first < now + 0.015
    policy._starts = sorted([now - 0.49] * 114 + [first - 0.495] * 14)  # the 14 end 5 ms late
    assert policy._look(full, first) == 0
    second = policy._look_again
    assert second is not None and first + 0.005 < second < first + 0.01
    policy._starts = sorted([now - 0.49] * 114 + [second - 0.497] * 14)  # late again
    assert policy._look(full, second) == 128


def test_ends_that_jobs_already_waiting_here_will_take_are_waited_for_not_taken() -> None:
    # 4 slots, 2 jobs taken and waiting for a slot: the two ends worth
    # gathering (4 and 20 ms after a take sent now would land) free slots
    # for those two, not for more. Nothing to ask for: it looks again when
    # the last of them has ended (the plan then weighs afresh), rather than
    # wait for a pending job to start, untimed.
    now, rtt, est = 100.0, 0.1, 1.0
    landing = now + rtt
    ends = [landing + 0.004, landing + 0.02, landing + 0.5, landing + 0.9]
    policy = learned(rtt, est, [end - est for end in ends])
    n, look_again = policy._plan(Snapshot(free=0, in_use=4, pending=2), now)
    assert n == 0 and look_again is not None
    assert abs(look_again - (now + 0.02 + PipelinePolicy.MARGIN)) < 1e-9


def test_slots_freeing_steadily_are_taken_at_once() -> None:
    now = 100.0
    # 16 slots, one job ending every 1/16 s from now on: waiting never gathers
    # more than it leaves idle, so the take goes now, for the 9 that end by its landing.
    starts = [now - 1.0 + i / 16 for i in range(16)]
    policy = learned(0.5, 1.0, starts)
    n, look_again = policy._plan(Snapshot(free=0, in_use=16, pending=0), now)
    assert (n, look_again) == (9, None)


def test_jobs_waiting_for_a_slot_count_as_starting_when_the_first_running_ones_end() -> None:
    now = 100.0
    # 8 slots: the batch that just landed started 6 jobs; 2 wait for the slots
    # of the last wave's 2 jobs, whose results are still being posted (they end
    # at now + 0.02). Started then, those 2 end by the time a take sent now lands
    # (now + 0.5), so the take asks for all 8 slots, not 6.
    policy = learned(0.5, 0.47, [now - 0.45] * 2 + [now] * 6)
    assert policy._plan(Snapshot(free=0, in_use=8, pending=2), now) == (8, None)
    # Ones that would start too late to end by the landing are not counted.
    late = learned(0.5, 0.47, [now - 0.3] * 2 + [now] * 6)  # their slots free at now + 0.17
    assert late._plan(Snapshot(free=0, in_use=8, pending=2), now) == (6, None)
    # 7 slots, one free: of 2 waiting jobs one starts on it at once and ends by
    # the landing; the other starts as the 6 running end and is still running then.
    free = learned(0.5, 0.47, [now] * 6)
    assert free._plan(Snapshot(free=1, in_use=6, pending=2), now) == (6, None)


def test_it_never_asks_for_more_than_the_slots() -> None:
    now = 100.0
    # 8 slots, seen as a job leaves its: free (1), and still listed as about
    # to end (8 starts). Whatever the count, a take never asks for more than 8.
    policy = learned(0.5, 0.47, [now - 0.45] * 2 + [now] * 6)
    n, _ = policy._plan(Snapshot(free=1, in_use=7, pending=0), now)
    assert n <= 8


def test_a_wave_far_from_its_end_is_looked_at_one_round_trip_before_it() -> None:
    now = 100.0
    policy = learned(0.5, 3.0, [now - 0.2] * 4)  # ends at now + 2.8
    n, look_again = policy._plan(Snapshot(free=0, in_use=4, pending=0), now)
    assert n == 0 and abs(look_again - (now + 2.3)) < 1e-6


def test_jobs_started_together_are_listed_in_order_and_leave_one_by_one() -> None:
    policy = PipelinePolicy()
    policy.observe_start(1.0)
    policy.observe_start(3.0)
    policy.observe_starts(2.0, 3)  # a wave handed out at once
    assert policy._starts == [1.0, 2.0, 2.0, 2.0, 3.0]
    policy.observe_exit(2.0, 2.5)
    policy.observe_exit(1.0, 2.6)
    assert policy._starts == [2.0, 2.0, 3.0]


def test_the_run_time_is_the_median_of_a_wave_so_its_last_slow_exits_do_not_make_the_next_take_late() -> None:
    policy = PipelinePolicy()
    policy.observe_take(1024, 1024, 0.5)
    # A wave of 1,024 one-second jobs whose last tenth leave their slots up
    # to 0.15 s late (their exits queue for one GIL), in the order they end.
    for i in range(1024):
        late = max(0, i - 921) * 0.15 / 102
        policy.observe_exit(i * 1e-4, i * 1e-4 + 1.0 + late)
    now = 100.0
    for k in range(1024):  # the next wave: started over 10 ms, 0.2 s ago
        policy.observe_start(now - 0.2 + k * 1e-5)
    n, look_again = policy._plan(Snapshot(free=0, in_use=1024, pending=0), now)
    # Its ends are due at about now + 0.81: look again one round trip before.
    # (An average weighted to the latest exits, about 1.14 s, said now + 0.45.)
    assert n == 0 and look_again is not None
    assert 0.3 < look_again - now < 0.33
    assert abs(policy.job_seconds - 1.0) < 1e-9


def test_the_run_time_counts_from_the_jobs_thread_not_from_a_hand_out_that_woke_it_late() -> None:
    # As recorded at 1,024 slots x 1 s: a wave handed out at once at 10.0
    # wakes its threads in turn over 0.12 s, and each job runs 1 s from its
    # thread's start. Counted from the hand-out, the run time was the
    # median 1.06 s, and the next take, for a wave whose jobs started one by
    # one as slots freed, landed 0.06 s after its slots had begun to free.
    policy = PipelinePolicy()
    policy.observe_take(1024, 1024, 0.5)
    policy.observe_starts(10.0, 1024)
    for k in range(1024):
        began = 10.0 + 0.12 * k / 1023
        policy.observe_exit(10.0, began + 1.0, began)
    assert policy._starts == []
    now = 100.0
    for k in range(1024):  # the next wave, its jobs started as slots freed, 0.2 s ago
        policy.observe_start(now - 0.2 + 0.12 * k / 1023)
    n, look_again = policy._plan(Snapshot(free=0, in_use=1024, pending=0), now)
    assert abs(policy.job_seconds - 1.0) < 1e-9
    # The first of them end at now + 0.8: it looks again one round trip
    # before, to send the take that lands then and gathers the rest.
    assert n == 0 and look_again is not None
    assert abs(look_again - (now + 0.3 + PipelinePolicy.MARGIN)) < 1e-6


def test_without_a_thread_start_the_run_time_counts_from_the_hand_out() -> None:
    policy = PipelinePolicy()
    policy.observe_start(5.0)
    policy.observe_exit(5.0, 6.5)
    policy.observe_start(7.0)
    policy.observe_exit(7.0, 8.0, 6.9)  # a start before the hand-out is not believed
    assert list(policy._runs) == [1.5, 1.0] and policy._starts == []


def test_with_few_slots_the_run_time_is_the_median_of_the_last_few_jobs_not_the_last_one() -> None:
    policy = PipelinePolicy()
    policy.observe_take(1, 1, 0.5)
    for i in range(PipelinePolicy.MIN_SAMPLES - 1):
        policy.observe_exit(float(i), i + 1.0)
    policy.observe_exit(50.0, 55.0)  # one odd job of 5 s
    policy._plan(Snapshot(free=1, in_use=0, pending=0), 100.0)
    assert policy.job_seconds == 1.0


def test_a_straggler_does_not_count_as_about_to_end() -> None:
    now = 100.0
    policy = learned(0.5, 1.0, [now - 5.0, now - 5.0])  # overdue by 4 s
    n, look_again = policy._plan(Snapshot(free=0, in_use=2, pending=0), now)
    assert (n, look_again) == (0, None)


def test_jobs_overdue_only_by_the_hand_out_of_their_wave_are_not_stragglers() -> None:
    # As recorded at 1,024 slots x 0.1 s jobs: handing a wave out took 0.136 s
    # on the GIL (723 jobs in its first 10 ms, 301 after), and the next take
    # was planned at its end. The first jobs were then 35 ms overdue, past the
    # slack of 25 ms, though only the hand-out had kept them from ending: all
    # 1,024 end long before a take sent now lands, and it must ask for them all.
    now = 100.0
    starts = [now - 0.136 + 0.010 * k / 722 for k in range(723)]
    starts += [now - 0.126 + 0.126 * k / 300 for k in range(301)]
    policy = learned(0.5, 0.1, starts)
    assert policy._plan(Snapshot(free=0, in_use=1024, pending=0), now) == (1024, None)


def test_until_it_has_learned_it_keeps_one_batch_ahead_at_most() -> None:
    policy = PipelinePolicy()
    assert policy.how_many(Snapshot(free=4, in_use=0, pending=0)) == 4  # no round trip: drain
    policy.observe_take(4, 4, 0.5)
    # No job seen end yet: nothing taken ahead (they may be long).
    assert policy.how_many(Snapshot(free=0, in_use=4, pending=0)) == 0
    assert policy.how_many(Snapshot(free=1, in_use=3, pending=0)) == 1
    policy.observe_exit(10.0, 10.1)  # jobs shorter than a round trip: one batch ahead
    assert policy.how_many(Snapshot(free=0, in_use=4, pending=0)) == 4
    assert policy.how_many(Snapshot(free=0, in_use=4, pending=4)) == 0


def test_while_learning_long_jobs_are_not_taken_ahead() -> None:
    policy = PipelinePolicy()
    policy.observe_take(4, 4, 0.5)
    policy.observe_exit(10.0, 70.0)  # a job of a minute
    assert policy.how_many(Snapshot(free=0, in_use=4, pending=0)) == 0
    assert policy.how_many(Snapshot(free=2, in_use=2, pending=0)) == 2
    assert policy.how_many(Snapshot(free=2, in_use=2, pending=1)) == 1


def test_a_learned_worker_takes_full_batches_while_its_slots_are_still_busy(make_platform) -> None:
    slots, job_seconds = 4, 0.3
    platform = make_platform(take_cost=0.1)

    def handler(job):
        time.sleep(job_seconds)
        return job["input"]["i"]

    with WorkerThread(platform, handler, concurrency=slots, take_policy="pipeline"):
        ids = [platform.submit({"i": i}) for i in range(8 * slots)]
        assert platform.wait_final(ids, DEADLINE)
    assert [platform.status(j)["output"] for j in ids] == list(range(8 * slots))
    counts = platform.counts()
    assert counts["duplicates"] == 0 and counts["completed"] == 8 * slots
    jobs = [platform.job(j) for j in ids]
    # A take that left while every slot was busy: the pipeline asked ahead.
    ahead = [t for t in platform.takes() if t.given > 0 and
             sum(1 for j in jobs if j.taken_at is not None and j.taken_at < t.t_start
                 and (j.finished_at or 1e18) > t.t_start) == slots]
    assert ahead, [(t.t_start, t.requested, t.given) for t in platform.takes()]


def test_every_job_taken_reports_once_with_uneven_job_lengths(platform) -> None:
    def handler(job):
        time.sleep(random.random() * 0.02)
        return {"i": job["input"]["i"]}

    ids = [platform.submit({"i": i}) for i in range(200)]
    with WorkerThread(platform, handler, concurrency=8, take_policy="pipeline"):
        assert platform.wait_final(ids, DEADLINE)
    counts = platform.counts()
    assert counts["completed"] == 200 and counts["duplicates"] == 0
    assert [platform.status(j)["output"] for j in ids] == [{"i": i} for i in range(200)]


def test_shutdown_runs_and_reports_the_jobs_taken_ahead(make_platform) -> None:
    # A take costs more than the warm-up jobs run: the policy learns short
    # jobs and, still learning, takes one batch ahead of its slots.
    platform = make_platform(take_cost=0.6)
    gate = Gate()
    warm = [platform.submit({"warm": i}) for i in range(2)]
    wt = WorkerThread(platform, gate.enter, concurrency=2, take_policy="pipeline").start()
    try:
        assert gate.wait_started(2, DEADLINE)
        gate.open(*warm)
        assert platform.wait_final(warm, DEADLINE)
        ids = [platform.submit({"i": i}) for i in range(6)]
        # Learned a round trip and short jobs, not yet enough run times: one batch ahead.
        assert platform.wait_until(lambda p: sum(p.job(j).first_taken_at is not None for j in ids) >= 4,
                                   DEADLINE)
        wt.worker.shutdown("test: jobs taken ahead")
        gate.open_all()
        wt.thread.join(DEADLINE)
    finally:
        gate.open_all()
    assert wt.exit_code == 0
    taken = [j for j in ids if platform.job(j).first_taken_at is not None]
    assert len(taken) >= 4
    assert all(platform.status(j)["status"] == "COMPLETED" for j in taken)
    assert platform.counts()["duplicates"] == 0


def test_prefetch_holds_jobs_beyond_the_free_slots_and_lists_them_in_the_heartbeat(make_platform) -> None:
    platform = make_platform()
    gate = Gate()
    ids = [platform.submit({"i": i}) for i in range(6)]
    wt = WorkerThread(platform, gate.enter, concurrency=2, prefetch=3,
                      env={"RUNPOD_PING_INTERVAL": "100"}).start()
    try:
        assert gate.wait_started(2, DEADLINE)
        # Two run, three more are held here, one stays queued.
        assert platform.wait_until(lambda p: p.counts()["queued"] == 1, DEADLINE)
        held = [j for j in ids if platform.job(j).first_taken_at is not None and j not in gate.started]
        assert len(held) == 3
        assert platform.wait_until(lambda p: any(
            e.kind == "ping" and set(held) <= set(e.query.get("job_id", "").split(",")) for e in p.events),
            DEADLINE)
        gate.open_all()
        assert platform.wait_final(ids, DEADLINE)
    finally:
        gate.open_all()
        wt.stop()
    assert platform.counts()["duplicates"] == 0
    assert [platform.status(j)["status"] for j in ids] == ["COMPLETED"] * 6


def test_a_worker_tells_the_policy_when_each_jobs_thread_took_it_up(platform) -> None:
    ids = [platform.submit({"i": i}) for i in range(16)]
    worker = WorkerThread(platform, lambda job: job["input"], concurrency=4)
    policy = worker.worker.take_loop.policy
    real = policy.observe_exit
    seen = []

    def spy(started: float, ended: float, began: "float | None" = None) -> None:
        seen.append((started, ended, began))
        real(started, ended, began)
    policy.observe_exit = spy  # type: ignore[method-assign]
    with worker:
        assert platform.wait_final(ids, DEADLINE)
        assert wait_for(lambda: len(seen) == len(ids), DEADLINE)
    assert all(began is not None and started <= began <= ended for started, ended, began in seen)
