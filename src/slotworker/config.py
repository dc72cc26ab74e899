"""Everything ``start()`` is told, read and checked in one place, once.

Three sources, each read by one function here and nowhere else:

- the config dict passed to ``start()`` (:meth:`Options.load`): runpod's
  keys and slotworker's own;
- runpod's command-line flags (:func:`parse_flags`), taken out of
  ``sys.argv``;
- the platform's environment (:meth:`Settings.from_env`).

:meth:`Options.load` raises :class:`ConfigError` for a value that cannot be
used, before any thread starts. Nothing here runs at import time, so tests
and embedders can hand in any mapping.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional
from urllib.parse import quote, urlencode

from .worker.take_policies import POLICIES

#: The runpod SDK release whose wire protocol slotworker speaks; sent where
#: runpod sends its own version (heartbeat query, error reports).
PROTOCOL_VERSION = "1.12.0"

#: Seconds running jobs get to finish and report after shutdown starts.
DEFAULT_SHUTDOWN_GRACE = 30.0
#: How the worker takes jobs when no ``take_policy`` is given (take_policies.py).
DEFAULT_TAKE_POLICY = "pipeline"

DEFAULT_PING_INTERVAL_MS = 10000
#: A smaller (or zero, or negative) RUNPOD_PING_INTERVAL would ping in a
#: tight loop; it is raised to this.
MIN_PING_INTERVAL_MS = 50


def add_query(url: str, **params: object) -> str:
    """Append query parameters to ``url``, keeping the query it already has.

    ``None`` values are left out, as the platform expects for an empty
    ``job_id`` on the heartbeat.
    """
    return url + query_suffix(url, **params)


def query_suffix(url: str, **params: object) -> str:
    """What :func:`add_query` appends to ``url`` (``""`` when every value is None).

    It depends on ``url`` only through whether it has a query already, so
    a URL built by putting a quoted job id into a template takes the
    template's suffix.
    """
    pairs = {k: v for k, v in params.items() if v is not None}
    if not pairs:
        return ""
    return ("&" if "?" in url else "?") + urlencode(pairs, safe=",$")


def _fill(template: Optional[str], worker_id: str, job_placeholder: bool) -> Optional[str]:
    """Replace the worker-id placeholders of a URL template.

    Both spellings stand for the worker id, except that in the result URLs
    ``$ID`` is the job id and is filled per job by :func:`job_url`.
    """
    if not template:
        return None
    url = template.replace("$RUNPOD_POD_ID", worker_id)
    if not job_placeholder:
        url = url.replace("$ID", worker_id)
    return url


def job_url(template: str, job_id: str) -> str:
    """The result URL for one job: ``$ID`` replaced by the (quoted) job id."""
    return template.replace("$ID", quote(str(job_id), safe=""))


@dataclass(frozen=True)
class Settings:
    """Platform URLs and identity of one worker process."""

    job_take_url: Optional[str]
    job_done_url: Optional[str]
    job_stream_url: Optional[str]
    ping_url: Optional[str]
    api_key: str
    worker_id: str
    ping_interval: float
    endpoint_id: Optional[str]
    hostname: Optional[str]
    log_level: Optional[str]

    @property
    def deployed(self) -> bool:
        """True when the platform gave us a job-take URL."""
        return self.job_take_url is not None

    @property
    def job_stop_url(self) -> Optional[str]:
        """The stop channel, derived from the take URL; None when it cannot be."""
        if not self.job_take_url or "/job-take/" not in self.job_take_url:
            return None
        return self.job_take_url.replace("/job-take/", "/job-stop/", 1)

    def take_url(self, batch_size: int, job_in_progress: bool) -> str:
        """The take URL for ``batch_size`` jobs (batch endpoint when > 1)."""
        assert self.job_take_url is not None
        url = self.job_take_url
        if batch_size > 1:
            url = url.replace("/job-take/", "/job-take-batch/", 1)
            url = add_query(url, batch_size=batch_size)
        return add_query(url, job_in_progress=1 if job_in_progress else 0)

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "Settings":
        """Read the RunPod environment (``os.environ`` by default)."""
        env = os.environ if env is None else env
        worker_id = env.get("RUNPOD_POD_ID") or str(uuid.uuid4())
        try:
            interval_ms = int(env.get("RUNPOD_PING_INTERVAL") or DEFAULT_PING_INTERVAL_MS)
        except ValueError:
            interval_ms = DEFAULT_PING_INTERVAL_MS
        return cls(
            job_take_url=_fill(env.get("RUNPOD_WEBHOOK_GET_JOB"), worker_id, False),
            job_done_url=_fill(env.get("RUNPOD_WEBHOOK_POST_OUTPUT"), worker_id, True),
            job_stream_url=_fill(env.get("RUNPOD_WEBHOOK_POST_STREAM"), worker_id, True),
            ping_url=_fill(env.get("RUNPOD_WEBHOOK_PING"), worker_id, False),
            api_key=env.get("RUNPOD_AI_API_KEY", ""),
            worker_id=worker_id,
            ping_interval=max(interval_ms, MIN_PING_INTERVAL_MS) / 1000.0,
            endpoint_id=env.get("RUNPOD_ENDPOINT_ID"),
            hostname=env.get("RUNPOD_POD_HOSTNAME"),
            log_level=env.get("RUNPOD_LOG_LEVEL") or env.get("RUNPOD_DEBUG_LEVEL"),
        )


class ConfigError(ValueError):
    """A config key, flag or environment variable has a value that cannot be used."""


# -- flags ---------------------------------------------------------------------
def add_flag_arguments(parser: "argparse.ArgumentParser | argparse._ArgumentGroup") -> None:
    """Add runpod 1.12.0's flags (plus ``--test_output``) to ``parser`` or to
    one of its argument groups (``slotworker run --help`` lists them so)."""
    parser.add_argument("--rp_log_level", type=str, default=None,
                        help="ERROR, WARN, INFO, DEBUG or TRACE")
    parser.add_argument("--rp_debugger", action="store_true", default=None,
                        help="add timings to each job's output")
    parser.add_argument("--rp_serve_api", action="store_true", default=None,
                        help="serve the local platform's API and run the worker against it")
    parser.add_argument("--rp_api_port", type=int, default=8000, help="port of the local API (default 8000)")
    parser.add_argument("--rp_api_concurrency", type=int, default=1,
                        help="accepted for compatibility; the worker's concurrency_modifier decides")
    parser.add_argument("--rp_api_host", type=str, default="localhost",
                        help="host of the local API (default localhost)")
    parser.add_argument("--test_input", type=str, default=None, help="one job as JSON, run locally")
    parser.add_argument("--test_output", type=str, default=None,
                        help="expected result as JSON; exit 1 when it differs")


def build_flag_parser() -> argparse.ArgumentParser:
    """The parser for runpod 1.12.0's flags (plus ``--test_output``)."""
    parser = argparse.ArgumentParser(prog="slotworker", description="slotworker worker arguments",
                                     add_help=False, allow_abbrev=False)
    add_flag_arguments(parser)
    return parser


