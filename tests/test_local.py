"""Local development: ``--test_input``, ``test_input.json``, ``--rp_serve_api``.

Every test runs a handler script as a real process, as a developer would.
"""

from __future__ import annotations

import http.server
import json
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional

import pytest

from support import run_script, spawn_script, write_script

HANDLER = """
    import json, sys
    import slotworker as runpod

    def handler(job):
        value = job["input"]
        if value.get("raise"):
            raise RuntimeError("handler failed on purpose")
        if value.get("error"):
            return {"error": "told to fail"}
        return {"echo": value, "argv": sys.argv[1:]}

    runpod.serverless.start({"handler": handler})
"""

GENERATOR = """
    import slotworker as runpod

    def handler(job):
        for i in range(job["input"]["n"]):
            yield i

    runpod.serverless.start({"handler": handler})
"""


def result_json(stdout: str) -> Dict[str, Any]:
    """The result the worker printed: the one JSON document among the log lines."""
    start = stdout.index("\n{") + 1 if not stdout.startswith("{") else 0
    decoder = json.JSONDecoder()
    value, _ = decoder.raw_decode(stdout[start:])
    return value


@pytest.fixture
def handler_path(tmp_path: Any) -> str:
    return write_script(str(tmp_path), "handler.py", HANDLER)


