"""``slotworker run handler.py``: an unchanged runpod handler script, runpod not installed.

Every test runs the script as a real process, the way a container's command
would, with ``runpod`` resolving to slotworker through the alias finder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any, List

from slotworker.platform import Platform

from support import script_env, write_script

#: runpod's own test worker imports as this one does (its CI runs it with --test_input).
MOCK_WORKER = """
    import runpod
    from runpod import RunPodLogger
    from runpod.serverless.modules import rp_http

    log = RunPodLogger()

    def handler(job):
        log.info(f"mock worker got {job['input']}")
        return job["input"]["mock_return"]

    if __name__ == "__main__":
        runpod.serverless.start({"handler": handler})
"""


def slotworker_run(*args: str, cwd: Any = None, env: Any = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slotworker", "run", *args], cwd=cwd, env=script_env(env),
                          capture_output=True, text=True, timeout=timeout)


def printed_result(stdout: str) -> Any:
    """The result local test mode printed (the JSON document among the log lines)."""
    start = stdout.index("\n{") + 1 if "\n{" in stdout else stdout.index('"')
    return json.JSONDecoder().raw_decode(stdout[start:])[0]


def fake_real_runpod(tmp_path: Any) -> str:
    """A folder holding a package named runpod that fails when imported: the alias must win."""
    folder = tmp_path / "site"
    (folder / "runpod").mkdir(parents=True)
    (folder / "runpod" / "__init__.py").write_text("raise RuntimeError('the real runpod was imported')\n")
    return str(folder)


def test_runpods_mock_worker_passes_its_ci_command(tmp_path: Any) -> None:
    write_script(str(tmp_path), "handler.py", MOCK_WORKER)
    proc = slotworker_run("handler.py", '--test_input={"input": {"mock_return": "test success"}}', cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert printed_result(proc.stdout) == {"output": "test success"}
    assert "mock worker got {'mock_return': 'test success'}" in proc.stdout


def test_the_alias_wins_over_an_installed_runpod(tmp_path: Any) -> None:
    write_script(str(tmp_path), "handler.py", """
        import runpod, slotworker
        from runpod.serverless import start
        assert runpod is slotworker and start is slotworker.start
        start({"handler": lambda job: {"ok": job["input"]}})
    """)
    proc = slotworker_run("handler.py", "--test_input", '{"input": 7}', cwd=tmp_path,
                          env={"PYTHONPATH": fake_real_runpod(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert printed_result(proc.stdout) == {"output": {"ok": 7}}


def test_the_script_runs_as_main_with_its_own_argv_and_folder(tmp_path: Any) -> None:
    (tmp_path / "helpers.py").write_text("VALUE = 'from a sibling module'\n")
    write_script(str(tmp_path), "handler.py", """
        import sys
        import runpod
        import helpers

        def handler(job):
            return {"argv": sys.argv, "name": __name__, "sibling": helpers.VALUE}

        runpod.serverless.start({"handler": handler})
    """)
    proc = slotworker_run(str(tmp_path / "handler.py"), "--own-flag", "x", "--test_input", '{"input": {}}')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert printed_result(proc.stdout)["output"] == {
        "argv": [str(tmp_path / "handler.py"), "--own-flag", "x"], "name": "__main__",
        "sibling": "from a sibling module"}


def test_a_module_runs_with_dash_m(tmp_path: Any) -> None:
    (tmp_path / "workerpkg").mkdir()
    (tmp_path / "workerpkg" / "__init__.py").write_text("")
    write_script(str(tmp_path / "workerpkg"), "handler.py", """
        import runpod
        runpod.serverless.start({"handler": lambda job: {"module": __name__}})
    """)
    proc = slotworker_run("-m", "workerpkg.handler", "--test_input", '{"input": {}}', cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert printed_result(proc.stdout) == {"output": {"module": "__main__"}}


def test_the_scripts_exit_code_is_the_commands(tmp_path: Any) -> None:
    write_script(str(tmp_path), "handler.py", "import runpod, sys\nsys.exit(3)\n")
    assert slotworker_run("handler.py", cwd=tmp_path).returncode == 3
    failing = slotworker_run("handler.py", "--test_input", '{"input": {}}', cwd=tmp_path)
    assert failing.returncode == 3


def test_a_missing_script_or_no_script_is_a_usage_error(tmp_path: Any) -> None:
    missing = slotworker_run("nope.py", cwd=tmp_path)
    assert missing.returncode == 2 and "nope.py: no such file" in missing.stderr
    assert slotworker_run(cwd=tmp_path).returncode == 2


def test_a_runpod_module_not_provided_names_itself_and_the_worker_side(tmp_path: Any) -> None:
    write_script(str(tmp_path), "handler.py", "from runpod.endpoint import Endpoint\n")
    proc = slotworker_run("handler.py", cwd=tmp_path)
    assert proc.returncode == 1
    assert "ModuleNotFoundError: runpod.endpoint is not provided" in proc.stderr
    assert "worker side only" in proc.stderr


def test_a_runpod_worker_module_imported_from_its_package_names_itself(tmp_path: Any) -> None:
    # `from package import module` turns a missing module into a bare
    # "cannot import name"; the package says what is missing instead.
    write_script(str(tmp_path), "handler.py", "from runpod.serverless.modules import rp_progress\n")
    proc = slotworker_run("handler.py", cwd=tmp_path)
    assert proc.returncode == 1
    assert "runpod.serverless.modules.rp_progress is not provided" in proc.stderr
    assert "worker side only" in proc.stderr
    write_script(str(tmp_path), "provided.py", "from runpod.serverless.modules import rp_logger, rp_http\n"
                                               "print(rp_logger.RunPodLogger.__name__)\n")
    proc = slotworker_run("provided.py", cwd=tmp_path)
    assert proc.returncode == 0 and "RunPodLogger" in proc.stdout, proc.stderr


def test_a_runpod_client_name_not_provided_names_itself(tmp_path: Any) -> None:
    write_script(str(tmp_path), "handler.py", "import runpod\nrunpod.get_pods()\n")
    proc = slotworker_run("handler.py", cwd=tmp_path)
    assert proc.returncode == 1
    assert "runpod.get_pods is not provided" in proc.stderr and "worker side only" in proc.stderr
    write_script(str(tmp_path), "from_import.py", "from runpod import Endpoint\n")
    proc = slotworker_run("from_import.py", cwd=tmp_path)
    assert proc.returncode == 1 and "runpod.Endpoint is not provided" in proc.stderr


def test_the_in_source_one_line_form(tmp_path: Any) -> None:
    write_script(str(tmp_path), "handler.py", """
        import slotworker.as_runpod  # noqa: F401  (first line: runpod resolves to slotworker)
        import runpod
        from runpod.serverless import progress_update
        import slotworker
        assert runpod is slotworker and progress_update is slotworker.progress_update
        runpod.serverless.start({"handler": lambda job: "in-source"})
    """)
    proc = subprocess.run([sys.executable, "handler.py", "--test_input", '{"input": {}}'], cwd=tmp_path,
                          env=script_env({"PYTHONPATH": fake_real_runpod(tmp_path)}), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert printed_result(proc.stdout) == {"output": "in-source"}


def test_the_console_script_runs_a_deployed_worker_to_a_clean_sigterm(tmp_path: Any) -> None:
    write_script(str(tmp_path), "handler.py", MOCK_WORKER)
    command = os.path.join(os.path.dirname(sys.executable), "slotworker")
    with Platform(long_poll=0.2) as platform:
        proc = subprocess.Popen([command, "run", "handler.py"], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=script_env(platform.worker_env("w-run")))
        try:
            ids: List[str] = [platform.submit({"mock_return": i}) for i in range(5)]
            assert platform.wait_final(ids, timeout=30)
            assert [platform.status(i)["output"] for i in ids] == list(range(5))
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out


TIMED = """
    import runpod
    from runpod.serverless.utils.rp_debugger import FunctionTimer, LineTimer

    @FunctionTimer
    def infer(x):
        with LineTimer("tokenize"):
            return {"y": x * 2}

    def handler(job):
        return infer(job["input"]["x"])

    runpod.serverless.start({"handler": handler, "concurrency_modifier": lambda current: 1})