def parse_flags(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    """Parse runpod's flags out of ``argv`` (``sys.argv`` by default, which is rewritten)."""
    rewrite = argv is None
    args_in = sys.argv[1:] if argv is None else argv
    args, unknown = build_flag_parser().parse_known_args(args_in)
    if rewrite:
        sys.argv = [sys.argv[0]] + unknown
    parsed = vars(args)
    for key in ("test_input", "test_output"):
        if parsed[key] is not None:
            try:
                parsed[key] = json.loads(parsed[key])
            except ValueError as exc:
                raise ConfigError(f"--{key} is not valid JSON: {exc}") from exc
    return parsed


# -- the config dict -------------------------------------------------------------
def _number(key: str, value: Any, minimum: float) -> float:
    """``value`` as a finite float of at least ``minimum``; ConfigError otherwise."""
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be a number of seconds, not {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be a number of seconds, not {value!r}") from None
    if not math.isfinite(number) or number < minimum:
        raise ConfigError(f"{key} must be a finite number >= {minimum:g}, not {value!r}")
    return number


@dataclass(frozen=True)
class Options:
    """One worker's options: the config dict, the flags and the environment, checked.

    Built by :meth:`load` when ``start()`` runs; the user's config dict is
    read, never written.
    """

    handler: Callable[..., Any]
    settings: Settings
    concurrency_modifier: Optional[Callable[[int], int]] = None
    return_aggregate_stream: bool = False
    refresh_worker: bool = False
    take_policy: str = DEFAULT_TAKE_POLICY
    #: Seconds a job may run before it is interrupted; None: no limit.
    job_timeout: Optional[float] = None
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE
    #: Jobs taken beyond the free slots and held until a slot frees (0: none).
    prefetch: int = 0
    #: Results that may wait to be posted after their jobs gave their slots
    #: back; None: as many as the concurrency; 0: a job holds its slot until
    #: its result is in (runpod 1.12.0's way).
    post_backlog: Optional[int] = None
    #: The interpreter's thread switch interval while the worker runs, in
    #: seconds: None: raised with the slots (worker/switch_interval.py);
    #: 0: left alone; else at least this.
    switch_interval: Optional[float] = None
    #: runpod's flags as parsed (``rp_debugger``, ``test_input``, ...).
    flags: Dict[str, Any] = field(default_factory=dict)
    #: ``time.perf_counter()`` when ``start()`` was called (``--rp_debugger``'s ready delay).
    started_at: float = field(default_factory=time.perf_counter)

    @classmethod
    def load(cls, config: Mapping[str, Any], settings: Optional[Settings] = None,
             flags: Optional[Dict[str, Any]] = None, env: Optional[Mapping[str, str]] = None,
             started_at: Optional[float] = None) -> "Options":
        """Check ``config`` (the dict given to ``start()``); ConfigError names the first bad key.

        ``settings`` defaults to :meth:`Settings.from_env` of ``env``
        (``os.environ`` by default), which also supplies
        ``SLOTWORKER_SHUTDOWN_GRACE`` when the config has no ``shutdown_grace``.
        """
        env = os.environ if env is None else env
        if not isinstance(config, Mapping):
            raise ConfigError(f"the config must be a dict, not {type(config).__name__}")
        handler = config.get("handler")
        if not callable(handler):
            raise ConfigError("config['handler'] must be a callable")
        modifier = config.get("concurrency_modifier")
        if modifier is not None and not callable(modifier):
            raise ConfigError("config['concurrency_modifier'] must be a callable (current) -> int")
        policy = config.get("take_policy", DEFAULT_TAKE_POLICY)
        if not isinstance(policy, str) or policy not in POLICIES:
            raise ConfigError(f"unknown take_policy {policy!r}; use one of {', '.join(sorted(POLICIES))}")
        job_timeout: Optional[float] = None
        if config.get("job_timeout") is not None:
            job_timeout = _number("job_timeout", config["job_timeout"], 0.0) or None  # 0: no limit
        prefetch = config.get("prefetch", 0)
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ConfigError(f"prefetch must be a whole number of jobs >= 0, not {prefetch!r}")
        post_backlog = config.get("post_backlog")
        if post_backlog is not None and (isinstance(post_backlog, bool) or not isinstance(post_backlog, int)
                                         or post_backlog < 0):
            raise ConfigError(f"post_backlog must be a whole number of results >= 0 or None, not {post_backlog!r}")
        switch_interval: Optional[float] = None
        if config.get("switch_interval") is not None:
            switch_interval = _number("switch_interval", config["switch_interval"], 0.0)
        if "shutdown_grace" in config:
            grace = _number("shutdown_grace", config["shutdown_grace"], 0.0)
        elif env.get("SLOTWORKER_SHUTDOWN_GRACE"):
            grace = _number("SLOTWORKER_SHUTDOWN_GRACE", env["SLOTWORKER_SHUTDOWN_GRACE"], 0.0)
        else:
            grace = DEFAULT_SHUTDOWN_GRACE
        return cls(
            handler=handler,
            settings=settings if settings is not None else Settings.from_env(env),
            concurrency_modifier=modifier,
            return_aggregate_stream=bool(config.get("return_aggregate_stream", False)),
            refresh_worker=bool(config.get("refresh_worker", False)),
            take_policy=policy,
            job_timeout=job_timeout,
            shutdown_grace=grace,
            prefetch=prefetch,
            post_backlog=post_backlog,
            switch_interval=switch_interval,
            flags=dict(flags or {}),
            started_at=time.perf_counter() if started_at is None else started_at,
        )