def test_test_input_prints_the_result_and_exits_0(handler_path: str, tmp_path: Any) -> None:
    proc = run_script(handler_path, "--test_input", '{"input": {"x": 1}}', cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result_json(proc.stdout) == {"output": {"echo": {"x": 1}, "argv": []}}


def test_test_input_json_in_the_working_directory_is_used(handler_path: str, tmp_path: Any) -> None:
    (tmp_path / "test_input.json").write_text('{"input": {"from": "file"}}', encoding="utf-8")
    proc = run_script(handler_path, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result_json(proc.stdout)["output"]["echo"] == {"from": "file"}


def test_test_input_flag_wins_over_test_input_json(handler_path: str, tmp_path: Any) -> None:
    (tmp_path / "test_input.json").write_text('{"input": {"from": "file"}}', encoding="utf-8")
    proc = run_script(handler_path, "--test_input", '{"input": {"from": "flag"}}', cwd=str(tmp_path))
    assert result_json(proc.stdout)["output"]["echo"] == {"from": "flag"}


def test_matching_test_output_exits_0(handler_path: str, tmp_path: Any) -> None:
    expected = json.dumps({"output": {"echo": {"x": 1}, "argv": []}})
    proc = run_script(handler_path, "--test_input", '{"input": {"x": 1}}', "--test_output", expected,
                      cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "matches test_output" in proc.stdout


def test_test_output_mismatch_exits_1(handler_path: str, tmp_path: Any) -> None:
    proc = run_script(handler_path, "--test_input", '{"input": {"x": 1}}',
                      "--test_output", '{"output": {"echo": {"x": 2}}}', cwd=str(tmp_path))
    assert proc.returncode == 1
    assert "does not match test_output" in proc.stdout


def test_a_job_without_input_exits_1(handler_path: str, tmp_path: Any) -> None:
    proc = run_script(handler_path, "--test_input", '{"id": "x"}', cwd=str(tmp_path))
    assert proc.returncode == 1
    assert "no input" in proc.stdout


def test_no_test_input_at_all_exits_1(handler_path: str, tmp_path: Any) -> None:
    proc = run_script(handler_path, cwd=str(tmp_path))
    assert proc.returncode == 1
    assert "no test input" in proc.stdout


def test_test_input_that_is_not_json_exits_1(handler_path: str, tmp_path: Any) -> None:
    proc = run_script(handler_path, "--test_input", "{nope", cwd=str(tmp_path))
    assert proc.returncode == 1
    assert "not valid JSON" in proc.stdout


def test_a_handler_exception_exits_1(handler_path: str, tmp_path: Any) -> None:
    proc = run_script(handler_path, "--test_input", '{"input": {"raise": true}}', cwd=str(tmp_path))
    assert proc.returncode == 1
    assert "handler failed on purpose" in proc.stdout


def test_a_returned_error_exits_1(handler_path: str, tmp_path: Any) -> None:
    proc = run_script(handler_path, "--test_input", '{"input": {"error": true}}', cwd=str(tmp_path))
    assert proc.returncode == 1
    assert result_json(proc.stdout) == {"error": "told to fail"}


def test_unknown_flags_stay_in_sys_argv_for_the_handler(handler_path: str, tmp_path: Any) -> None:
    proc = run_script(handler_path, "--model", "big", "--test_input", '{"input": {}}', "--verbose",
                      "--rp_log_level", "DEBUG", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result_json(proc.stdout)["output"]["argv"] == ["--model", "big", "--verbose"]


def test_a_generator_prints_its_aggregated_stream(tmp_path: Any) -> None:
    path = write_script(str(tmp_path), "gen.py", GENERATOR)
    proc = run_script(path, "--test_input", '{"input": {"n": 3}}', cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result_json(proc.stdout) == {"output": [0, 1, 2]}


def test_rp_debugger_adds_timings_to_the_output(handler_path: str, tmp_path: Any) -> None:
    proc = run_script(handler_path, "--test_input", '{"input": {}}', "--rp_debugger", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    debug = result_json(proc.stdout)["output"]["rp_debugger"]
    assert set(debug) >= {"system_info", "timestamps", "ready_delay_ms"}
    assert set(debug["system_info"]) >= {"os", "processor", "python_version", "runpod"}
    stamp = debug["timestamps"][0]
    assert stamp["name"] == "run_job" and stamp["duration_ms"] >= 0
    assert {"start_utc", "stop_utc"} <= set(stamp)


# -- --rp_serve_api -----------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_json(url: str, body: Optional[Any] = None, timeout: float = 30.0) -> Any:
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def wait_healthy(base: str, proc: subprocess.Popen, deadline_s: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.communicate()[0]}")
        try:
            http_json(base + "/health", timeout=1.0)
            return
        except (urllib.error.URLError, OSError, ValueError):
            time.sleep(0.05)
    raise AssertionError("the local API never answered /health")


class Served:
    """A handler script serving ``--rp_serve_api`` on a free port."""

    def __init__(self, path: str, cwd: str) -> None:
        self.port = free_port()
        self.base = f"http://localhost:{self.port}"
        self.proc = spawn_script(path, "--rp_serve_api", "--rp_api_port", str(self.port), cwd=cwd)
        try:
            wait_healthy(self.base, self.proc)
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()

    def stop(self) -> int:
        """SIGINT, as Ctrl-C would; returns the exit code."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        return self.proc.returncode


@pytest.fixture
def served(handler_path: str, tmp_path: Any) -> Any:
    server = Served(handler_path, str(tmp_path))
    try:
        yield server
    finally:
        server.kill()


def test_serve_api_runsync_returns_the_output_and_sigint_exits_0(served: Served) -> None:
    answer = http_json(served.base + "/runsync", {"input": {"hello": "world"}})
    assert answer["status"] == "COMPLETED"
    assert answer["output"] == {"echo": {"hello": "world"}, "argv": []}
    assert served.stop() == 0


def test_serve_api_run_then_status(served: Served) -> None:
    job = http_json(served.base + "/run", {"input": {"n": 1}})
    deadline = time.monotonic() + 20
    status: Dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = http_json(f"{served.base}/status/{job['id']}")
        if status["status"] == "COMPLETED":
            break
        time.sleep(0.05)
    assert status["status"] == "COMPLETED"
    assert status["output"]["echo"] == {"n": 1}
    assert "paths" in http_json(served.base + "/openapi.json")
    assert served.stop() == 0


def test_serve_api_a_failing_handler_gives_failed(served: Served) -> None:
    answer = http_json(served.base + "/runsync", {"input": {"raise": True}})
    assert answer["status"] == "FAILED"
    assert "handler failed on purpose" in answer["error"]
    assert served.stop() == 0


def test_serve_api_calls_the_jobs_webhook_when_it_completes(served: Served) -> None:
    received: List[Any] = []
    got = threading.Event()

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            received.append(json.loads(self.rfile.read(length)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            got.set()

        def log_message(self, *args: Any) -> None:
            pass

    hook = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=hook.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{hook.server_address[1]}/done"
        job = http_json(served.base + "/run", {"input": {"w": 1}, "webhook": url})
        assert got.wait(20), "the webhook was never called"
    finally:
        hook.shutdown()
        hook.server_close()
    assert received[0]["id"] == job["id"]
    assert received[0]["status"] == "COMPLETED"
    assert received[0]["output"]["echo"] == {"w": 1}
    assert served.stop() == 0


def test_a_bad_log_level_in_the_environment_falls_back_to_info(handler_path: str, tmp_path: Any) -> None:
    proc = run_script(handler_path, "--test_input", '{"input": {}}', env={"RUNPOD_LOG_LEVEL": "LOUD"},
                      cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "is not a level" in proc.stdout


def test_a_bad_rp_log_level_flag_exits_1(handler_path: str, tmp_path: Any) -> None:
    proc = run_script(handler_path, "--test_input", '{"input": {}}', "--rp_log_level", "LOUD",
                      cwd=str(tmp_path))
    assert proc.returncode == 1
    assert "invalid log level" in proc.stdout
