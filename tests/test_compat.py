"""Drop-in compatibility with runpod 1.12.0 handler code.

``import slotworker as runpod`` and the rest of the handler unchanged: the
namespace, async handlers, fitness checks, logging, config keys, and every
example under ``examples/``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List

import pytest

from slotworker.platform import Faults, Platform

from support import ROOT, WorkerThread, run_script, spawn_script, write_script

EXAMPLES = os.path.join(ROOT, "examples")
SECRET = "sk-SECRET-0123456789abcdef"


# -- the namespace -------------------------------------------------------------------
def test_runpod_names_resolve_after_import_slotworker_as_runpod() -> None:
    import slotworker as runpod

    assert runpod.serverless.start is runpod.start
    assert callable(runpod.serverless.progress_update)
    assert callable(runpod.serverless.register_fitness_check)
    assert runpod.serverless.runpod_version == "1.12.0"
    logger = runpod.RunPodLogger()
    for name in ("debug", "info", "warn", "error", "trace", "tip", "secret", "set_level", "log"):
        assert callable(getattr(logger, name)), name


def test_importing_slotworker_reads_no_environment(tmp_path: Any) -> None:
    # No work at import time: importing with a broken environment is fine.
    code = "import slotworker, slotworker.serverless; print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, RUNPOD_PING_INTERVAL="nope",
                                   RUNPOD_WEBHOOK_GET_JOB="http://127.0.0.1:9/x"))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


# -- async handlers, through the real worker -----------------------------------------
def test_an_async_handler_runs(platform: Platform) -> None:
    async def handler(job: Dict[str, Any]) -> Dict[str, Any]:
        await asyncio.sleep(0.01)
        return {"double": job["input"]["n"] * 2}

    with WorkerThread(platform, handler, concurrency=4):
        ids = [platform.submit({"n": n}) for n in range(8)]
        assert platform.wait_final(ids, timeout=20)
    for n, job_id in enumerate(ids):
        assert platform.status(job_id)["output"] == {"double": n * 2}


def test_an_async_generator_streams_and_aggregates(platform: Platform) -> None:
    async def handler(job: Dict[str, Any]) -> Any:
        for i in range(3):
            await asyncio.sleep(0)
            yield {"i": i}

    with WorkerThread(platform, handler, return_aggregate_stream=True):
        job_id = platform.submit({})
        assert platform.wait_final([job_id], timeout=20)
    status = platform.status(job_id)
    assert status["stream"] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert status["output"] == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_progress_update_from_a_handler_reaches_the_platform(platform: Platform) -> None:
    import slotworker as runpod

    def handler(job: Dict[str, Any]) -> str:
        runpod.serverless.progress_update(job, {"percent": 50})
        return "done"

    with WorkerThread(platform, handler):
        job_id = platform.submit({})
        assert platform.wait_final([job_id], timeout=20)
    progress = [e for e in platform.events if e.kind == "progress"]
    assert [json.loads(e.body) for e in progress] == [{"status": "IN_PROGRESS", "output": {"percent": 50}}]
    assert platform.status(job_id)["output"] == "done"


def test_the_refresh_worker_config_key_stops_the_worker_after_a_job(platform: Platform) -> None:
    worker = WorkerThread(platform, lambda job: {"ok": True}, refresh_worker=True).start()
    job_id = platform.submit({})
    assert platform.wait_final([job_id], timeout=20)
    worker.thread.join(20)
    assert not worker.thread.is_alive() and worker.exit_code == 0
    assert platform.status(job_id).get("stopPod") is True


# -- fitness checks ------------------------------------------------------------------
FITNESS = """
    import os
    import slotworker as runpod

    @runpod.serverless.register_fitness_check
    def check_disk():
        if os.environ.get("FAIL") == "sync":
            raise RuntimeError("no disk")

    @runpod.serverless.register_fitness_check
    async def check_model():
        if os.environ.get("FAIL") == "async":
            raise RuntimeError("no model")

    runpod.serverless.start({"handler": lambda job: {"ran": True}})
