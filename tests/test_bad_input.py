"""Bad input and bad output: malformed jobs, unserialisable results, handlers
that raise SystemExit, results too large for the platform. The worker goes on."""

from __future__ import annotations

import json
import threading
from typing import Any, Dict

import pytest

from support import WorkerThread

DEADLINE = 30.0




def echo(job: Dict[str, Any]) -> Any:
    return {"echo": job["input"]}


def error_of(platform: Any, job_id: str) -> str:
    status = platform.status(job_id)
    assert status["status"] == "FAILED", status
    return json.dumps(status["error"])


def test_job_without_id_is_logged_and_the_worker_goes_on(platform, records):
    platform.submit_raw({"input": {"x": 1}})
    after = platform.submit({"y": 2})
    with WorkerThread(platform, echo, concurrency=1):
        assert platform.wait_final([after], DEADLINE)
    assert "no id" in records.text()
    assert platform.status(after)["output"] == {"echo": {"y": 2}}


def test_job_without_input_gets_an_error_result(platform):
    platform.submit_raw({"id": "no-input-job"})
    after = platform.submit({"y": 2})
    with WorkerThread(platform, echo, concurrency=1):
        assert platform.wait_final([after], DEADLINE)
        assert platform.wait_until(lambda p: any("no-input-job" in e.job_ids for e in p.events
                                                 if e.kind == "done"), DEADLINE)
    post = [e for e in platform.events if e.kind == "done" and "no-input-job" in e.job_ids][0]
    assert "missing field(s): input" in json.loads(post.body)["error"]


def test_a_non_dict_job_in_a_batch_does_not_stop_the_others(platform, records):
    platform.submit_raw("not a job")
    platform.submit_raw(["nor", "this"])
    platform.submit_raw(None)
    ids = [platform.submit({"i": i}) for i in range(4)]
    with WorkerThread(platform, echo, concurrency=8):
        assert platform.wait_final(ids, DEADLINE)
    assert "malformed job" in records.text()
    assert all(platform.status(j)["status"] == "COMPLETED" for j in ids)


def test_unserialisable_output_is_an_error_result_not_a_lost_job(platform):
    job_id = platform.submit({})
    with WorkerThread(platform, lambda job: {"value": object()}, concurrency=1):
        assert platform.wait_final([job_id], DEADLINE)
    assert "not JSON-serialisable" in error_of(platform, job_id)


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt()], ids=["SystemExit", "KeyboardInterrupt"])
def test_handler_raising_systemexit_or_keyboardinterrupt_is_an_error_and_the_worker_goes_on(platform, exc):
    def handler(job: Dict[str, Any]) -> Any:
        if job["input"].get("boom"):
            raise exc
        return "fine"

    bad = platform.submit({"boom": True})
    good = platform.submit({})
    worker = WorkerThread(platform, handler, concurrency=1).start()
    try:
        assert platform.wait_final([bad, good], DEADLINE)
        assert type(exc).__name__ in error_of(platform, bad)
        assert platform.status(good)["output"] == "fine"
        assert worker.thread.is_alive()
    finally:
        assert worker.stop() == 0


def test_output_too_large_for_the_platform_becomes_a_clear_error(make_platform, records):
    platform = make_platform(max_body=1024 * 1024)
    big = platform.submit({"size": 2 * 1024 * 1024})
    after = platform.submit({"size": 10})
    with WorkerThread(platform, lambda job: "x" * job["input"]["size"], concurrency=1):
        assert platform.wait_final([big, after], DEADLINE)
    assert "too large" in error_of(platform, big)
    assert "413" in error_of(platform, big)
    assert platform.status(after)["output"] == "x" * 10
    assert platform.counts()["duplicates"] == 0


def test_an_enormous_output_past_the_default_limit_becomes_a_clear_error(platform):
    job_id = platform.submit({})
    with WorkerThread(platform, lambda job: "y" * (80 * 1024 * 1024), concurrency=1):
        assert platform.wait_final([job_id], 60)
    assert "too large" in error_of(platform, job_id)


class Unprintable(Exception):
    """An exception whose message cannot even be rendered."""

    def __str__(self) -> str:
        raise RuntimeError("no message for you")


class BadItems(dict):
    """A dict the JSON encoder cannot walk: items() raises."""

    def items(self):  # type: ignore[override]
        raise RuntimeError("items exploded")


def test_an_exception_that_cannot_be_rendered_still_gives_an_error_result(platform):
    def handler(job: Dict[str, Any]) -> Any:
        raise Unprintable()

    job_id = platform.submit({})
    after = platform.submit({})
    with WorkerThread(platform, handler, concurrency=1):
        assert platform.wait_final([job_id, after], DEADLINE)
    assert "Unprintable" in error_of(platform, job_id)


def test_output_whose_encoding_raises_an_odd_error_still_gives_an_error_result(platform):
    job_id = platform.submit({})
    with WorkerThread(platform, lambda job: {"value": BadItems(a=1)}, concurrency=1):
        assert platform.wait_final([job_id], DEADLINE)
    assert "not JSON-serialisable" in error_of(platform, job_id)


def test_a_stream_error_chunk_that_cannot_be_rendered_still_gives_an_error_result(platform):
    def handler(job: Dict[str, Any]) -> Any:
        yield {"error": Unprintable()}

    job_id = platform.submit({})
    with WorkerThread(platform, handler, concurrency=1):
        assert platform.wait_final([job_id], DEADLINE)
    assert platform.status(job_id)["status"] == "FAILED"


@pytest.mark.parametrize("value", ["0", "-5", "1"])
def test_a_zero_or_tiny_ping_interval_does_not_ping_in_a_tight_loop(value):
    from slotworker.config import Settings

    assert Settings.from_env({"RUNPOD_PING_INTERVAL": value}).ping_interval >= 0.05


def test_a_job_handed_out_twice_while_it_runs_is_reported_once(platform, records):
    release = threading.Event()

    def handler(job: Dict[str, Any]) -> Any:
        assert release.wait(DEADLINE)
        return "once"

    job_id = platform.submit({}, job_id="twice")
    platform.submit_raw({"id": "twice", "input": {}})  # the same job again, in the same batch
    with WorkerThread(platform, handler, concurrency=4):
        # The second copy must reach the runner while the first still runs.
        assert records.wait_for("already running")
        release.set()
        assert platform.wait_final([job_id], DEADLINE)
        after = platform.submit({})
        assert platform.wait_final([after], DEADLINE)
    assert len([e for e in platform.events if e.kind == "done" and job_id in e.job_ids]) == 1
    assert platform.counts()["duplicates"] == 0
    assert "already running" in records.text()


def test_job_inputs_up_to_runpods_request_limit_pass_the_take_cap(platform):
    # runpod documents 20 MB for a /runsync input: a batch with two such jobs
    # is read whole, not refused by the take's cap.
    big = "x" * (20 * 1000 * 1000)
    ids = [platform.submit({"blob": big}) for _ in range(2)]
    with WorkerThread(platform, lambda job: {"size": len(job["input"]["blob"])}, concurrency=2):
        assert platform.wait_final(ids, timeout=60)
    for job_id in ids:
        assert platform.status(job_id)["output"] == {"size": len(big)}