"""


def run_timed_jobs(tmp_path: Any, *flags: str) -> List[Any]:
    write_script(str(tmp_path), "handler.py", TIMED)
    with Platform(long_poll=0.2) as platform:
        proc = subprocess.Popen([sys.executable, "-m", "slotworker", "run", "handler.py", *flags], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=script_env(platform.worker_env("w-timed")))
        try:
            ids = [platform.submit({"x": i}) for i in range(2)]
            assert platform.wait_final(ids, timeout=30)
            statuses = [platform.status(i) for i in ids]
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
    assert all(s["status"] == "COMPLETED" for s in statuses), (statuses, out)
    return [s["output"] for s in statuses]


def test_handler_timers_run_on_every_job_and_clear_between_them(tmp_path: Any) -> None:
    outputs = run_timed_jobs(tmp_path)
    assert outputs == [{"y": 0}, {"y": 2}]


def test_handler_timers_join_the_debugger_output(tmp_path: Any) -> None:
    outputs = run_timed_jobs(tmp_path, "--rp_debugger")
    for output in outputs:
        names = [entry["name"] for entry in output["rp_debugger"]["timestamps"]]
        assert names[0] == "run_job" and set(names[1:]) == {"infer", "tokenize"}, names


CHILDREN = """
    import multiprocessing
    import subprocess
    import sys

    import runpod

    def square(x):
        return x * x

    def handler(job):
        spawned = multiprocessing.get_context("spawn")
        with spawned.Pool(2) as pool:
            squares = pool.map(square, [1, 2, 3])
        child = subprocess.run([sys.executable, "-c", "import runpod; print(runpod.__name__, runpod.serverless.start)"],
                               capture_output=True, text=True, timeout=60)
        return {"squares": squares, "child": child.stdout.strip(), "child_error": child.stderr[-500:]}

    if __name__ == "__main__":
        runpod.serverless.start({"handler": handler})
"""


def test_python_children_of_the_handler_import_runpod_as_slotworker(tmp_path: Any) -> None:
    # A spawn pool re-imports the script in each child (its `import runpod`
    # included), and a `python -c "import runpod"` child is a new interpreter:
    # neither has the parent's import finder. A real runpod on the path
    # must lose there too.
    write_script(str(tmp_path), "handler.py", CHILDREN)
    proc = slotworker_run("handler.py", '--test_input={"input": {}}', cwd=tmp_path,
                          env={"PYTHONPATH": fake_real_runpod(tmp_path)}, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = printed_result(proc.stdout)["output"]
    assert result["squares"] == [1, 4, 9], result
    assert result["child"].startswith("slotworker <function start"), result
