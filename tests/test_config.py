"""Options are read and checked once, before any thread starts.

A bad value is a clear error: ``Options.load`` raises ``ConfigError`` naming
it, and ``start()`` logs that and exits 1 without taking a job.
"""

from __future__ import annotations

import math
from typing import Any, Dict

import pytest

from slotworker.config import DEFAULT_SHUTDOWN_GRACE, ConfigError, Options, Settings, parse_flags
from support import run_script, write_script


def handler(job: Dict[str, Any]) -> Any:
    return job["input"]


def load(env: Any = None, **config: Any) -> Options:
    config.setdefault("handler", handler)
    return Options.load(config, settings=Settings.from_env({}), env=env or {})


def test_defaults_are_runpods_plus_ours() -> None:
    options = load()
    assert options.handler is handler
    assert options.concurrency_modifier is None
    assert options.return_aggregate_stream is False and options.refresh_worker is False
    assert options.take_policy == "pipeline"
    assert options.job_timeout is None
    assert options.shutdown_grace == DEFAULT_SHUTDOWN_GRACE


def test_the_users_config_dict_is_read_never_written() -> None:
    config = {"handler": handler, "job_timeout": 5, "take_policy": "lookahead"}
    before = dict(config)
    Options.load(config, settings=Settings.from_env({}), flags={"rp_debugger": True}, env={})
    assert config == before


@pytest.mark.parametrize("config, named", [
    ({"handler": None}, "handler"),
    ({"handler": "not callable"}, "handler"),
    ({"concurrency_modifier": 4}, "concurrency_modifier"),
    ({"take_policy": "greedy"}, "take_policy"),
    ({"take_policy": ["drain"]}, "take_policy"),
    ({"job_timeout": -1}, "job_timeout"),
    ({"job_timeout": "soon"}, "job_timeout"),
    ({"job_timeout": True}, "job_timeout"),
    ({"job_timeout": math.inf}, "job_timeout"),
    ({"shutdown_grace": -0.5}, "shutdown_grace"),
    ({"shutdown_grace": math.nan}, "shutdown_grace"),
])
def test_a_bad_value_is_a_config_error_naming_its_key(config: Dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load(**config)


def test_a_config_that_is_not_a_dict_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="dict"):
        Options.load([handler], settings=Settings.from_env({}), env={})  # type: ignore[arg-type]


def test_job_timeout_zero_means_no_limit() -> None:
    assert load(job_timeout=0).job_timeout is None
    assert load(job_timeout="2.5").job_timeout == 2.5


def test_shutdown_grace_comes_from_the_config_then_the_environment() -> None:
    assert load(env={"SLOTWORKER_SHUTDOWN_GRACE": "7"}).shutdown_grace == 7.0
    assert load(env={"SLOTWORKER_SHUTDOWN_GRACE": "7"}, shutdown_grace=2).shutdown_grace == 2.0
    with pytest.raises(ConfigError, match="SLOTWORKER_SHUTDOWN_GRACE"):
        load(env={"SLOTWORKER_SHUTDOWN_GRACE": "forever"})


def test_flags_are_parsed_and_test_input_must_be_json() -> None:
    flags = parse_flags(["--rp_debugger", "--test_input", '{"input": {"a": 1}}', "--own-flag"])
    assert flags["rp_debugger"] is True and flags["test_input"] == {"input": {"a": 1}}
    with pytest.raises(ConfigError, match="--test_input"):
        parse_flags(["--test_input", "{not json"])


@pytest.mark.parametrize("key, value", [("take_policy", '"greedy"'), ("job_timeout", "-3"),
                                        ("concurrency_modifier", "8")])
def test_start_with_a_bad_option_logs_it_and_exits_1_before_taking(tmp_path: Any, make_platform: Any,
                                                                  key: str, value: str) -> None:
    platform = make_platform()
    job_id = platform.submit({"x": 1})
    path = write_script(str(tmp_path), "handler.py", f"""
        import slotworker as runpod
        runpod.serverless.start({{"handler": lambda job: job["input"], "{key}": {value}}})
    """)
    proc = run_script(path, env=platform.worker_env("w-bad"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert key in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert platform.takes() == []
    assert platform.status(job_id)["status"] == "IN_QUEUE"


@pytest.mark.parametrize("value", [-1, 1.5, "3", True])
def test_prefetch_must_be_a_whole_number_of_jobs(value: Any) -> None:
    with pytest.raises(ConfigError, match="prefetch"):
        load(prefetch=value)
    assert load(prefetch=4).prefetch == 4 and load().prefetch == 0


@pytest.mark.parametrize("value", [-1, 1.5, "3", True])
def test_post_backlog_must_be_a_whole_number_of_results(value: Any) -> None:
    with pytest.raises(ConfigError, match="post_backlog"):
        load(post_backlog=value)
    assert load(post_backlog=0).post_backlog == 0 and load().post_backlog is None
