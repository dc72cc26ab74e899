"""``start(config)``: load the options, pick the mode, run it, exit.

- ``--test_input`` / ``test_input.json`` without a job-take URL: local test mode;
- ``--rp_serve_api``: the local API with a worker in this process;
- ``RUNPOD_WEBHOOK_GET_JOB`` set: the deployed worker.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, Dict, NoReturn

from . import logs
from .config import ConfigError, Options, Settings, parse_flags

log = logging.getLogger("slotworker")


def _configure_logging(settings: Settings) -> None:
    level = settings.log_level or "INFO"
    try:
        logs.parse_level(level)
    except ValueError:
        level = "INFO"  # a bad RUNPOD_LOG_LEVEL must not keep the worker from starting
    logs.configure(level, json_lines=bool(settings.endpoint_id), secrets=[settings.api_key])
    if level != (settings.log_level or "INFO"):
        log.warning("RUNPOD_LOG_LEVEL=%r is not a level (ERROR, WARN, INFO, DEBUG, TRACE); using INFO",
                    settings.log_level)


def load_options(config: Dict[str, Any], started_at: float) -> Options:
    """Read the environment, the flags (out of ``sys.argv``) and ``config``; log and exit 1 when one is bad."""
    settings = Settings.from_env()
    _configure_logging(settings)
    try:
        flags = parse_flags()
        if flags.get("rp_log_level"):
            logs.set_level(flags["rp_log_level"])
        return Options.load(config, settings=settings, flags=flags, started_at=started_at)
    except (ConfigError, ValueError) as exc:
        log.error("%s", exc)
        sys.exit(1)


def start(config: Dict[str, Any]) -> NoReturn:
    """Start the worker described by ``config`` and exit when it is done.

    ``config`` takes runpod's keys: ``handler`` (required; a function, a
    generator function, or their async forms), ``concurrency_modifier``,
    ``return_aggregate_stream``, ``refresh_worker``; and slotworker's own:
    ``take_policy`` (``"pipeline"``), ``job_timeout`` (seconds, off by default),
    ``shutdown_grace`` (seconds, default 30). Every option is checked before
    any thread starts: a bad one is logged and the process exits 1.
    """
    options = load_options(config, time.perf_counter())
    flags = options.flags
    if flags.get("rp_serve_api"):
        from .modes.serve_api import serve_api
        code = serve_api(options, host=flags["rp_api_host"], port=flags["rp_api_port"])
    elif flags.get("test_input") is not None or not options.settings.deployed:
        from .modes.test_input import run_local
        code = run_local(options)
    else:
        from .worker.worker import Worker
        worker = Worker(options)
        worker.install_signal_handlers()
        code = worker.run()
        if worker.lost:
            # Handler threads that never returned would block interpreter exit.
            logging.shutdown()
            sys.stdout.flush()
            os._exit(code)
    sys.exit(code)
