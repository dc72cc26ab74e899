"""The smaller runpod utility paths: ``serverless.utils`` (the package itself,
``rp_cleanup``, ``rp_debugger``, ``rp_cuda``) and ``serverless.modules``
(``rp_logger``, ``rp_http``).

Expected values and messages are runpod 1.12.0's unless a test says otherwise.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import subprocess
import sys
import textwrap
import threading
from typing import Any, Dict, Iterator, List

import pytest
import requests

from slotworker.platform import Platform

# -- the package ---------------------------------------------------------------------------


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, **env))


def test_package_level_names_are_runpods() -> None:
    from slotworker.serverless import utils
    from slotworker.serverless.utils import (download_files_from_urls, upload_file_to_bucket,
                                             upload_in_memory_object)
    from slotworker.serverless.utils import rp_download, rp_upload

    assert download_files_from_urls is rp_download.download_files_from_urls
    assert upload_file_to_bucket is rp_upload.upload_file_to_bucket
    assert upload_in_memory_object is rp_upload.upload_in_memory_object
    assert set(utils.__all__) <= set(dir(utils))


def test_volume_cache_is_refused_with_an_explanation() -> None:
    with pytest.raises(ImportError) as caught:
        from slotworker.serverless.utils import VolumeCache  # noqa: F401
    message = str(caught.value)
    assert "runpod.serverless.utils.VolumeCache" in message and "worker side only" in message
    from slotworker.serverless import utils
    with pytest.raises(ImportError, match="runpod.serverless.utils.VolumeCache"):
        utils.VolumeCache
    with pytest.raises(AttributeError):
        utils.no_such_name


def test_importing_the_packages_loads_neither_boto3_nor_requests() -> None:
    proc = run_python("""
        import sys
        import slotworker.serverless.utils, slotworker.serverless.modules
        lazy = 'requests' not in sys.modules and 'boto3' not in sys.modules
        from slotworker.serverless.utils import (rp_cleanup, rp_cuda, rp_debugger, rp_download,
                                                 rp_upload, rp_validator)
        from slotworker.serverless.modules import rp_http, rp_logger
        print(lazy, 'boto3' in sys.modules, 'botocore' in sys.modules)
    """, RUNPOD_MAX_DOWNLOAD_BYTES="nope", RUNPOD_WEBHOOK_POST_OUTPUT="", BUCKET_ENDPOINT_URL="http://127.0.0.1:9")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False", "False"]


# -- rp_cleanup -----------------------------------------------------------------------------------
def make_tree(root: Any, names: List[str]) -> None:
    for name in names:
        path = root / name
        path.mkdir(parents=True, exist_ok=True)
        (path / "f.txt").write_text("x")


def test_clean_removes_runpods_folders_and_output_zip(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from slotworker.serverless.utils.rp_cleanup import clean

    monkeypatch.chdir(tmp_path)
    make_tree(tmp_path, ["input_objects", "output_objects", "job_files/sub", "jobs/j1", "local_upload",
                         "simulated_uploaded", "mine", "theirs"])
    (tmp_path / "output.zip").write_bytes(b"PK")
    clean()
    assert sorted(os.listdir(tmp_path)) == ["jobs", "local_upload", "mine", "simulated_uploaded", "theirs"]
    clean(folder_list=["mine", "theirs", "never-existed"])
    assert sorted(os.listdir(tmp_path)) == ["jobs", "local_upload", "simulated_uploaded"]


def test_clean_with_nothing_to_remove_is_fine(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from slotworker.serverless.utils.rp_cleanup import clean

    monkeypatch.chdir(tmp_path)
    clean()
    clean([])
    assert os.listdir(tmp_path) == []


# -- rp_cuda --------------------------------------------------------------------------------------
@pytest.mark.parametrize("script, expected", [
    ("echo '| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |'", True),
    ("echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver'; exit 9", False),
    ("echo 'something else'", False),
    ("printf '\\377\\376 NVIDIA-SMI'", False),  # not UTF-8: runpod's decode fails, so False
])
def test_is_available_runs_nvidia_smi(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, script: str,
                                      expected: bool) -> None:
    from slotworker.serverless.utils import rp_cuda

    tool = tmp_path / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert rp_cuda.is_available() is expected


def test_is_available_without_nvidia_smi_is_false(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from slotworker.serverless.utils import rp_cuda

    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder
    assert rp_cuda.is_available() is False


# -- rp_debugger ----------------------------------------------------------------------------------
@pytest.fixture
def checkpoints() -> Iterator[Any]:
    from slotworker.serverless.utils import rp_debugger

    rp_debugger.clear_debugger_output()
    yield rp_debugger.Checkpoints()
    rp_debugger.clear_debugger_output()


ISO_Z = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00Z"


def test_checkpoints_is_one_object_with_runpods_entries(checkpoints: Any) -> None:
    from slotworker.serverless.utils.rp_debugger import Checkpoints

    assert Checkpoints() is checkpoints
    checkpoints.add("load")
    checkpoints.start("load")
    checkpoints.stop("load")
    checkpoints.add("never-stopped")
    checkpoints.start("never-stopped")
    [entry] = checkpoints.get_checkpoints()
    assert list(entry) == ["name", "start_utc", "stop_utc", "duration_ms"]
    assert entry["name"] == "load" and entry["duration_ms"] >= 0
    assert re.fullmatch(ISO_Z, entry["start_utc"]) and re.fullmatch(ISO_Z, entry["stop_utc"])
    assert checkpoints.get_checkpoints() == []  # reported once
    assert checkpoints.name_lookup == {"load": 0, "never-stopped": 1}


def test_checkpoint_misuse_raises_runpods_keyerrors(checkpoints: Any) -> None:
    checkpoints.add("a")
    with pytest.raises(KeyError, match='Checkpoint name "a" already exists.'):
        checkpoints.add("a")
    with pytest.raises(KeyError, match="Checkpoint name 'b' does not exist."):
        checkpoints.start("b")
    with pytest.raises(KeyError, match="Checkpoint name 'b' does not exist."):
        checkpoints.stop("b")
    with pytest.raises(KeyError, match="Checkpoint has not been started."):
        checkpoints.stop("a")


def test_line_timer_times_a_block_even_when_it_raises(checkpoints: Any) -> None:
    from slotworker.serverless.utils.rp_debugger import LineTimer

    with LineTimer("block") as bound:
        assert bound is None
    with pytest.raises(RuntimeError):
        with LineTimer("failing"):
            raise RuntimeError("boom")
    assert [e["name"] for e in checkpoints.get_checkpoints()] == ["block", "failing"]
    with pytest.raises(KeyError):
        LineTimer("block")  # the name is taken until the store is emptied


def test_function_timer_records_each_call_by_name(checkpoints: Any) -> None:
    from slotworker.serverless.utils.rp_debugger import FunctionTimer, clear_debugger_output

    @FunctionTimer
    def infer(x: int) -> int:
        """Doubles."""
        return 2 * x

    assert (infer.__name__, infer.__doc__) == ("infer", "Doubles.")
    assert infer(21) == 42
    with pytest.raises(KeyError, match="already exists"):
        infer(1)  # as in runpod: one call per emptying of the store
    clear_debugger_output()
    assert infer(2) == 4
    assert [e["name"] for e in checkpoints.get_checkpoints()] == ["infer"]


def test_function_timer_on_a_method_and_on_a_raising_function(checkpoints: Any) -> None:
    from slotworker.serverless.utils.rp_debugger import FunctionTimer

    class Model:
        @FunctionTimer
        def predict(self, x: int) -> int:
            return x + 1

    @FunctionTimer
    def broken() -> None:
        raise ValueError("bad")

    assert Model().predict(1) == 2
    with pytest.raises(ValueError):
        broken()
    assert [e["name"] for e in checkpoints.get_checkpoints()] == ["predict", "broken"]


def test_get_debugger_output_has_runpods_shape_and_empties_the_store(checkpoints: Any) -> None:
    from slotworker.serverless.utils.rp_debugger import LineTimer, get_debugger_output

    with LineTimer("step"):
        pass
    output = get_debugger_output()
    assert list(output) == ["system_info", "timestamps"]
    assert set(output["system_info"]) == {"os", "processor", "python_version", "runpod", "slotworker"}
    assert output["system_info"]["runpod"] == "1.12.0"
    assert [e["name"] for e in output["timestamps"]] == ["step"]
    assert get_debugger_output()["timestamps"] == [] and checkpoints.checkpoints == []


def test_timers_on_many_threads_at_once_all_land(checkpoints: Any) -> None:
    from slotworker.serverless.utils.rp_debugger import LineTimer

    start = threading.Barrier(16)
    errors: List[BaseException] = []

    def job(n: int) -> None:
        try:
            start.wait(10)
            for step in range(50):
                with LineTimer(f"t{n}-{step}"):
                    pass
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=job, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    names = [e["name"] for e in checkpoints.get_checkpoints()]
    assert sorted(names) == sorted(f"t{n}-{s}" for n in range(16) for s in range(50))
    assert all(checkpoints.checkpoints[i]["name"] == name for name, i in checkpoints.name_lookup.items())


# -- rp_logger --------------------------------------------------------------------------------------
# runpod 1.12.0's RunPodLogger methods: name -> parameter names and defaults.
RUNPOD_LOGGER_METHODS: Dict[str, List[Any]] = {
    "log": [("message", None), ("message_level", "INFO"), ("job_id", None)],
    "secret": [("secret_name", None), ("secret", None)],
    "set_level": [("new_level", None)],
    "debug": [("message", None), ("request_id", None)],
    "info": [("message", None), ("request_id", None)],
    "warn": [("message", None), ("request_id", None)],
    "error": [("message", None), ("request_id", None)],
    "trace": [("message", None), ("request_id", None)],
    "tip": [("message", None)],
}


def test_runpod_logger_is_at_runpods_path_with_runpods_methods() -> None:
    import slotworker
    from slotworker.serverless.modules.rp_logger import LOG_LEVELS, MAX_MESSAGE_LENGTH, RunPodLogger

    assert RunPodLogger is slotworker.RunPodLogger
    assert LOG_LEVELS == ["NOTSET", "TRACE", "DEBUG", "INFO", "WARN", "ERROR"] and MAX_MESSAGE_LENGTH == 4096
    for name, params in RUNPOD_LOGGER_METHODS.items():
        sig = inspect.signature(getattr(RunPodLogger(), name))
        got = [(p.name, None if p.default is p.empty else p.default) for p in sig.parameters.values()]
        assert got == params, name


def test_runpod_logger_writes_through_the_worker_logger(records: Any) -> None:
    from slotworker.serverless.modules.rp_logger import RunPodLogger

    logger = RunPodLogger()
    logger.info("hello", "job-1")
    logger.log("as warn", "WARN", job_id="job-2")
    logger.tip("a tip")
    assert records.lines[-3:] == ["INFO job-1 hello", "WARNING job-2 as warn", "INFO None a tip"]


# -- rp_http ----------------------------------------------------------------------------------------
def test_rp_http_url_names_are_read_from_the_environment_when_looked_up() -> None:
    proc = run_python("""
        import os
        from slotworker.serverless.modules import rp_http
        os.environ['RUNPOD_WEBHOOK_POST_OUTPUT'] = 'http://p/job-done/$RUNPOD_POD_ID/$ID?gpu=x'
        print(rp_http.JOB_DONE_URL)
        print(rp_http.JOB_DONE_URL_TEMPLATE)
        print(rp_http.JOB_STREAM_URL, rp_http.WORKER_ID)
        print(callable(rp_http.send_result), callable(rp_http.stream_result), type(rp_http.log).__name__)
    """, RUNPOD_POD_ID="pod-7")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["http://p/job-done/pod-7/$ID?gpu=x",
                                        "http://p/job-done/$RUNPOD_POD_ID/$ID?gpu=x",
                                        "JOB_STREAM_URL pod-7",
                                        "True True RunPodLogger"]


def test_send_result_and_stream_result_post_to_the_platform(platform: Platform,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from slotworker.serverless.modules import rp_http

    env = platform.worker_env("w1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    job_id = platform.submit({"n": 1})
    take = requests.get(env["RUNPOD_WEBHOOK_GET_JOB"].replace("$ID", "w1"), timeout=10,
                        headers={"Authorization": env["RUNPOD_AI_API_KEY"]})
    assert take.json()["id"] == job_id

    asyncio.run(rp_http.stream_result(None, {"output": "partial"}, {"id": job_id}))
    asyncio.run(rp_http.send_result(None, {"output": {"answer": 2}}, {"id": job_id}))
    assert platform.wait_final([job_id], timeout=10)
    status = platform.status(job_id)
    assert status["status"] == "COMPLETED" and status["output"] == {"answer": 2}
    posts = [e for e in platform.events if job_id in e.job_ids and e.kind != "take"]
    assert [(e.kind, e.query.get("isStream")) for e in posts] == [("stream", "false"), ("done", "false")]


def test_send_result_without_a_platform_logs_and_returns(records: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from slotworker.serverless.modules import rp_http

    monkeypatch.delenv("RUNPOD_WEBHOOK_POST_OUTPUT", raising=False)
    asyncio.run(rp_http.send_result(None, {"output": 1}, {"id": "j"}))
    assert any("Failed to return job results" in line for line in records.lines)
    assert records.lines[-1] == "INFO j Finished."
