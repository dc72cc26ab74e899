"""Faults on the worker routes: the worker logs, backs off, carries on, and
every job still gets exactly one final result."""

from __future__ import annotations

import time
from typing import Any, Dict, Iterator, List

import pytest

from slotworker.platform import Faults

from support import WorkerThread

DEADLINE = 40.0
TAKES = frozenset({"take", "take_batch"})


class EnvPlatform:
    """A platform whose worker environment has extra variables (ping interval, ...)."""

    def __init__(self, platform: Any, **extra: str) -> None:
        self.platform = platform
        self.extra = extra

    def worker_env(self, worker_id: str = "w1") -> Dict[str, str]:
        return {**self.platform.worker_env(worker_id), **self.extra}




def echo(job: Dict[str, Any]) -> Any:
    return {"echo": job["input"]}


def chunks(job: Dict[str, Any]) -> Iterator[int]:
    for i in range(3):
        yield i


def assert_exactly_once(platform: Any, ids: List[str]) -> None:
    assert platform.wait_final(ids, DEADLINE), platform.counts()
    counts = platform.counts()
    assert counts["duplicates"] == 0, counts
    assert counts["completed"] == len(ids), counts
    for job_id in ids:
        assert platform.status(job_id)["status"] == "COMPLETED"


FAULT_MIX = dict(error_rate=0.15, garbage_rate=0.1, drop_rate=0.1, slow_rate=0.2, slow_seconds=0.3)


@pytest.mark.parametrize("routes", [
    {"take", "take_batch"},
    {"done"},
    {"ping", "stop_poll"},
], ids=lambda r: "+".join(sorted(r)))
def test_every_job_reports_once_with_faults_on_a_route(make_platform, routes):
    platform = make_platform(faults=Faults(routes=routes, seed=7, **FAULT_MIX))
    ids = [platform.submit({"i": i}) for i in range(16)]
    with WorkerThread(platform, echo, concurrency=4):
        assert_exactly_once(platform, ids)
    assert any(e.fault for e in platform.events), "no fault was injected"
    for job_id in ids:
        assert platform.status(job_id)["output"] == {"echo": platform.job(job_id).input}


def test_streamed_jobs_report_once_with_faults_on_stream_and_done(make_platform):
    platform = make_platform(faults=Faults(routes={"stream", "done"}, seed=3, **FAULT_MIX))
    ids = [platform.submit({"i": i}) for i in range(12)]
    with WorkerThread(platform, chunks, concurrency=4, return_aggregate_stream=True):
        assert_exactly_once(platform, ids)
    for job_id in ids:
        # Chunks are retried until delivered, in order.
        assert platform.status(job_id)["stream"] == [0, 1, 2]
        assert platform.status(job_id)["output"] == [0, 1, 2]


def test_throttled_takes_wait_and_jobs_still_run(make_platform):
    platform = make_platform(faults=Faults(throttle_rate=1.0, routes=TAKES))
    ids = [platform.submit({"i": i}) for i in range(4)]
    with WorkerThread(platform, echo, concurrency=4):
        assert platform.wait_until(lambda p: len(p.takes()) >= 1, DEADLINE)
        window = 2.0
        time.sleep(window)  # a window to count requests in, not a synchronisation
        # runpod waits 5 s after a 429: at most one more take in the window.
        assert len(platform.takes()) <= 2
        platform.faults = None
        assert_exactly_once(platform, ids)


@pytest.mark.parametrize("fault", ["error_rate", "garbage_rate", "drop_rate"])
def test_failing_takes_back_off_without_spinning(make_platform, records, fault):
    platform = make_platform(faults=Faults(routes=TAKES, **{fault: 1.0}))
    with WorkerThread(platform, echo, concurrency=2):
        assert platform.wait_until(lambda p: len(p.takes()) >= 1, DEADLINE)
        start = len(platform.takes())
        time.sleep(1.5)  # a window to count requests in
        # Backoff 0.5, 1, 2 s...: a few in 1.5 s, never a tight loop.
        assert len(platform.takes()) - start <= 4
        platform.faults = None
        job_id = platform.submit({"x": 1})
        assert_exactly_once(platform, [job_id])
    assert "take failed" in records.text()


def test_platform_down_for_a_while_then_every_job_reports_once(platform, records):
    ids = [platform.submit({"i": i}) for i in range(10)]
    platform.set_down(2.0)
    with WorkerThread(platform, echo, concurrency=4):
        assert platform.wait_until(lambda p: len(p.takes()) >= 1, DEADLINE)
        assert_exactly_once(platform, ids)
    down = [e for e in platform.takes() if e.status == 503]
    assert 1 <= len(down) <= 6, len(down)
    assert "503" in records.text()


