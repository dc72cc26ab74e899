"""Shutdown of a real worker process: SIGTERM/SIGINT, grace, a take in flight."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Any, Dict, List

import pytest

from support import spawn_script, write_script

DEADLINE = 30.0

SCRIPT = """
import os
import time

import slotworker
from slotworker.worker import platform_client as client

if os.environ.get("TEST_SAY_TAKE"):
    # Tell the test when a take starts, so it can signal during one.
    _take = client.PlatformClient.take

    def take(self, n, job_in_progress):
        print("TAKE-START", flush=True)
        return _take(self, n, job_in_progress)

    client.PlatformClient.take = take


def handler(job):
    if job["input"].get("sigterm_my_thread"):
        # The kernel may deliver a process's SIGTERM to any thread: here, this one.
        import signal, threading
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
    seconds = float(job["input"].get("seconds", 0))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)
    return {"slept": seconds}


slotworker.start({"handler": handler,
                  "concurrency_modifier": lambda current: int(os.environ["TEST_SLOTS"])})
"""


class WorkerProcess:
    """A worker script as a process, its output collected line by line."""

    def __init__(self, tmp_path: Any, platform: Any, slots: int = 4, grace: float = 20.0,
                 **env: str) -> None:
        path = write_script(str(tmp_path), "worker.py", SCRIPT)
        full_env: Dict[str, str] = dict(platform.worker_env("w1"))
        full_env.update({"TEST_SLOTS": str(slots), "SLOTWORKER_SHUTDOWN_GRACE": str(grace),
                         "RUNPOD_PING_INTERVAL": "200"})
        full_env.update(env)
        self.proc: subprocess.Popen = spawn_script(path, env=full_env)
        self.lines: List[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def wait_line(self, text: str, timeout: float = DEADLINE) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: any(text in line for line in self.lines), timeout)

    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def kill(self, signum: int) -> float:
        at = time.monotonic()
        os.kill(self.proc.pid, signum)
        return at

    def wait(self, timeout: float = DEADLINE) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"worker did not exit in {timeout}s:\n{self.output()}")
        self._reader.join(5)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def spawn(tmp_path):
    made: List[WorkerProcess] = []

    def make(platform: Any, **kwargs: Any) -> WorkerProcess:
        w = WorkerProcess(tmp_path, platform, **kwargs)
        made.append(w)
        return w

    try:
        yield make
    finally:
        for w in made:
            w.close()


def taken(platform: Any) -> List[str]:
    return [j.id for j in platform.jobs() if j.first_taken_at is not None]


def test_sigterm_mid_burst_stops_taking_and_every_taken_job_reports(platform, spawn):
    ids = [platform.submit({"seconds": 0.3}) for _ in range(60)]
    w = spawn(platform, slots=4)
    assert platform.wait_until(lambda p: p.counts()["completed"] >= 4 and p.counts()["in_progress"] >= 1,
                               DEADLINE), w.output()
    at = w.kill(signal.SIGTERM)
    assert w.wait() == 0, w.output()
    exited = time.monotonic()
    got = taken(platform)
    assert 4 <= len(got) < len(ids)
    for job_id in got:
        assert platform.status(job_id)["status"] == "COMPLETED", job_id
    # Nothing taken after the signal, apart from a take already in flight.
    late = [e for e in platform.takes() if e.t_start > at + 1.0]
    assert late == [], late
    assert exited - at < 20.0
    assert platform.counts()["duplicates"] == 0
    assert "shutting down" in w.output()


def test_idle_worker_exits_promptly_on_sigterm(platform, spawn):
    w = spawn(platform)
    assert platform.wait_until(lambda p: len(p.takes()) >= 1, DEADLINE), w.output()
    at = w.kill(signal.SIGTERM)
    assert w.wait() == 0, w.output()
    assert time.monotonic() - at < 5.0


def test_sigint_is_graceful_too(platform, spawn):
    job_id = platform.submit({"seconds": 0.5})
    w = spawn(platform)
    assert platform.wait_until(lambda p: p.status(job_id)["status"] == "IN_PROGRESS", DEADLINE), w.output()
    w.kill(signal.SIGINT)
    assert w.wait() == 0, w.output()
    assert platform.status(job_id)["status"] == "COMPLETED"


def test_second_signal_exits_at_once(platform, spawn):
    job_id = platform.submit({"seconds": 60})
    w = spawn(platform, grace=60)
    assert platform.wait_until(lambda p: p.status(job_id)["status"] == "IN_PROGRESS", DEADLINE), w.output()
    w.kill(signal.SIGTERM)
    assert w.wait_line("shutting down"), w.output()
    at = w.kill(signal.SIGINT)
    code = w.wait(10)
    assert code == 128 + signal.SIGINT, w.output()
    assert time.monotonic() - at < 5.0


def test_job_past_the_grace_is_logged_lost_by_id_and_exit_is_not_clean(platform, spawn):
    job_id = platform.submit({"seconds": 60})
    w = spawn(platform, grace=1)
    assert platform.wait_until(lambda p: p.status(job_id)["status"] == "IN_PROGRESS", DEADLINE), w.output()
    w.kill(signal.SIGTERM)
    assert w.wait() == 1, w.output()
    lost = [line for line in w.output().splitlines() if "LOST" in line]
    assert any(job_id in line for line in lost), w.output()


def test_take_in_flight_at_sigterm_is_not_abandoned(make_platform, spawn):
    # A long poll: the worker's take is parked on the platform when SIGTERM
    # lands; jobs submitted after that are handed to it, and must run.
    platform = make_platform(long_poll=5.0)
    w = spawn(platform)
    assert platform.wait_until(lambda p: p.counts()["waiting_takes"] >= 1, DEADLINE), w.output()
    w.kill(signal.SIGTERM)
    assert w.wait_line("shutting down"), w.output()
    ids = [platform.submit({"seconds": 0.2}) for _ in range(3)]
    assert w.wait() == 0, w.output()
    given = [j for e in platform.takes() for j in e.job_ids]
    assert given, "the parked take got no job"
    for job_id in given:
        assert platform.status(job_id)["status"] == "COMPLETED", job_id
    # One take, one batch: the jobs it did not carry stay queued, untouched.
    for job_id in set(ids) - set(given):
        assert platform.status(job_id)["status"] == "IN_QUEUE"


def test_take_slowed_by_take_cost_at_sigterm_is_not_abandoned(make_platform, spawn):
    platform = make_platform(take_cost=1.5)
    for _ in range(2):
        platform.submit({"seconds": 0.1})
    w = spawn(platform, slots=1, TEST_SAY_TAKE="1")
    assert w.wait_line("TAKE-START"), w.output()
    # The first take is paying its 1.5 s cost now.
    at = w.kill(signal.SIGTERM)
    assert w.wait() == 0, w.output()
    first = platform.takes()[0]
    assert at < first.t_end
    assert platform.status(first.job_ids[0])["status"] == "COMPLETED"
    assert len(platform.takes()) == 1


def test_sigterm_delivered_to_a_job_thread_still_shuts_down_promptly(platform, spawn):
    # Python runs signal handlers on the main thread only; a main thread
    # parked in one long wait would notice a signal caught by another thread
    # only when that wait ended.
    job_id = platform.submit({"sigterm_my_thread": True, "seconds": 0.2})
    w = spawn(platform)
    assert w.wait_line("shutting down", 10), w.output()
    assert w.wait(10) == 0, w.output()
    assert platform.status(job_id)["status"] == "COMPLETED"
