"""Start-up fitness checks: functions that must pass before a deployed worker takes jobs."""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Callable, List

log = logging.getLogger("slotworker")

_checks: List[Callable[[], Any]] = []


def register_fitness_check(func: Callable[[], Any]) -> Callable[[], Any]:
    """Register ``func`` (sync or async) as a fitness check; usable as a decorator.

    Checks run once, in order, when a deployed worker starts (not in local
    test mode). One that raises ends the worker with exit code 1.
    """
    _checks.append(func)
    return func


def clear_fitness_checks() -> None:
    """Forget every registered check (for tests and embedders)."""
    _checks.clear()


def run_fitness_checks() -> bool:
    """Run the registered checks; False (after logging why) if one fails."""
    for check in list(_checks):
        name = getattr(check, "__name__", repr(check))
        try:
            result = check()
            if inspect.isawaitable(result):
                asyncio.run(_await(result))
        except BaseException as exc:
            log.error("fitness check %s failed: %s: %s", name, type(exc).__name__, exc)
            return False
        log.debug("fitness check %s passed", name)
    return True


async def _await(awaitable: Any) -> Any:
    return await awaitable