def test_result_retried_until_the_platform_takes_it(make_platform, records):
    platform = make_platform(faults=Faults(error_rate=1.0, routes={"done"}))
    job_id = platform.submit({"x": 1})
    with WorkerThread(platform, echo, concurrency=1):
        assert platform.wait_until(lambda p: len([e for e in p.events if e.kind == "done"]) >= 5, DEADLINE)
        assert platform.status(job_id)["status"] == "IN_PROGRESS"
        platform.faults = None
        assert_exactly_once(platform, [job_id])
    assert "not delivered" in records.text()


def test_a_failing_result_post_is_one_request_per_try(make_platform, records):
    # One retry layer: each "not delivered (attempt N)" is exactly one POST,
    # not a burst of retries underneath it.
    platform = make_platform(faults=Faults(error_rate=1.0, routes={"done"}))
    job_id = platform.submit({"x": 1})
    with WorkerThread(platform, echo, concurrency=1):
        assert records.wait_for("not delivered (attempt 3)", DEADLINE)
        posts = len([e for e in platform.events if e.kind == "done"])
        tries = len([line for line in records.lines if "not delivered (attempt" in line])
        assert posts - tries in (0, 1), (posts, tries)  # a 4th try may be on the wire
        platform.faults = None
        assert_exactly_once(platform, [job_id])


def test_result_not_posted_by_the_end_of_grace_is_logged_lost_with_its_id(make_platform, records):
    platform = make_platform(faults=Faults(error_rate=1.0, routes={"done"}))
    job_id = platform.submit({"x": 1})
    worker = WorkerThread(platform, echo, concurrency=1, shutdown_grace=1.0).start()
    assert platform.wait_until(lambda p: any(e.kind == "done" for e in p.events), DEADLINE)
    worker.worker.shutdown("test")
    worker.thread.join(DEADLINE)
    assert not worker.thread.is_alive()
    assert worker.exit_code == 1  # a result was lost: not a clean exit
    lost = [line for line in records.lines if "LOST" in line]
    assert lost and any(job_id in line for line in lost), records.text()
    assert platform.status(job_id)["status"] == "IN_PROGRESS"


def test_jobs_dropped_after_assignment_come_back_and_report_once(make_platform):
    # The platform assigns the jobs, then drops the connection: the worker
    # never saw them, so only the job-timeout requeue brings them back, and
    # they are reported once, by whoever takes them next.
    platform = make_platform(job_timeout=1.0,
                             faults=Faults(drop_after_assign_rate=0.3, routes=TAKES, seed=11))
    ids = [platform.submit({"i": i}) for i in range(20)]
    with WorkerThread(EnvPlatform(platform, RUNPOD_PING_INTERVAL="200"), echo, concurrency=4):
        assert_exactly_once(platform, ids)
    counts = platform.counts()
    assert counts["requeued"] >= 1, counts
    assert any(e.fault == "drop_after_assign" for e in platform.takes())


def _burn(seconds: float) -> int:
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for _ in range(1000):
            n += 1
    return n


def test_heartbeat_keeps_its_pace_while_every_slot_hogs_the_cpu(platform):
    interval = 0.2
    ids = [platform.submit({"i": i}) for i in range(4)]
    env = EnvPlatform(platform, RUNPOD_PING_INTERVAL=str(int(interval * 1000)))
    with WorkerThread(env, lambda job: _burn(2.0), concurrency=4):
        assert platform.wait_until(lambda p: p.counts()["in_progress"] == 4, DEADLINE)
        busy_from = time.monotonic()
        assert platform.wait_final(ids, DEADLINE)
        busy_to = max(platform.job(j).finished_at for j in ids)
    pings = [e.t_start for e in platform.events if e.kind == "ping" and busy_from <= e.t_start <= busy_to]
    assert len(pings) >= 5, pings
    gaps = [b - a for a, b in zip(pings, pings[1:])]
    # At least 5 pings in the 2 s (its pace), none missing for a second. A
    # ping may wait for the GIL behind four busy threads on each side of
    # the wire (gaps of 0.4 s are common, 0.62 s seen once in CI); a starved
    # heartbeat misses seconds.
    assert max(gaps) < 5 * interval, gaps


def test_a_failing_stop_channel_backs_off(make_platform):
    platform = make_platform(faults=Faults(error_rate=1.0, routes={"stop_poll"}))
    job_id = platform.submit({})
    with WorkerThread(platform, echo, concurrency=1):
        assert platform.wait_until(lambda p: any(e.kind == "stop_poll" for e in p.events), DEADLINE)
        start = len([e for e in platform.events if e.kind == "stop_poll"])
        time.sleep(3.5)  # a window to count requests in
        polls = len([e for e in platform.events if e.kind == "stop_poll"]) - start
        assert polls <= 2, polls  # 1 s, then 2 s, ...: not one a second
        assert platform.wait_final([job_id], DEADLINE)
