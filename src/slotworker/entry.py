"""``start(config)``: parse the flags, pick the mode, run it, exit.

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
from .args import ArgsError, parse_rp_args
from .config import Settings

log = logging.getLogger("slotworker")


def start(config: Dict[str, Any]) -> NoReturn:
    """Start the worker described by ``config`` and exit when it is done.

    ``config`` takes runpod's keys: ``handler`` (required; a function, a
    generator function, or their async forms), ``concurrency_modifier``,
    ``return_aggregate_stream``, ``refresh_worker``; and slotworker's own:
    ``take_policy`` (``"drain"``), ``job_timeout`` (seconds, off by default),
    ``shutdown_grace`` (seconds, default 30).
    """
    config["reference_counter_start"] = time.perf_counter()
    settings = Settings.from_env()
    level = settings.log_level or "INFO"
    try:
        logs.parse_level(level)
    except ValueError:
        level = "INFO"  # a bad RUNPOD_LOG_LEVEL must not keep the worker from starting
    logs.configure(level, json_lines=bool(settings.endpoint_id), secrets=[settings.api_key])
    if level != (settings.log_level or "INFO"):
        log.warning("RUNPOD_LOG_LEVEL=%r is not a level (ERROR, WARN, INFO, DEBUG, TRACE); using INFO",
                    settings.log_level)
    try:
        config["rp_args"] = parse_rp_args()
    except ArgsError as exc:
        log.error("%s", exc)
        sys.exit(1)
    rp_args = config["rp_args"]
    if rp_args.get("rp_log_level"):
        try:
            logs.set_level(rp_args["rp_log_level"])
        except ValueError as exc:
            log.error("%s", exc)
            sys.exit(1)
    if not callable(config.get("handler")):
        log.error("config['handler'] must be a callable")
        sys.exit(1)

    if rp_args.get("rp_serve_api"):
        from .modes.serve_api import serve_api
        code = serve_api(config, host=rp_args["rp_api_host"], port=rp_args["rp_api_port"])
    elif rp_args.get("test_input") is not None or not settings.deployed:
        from .modes.test_input import run_local
        code = run_local(config, settings)
    else:
        from .worker.worker import Worker
        worker = Worker(config, settings)
        worker.install_signal_handlers()
        code = worker.run()
        if worker.lost:
            # Handler threads that never returned would block interpreter exit.
            logging.shutdown()
            sys.stdout.flush()
            os._exit(code)
    sys.exit(code)
