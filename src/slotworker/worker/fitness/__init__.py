"""Start-up fitness checks: functions that must pass before a deployed worker takes jobs.

As in runpod 1.12.0: the checks run once, before the first take, only in
the deployed worker (not with ``--test_input`` or ``--rp_serve_api``). The
user's checks (:func:`register_fitness_check`) run first, in registration
order, then the automatic ones (:mod:`~slotworker.worker.auto_checks`:
memory, disk, network; GPU, CUDA version, CUDA start-up and GPU compute on
a GPU machine). The first one that raises is logged, reported to the
heartbeat URL as ``status=unhealthy`` with its name (best effort, bounded),
and the process ends at once with exit code 1 (``os._exit``: a broken
environment may hold non-daemon threads that would block a normal exit).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import sys
import time
import traceback
from typing import Any, Callable, List, Mapping, Optional

from ...config import PROTOCOL_VERSION, Settings
from .auto_checks import NamedCheck, automatic_checks

log = logging.getLogger("slotworker")

_checks: List[Callable[[], Any]] = []
#: False once :func:`skip_automatic_checks` ran (the local API's worker).
_automatic = True

#: Seconds the unhealthy report may delay the exit (runpod: 2).
REPORT_TIMEOUT = 2.0


def register_fitness_check(func: Callable[[], Any]) -> Callable[[], Any]:
    """Register ``func`` (sync or async) as a fitness check; usable as a decorator.

    Checks run once, in order, when a deployed worker starts (not in local
    test mode). One that raises ends the worker with exit code 1.
    """
    _checks.append(func)
    log.debug("registered fitness check: %s", getattr(func, "__name__", repr(func)))
    return func


def clear_fitness_checks() -> None:
    """Forget every registered check (for tests and embedders)."""
    _checks.clear()


def registered() -> List[Callable[[], Any]]:
    """The registered checks, in the order they run (a copy); the automatic ones are not among them."""
    return list(_checks)


def skip_automatic_checks() -> None:
    """Run no automatic check in this process from now on.

    For a worker that serves local development (``--rp_serve_api``): the
    automatic checks judge the deployed machine, as in runpod, where they
    never run outside the deployed worker.
    """
    global _automatic
    _automatic = False


def report_unhealthy(settings: Settings, check: str, reason: str) -> None:
    """One best-effort ``GET`` of the ping URL with ``status=unhealthy``, as runpod sends it."""
    url, api_key = settings.ping_url, settings.api_key
    if not url or url == "PING_NOT_SET" or not api_key:
        return
    try:
        import requests

        with requests.Session() as session:
            session.trust_env = False
            session.get(url, headers={"Authorization": api_key}, timeout=REPORT_TIMEOUT,
                        allow_redirects=False,
                        params={"status": "unhealthy", "check": check, "reason": reason[:256],
                                "runpod_version": PROTOCOL_VERSION})
    except Exception:  # best effort: the exit is the guarantee, not this report
        log.debug("unhealthy report not sent", exc_info=True)


def _exit_unhealthy() -> None:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(1)


def run_fitness_checks(settings: Settings, env: Optional[Mapping[str, str]] = None) -> None:
    """Run the registered checks, then the automatic ones; return when every one passed.

    The automatic checks read their switches and thresholds from ``env``
    (``os.environ`` by default) now, not at import. On the first failure:
    log it, report it to the ping URL of ``settings`` under the check's
    name, and end the process with exit code 1.
    """
    checks: List[NamedCheck] = [(getattr(check, "__name__", repr(check)), check) for check in _checks]
    if _automatic:
        checks += automatic_checks(os.environ if env is None else env)
    if not checks:
        log.debug("no fitness checks to run")
        return
    log.info("running %d fitness check(s)...", len(checks))
    total = time.perf_counter()
    for name, check in checks:
        started = time.perf_counter()
        try:
            result = check()
            if inspect.isawaitable(result):
                asyncio.run(_await(result))
        except Exception as exc:
            log.error("Fitness check failed: %s | %s: %s", name, type(exc).__name__, exc)
            log.debug("traceback:\n%s", traceback.format_exc())
            report_unhealthy(settings, name, f"{type(exc).__name__}: {exc}")
            log.error("Worker is unhealthy, exiting.")
            _exit_unhealthy()
        log.debug("fitness check passed: %s (%.2fms)", name, (time.perf_counter() - started) * 1000)
    log.info("all fitness checks passed (%.2fms)", (time.perf_counter() - total) * 1000)


async def _await(awaitable: Any) -> Any:
    return await awaitable