"""


@pytest.mark.parametrize("which", ["sync", "async"])
def test_a_failing_fitness_check_ends_the_deployed_worker_with_exit_1(tmp_path: Any, which: str) -> None:
    path = write_script(str(tmp_path), "fit.py", FITNESS)
    with Platform(long_poll=0.2) as platform:
        job_id = platform.submit({})
        proc = run_script(path, env=dict(platform.worker_env("w1"), FAIL=which), timeout=30)
        assert proc.returncode == 1, proc.stdout
        assert "Fitness check failed" in proc.stdout
        assert not platform.takes(), "a worker that failed its checks must not take jobs"
        assert platform.status(job_id)["status"] == "IN_QUEUE"
        pings = [e for e in platform.events if e.kind == "ping"]
        assert pings and pings[0].query["status"] == "unhealthy"
        assert pings[0].query["check"] == ("check_disk" if which == "sync" else "check_model")


def test_passing_fitness_checks_let_the_worker_take_jobs(tmp_path: Any) -> None:
    path = write_script(str(tmp_path), "fit.py", FITNESS)
    with Platform(long_poll=0.2) as platform:
        job_id = platform.submit({})
        proc = spawn_script(path, env=platform.worker_env("w1"))
        try:
            assert platform.wait_final([job_id], timeout=30)
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        assert platform.status(job_id)["output"] == {"ran": True}


def test_fitness_checks_do_not_run_in_local_test_mode(tmp_path: Any) -> None:
    path = write_script(str(tmp_path), "fit.py", FITNESS)
    proc = run_script(path, "--test_input", '{"input": {}}', env={"FAIL": "sync"}, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout
    assert "Fitness check" not in proc.stdout


def test_fitness_checks_do_not_run_under_the_local_api(tmp_path: Any) -> None:
    import socket
    import urllib.request

    path = write_script(str(tmp_path), "fit.py", FITNESS)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = spawn_script(path, "--rp_serve_api", "--rp_api_port", str(port), env={"FAIL": "sync"},
                        cwd=str(tmp_path))
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                request = urllib.request.Request(f"http://localhost:{port}/runsync", method="POST",
                                                 data=b'{"input": {}}')
                with urllib.request.urlopen(request, timeout=30) as response:
                    answer = json.loads(response.read())
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the local API never came up"
                time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert answer["output"] == {"ran": True}
    assert proc.returncode == 0, out
    assert "fitness check(s) skipped" in out


# -- logging -------------------------------------------------------------------------
LOGGING = """
    import slotworker as runpod

    log = runpod.RunPodLogger()

    def handler(job):
        log.info("handler saw the job", job["id"])
        if job["input"].get("raise"):
            raise ValueError("boom")
        return {"ok": True}

    runpod.serverless.start({"handler": handler})
"""


def run_logging_worker(tmp_path: Any, extra_env: Dict[str, str]) -> List[str]:
    """A full job, a raising job, failing takes and failing posts, at DEBUG; the log lines."""
    path = write_script(str(tmp_path), "logs.py", LOGGING)
    faults = Faults(error_rate=0.5, routes=frozenset({"done"}), seed=7)
    with Platform(long_poll=0.2, api_key=SECRET, faults=faults) as platform:
        platform.set_down(1.5)  # the first takes answer 503
        ids = [platform.submit({}, job_id="job-ok"), platform.submit({"raise": True}, job_id="job-raise")]
        env = dict(platform.worker_env("w1"), RUNPOD_LOG_LEVEL="DEBUG", **extra_env)
        proc = spawn_script(path, env=env)
        try:
            assert platform.wait_final(ids, timeout=30)
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        assert any(e.status == 503 for e in platform.takes())
        assert any(e.status == 500 for e in platform.events if e.kind == "done")
    return out.splitlines()


def test_deployed_logs_are_json_lines_with_the_job_id(tmp_path: Any) -> None:
    lines = run_logging_worker(tmp_path, {"RUNPOD_ENDPOINT_ID": "ep"})
    records = [json.loads(line) for line in lines if line.strip()]
    assert records and all(set(r) == {"requestId", "message", "level"} for r in records)
    by_job = {r["message"]: r["requestId"] for r in records if r["requestId"] == "job-ok"}
    assert {"Started.", "Finished.", "handler saw the job"} <= set(by_job)
    assert any(r["requestId"] == "job-raise" and r["level"] == "ERROR" for r in records)
    assert any(r["level"] == "DEBUG" for r in records)


def test_the_api_key_never_appears_in_the_workers_logs(tmp_path: Any) -> None:
    for env in ({"RUNPOD_ENDPOINT_ID": "ep"}, {}):
        lines = run_logging_worker(tmp_path, env)
        assert lines
        assert not [line for line in lines if SECRET in line]


def test_local_logs_are_readable_text_with_the_job_id(tmp_path: Any) -> None:
    path = write_script(str(tmp_path), "logs.py", LOGGING)
    proc = run_script(path, "--test_input", '{"id": "j1", "input": {}}', cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout
    assert re.search(r"^INFO +\| j1 \| Started\.$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^INFO +\| j1 \| handler saw the job$", proc.stdout, re.M), proc.stdout


# -- the examples --------------------------------------------------------------------
EXAMPLE_NAMES = ["plain", "streaming", "concurrency", "legacy_blocking_io"]


def example_test_input(name: str) -> str:
    """The ``--test_input '...'`` one-liner written in the example's docstring."""
    with open(os.path.join(EXAMPLES, f"{name}.py"), encoding="utf-8") as handle:
        match = re.search(r"--test_input '([^']*)'", handle.read())
    assert match, f"{name}.py documents no --test_input one-liner"
    return match.group(1)


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_every_example_runs_with_its_test_input(name: str, tmp_path: Any) -> None:
    proc = run_script(os.path.join(EXAMPLES, f"{name}.py"), "--test_input", example_test_input(name),
                      cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "completed successfully" in proc.stdout


def test_the_legacy_example_serves_32_blocking_jobs_at_a_time(tmp_path: Any) -> None:
    import concurrent.futures
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://localhost:{port}"
    proc = spawn_script(os.path.join(EXAMPLES, "legacy_blocking_io.py"), "--rp_serve_api",
                        "--rp_api_port", str(port), cwd=str(tmp_path))

    def post(body: Any) -> Any:
        request = urllib.request.Request(base + "/runsync", data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=1).read()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "no /health"
                time.sleep(0.05)
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(lambda i: post({"input": {"calls": 2}}), range(32)))
        elapsed = time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert all(a["status"] == "COMPLETED" and a["output"]["all_ok"] for a in answers)
    # One at a time this is 32 x 0.4 s = 12.8 s.
    assert elapsed < 6.0, elapsed
