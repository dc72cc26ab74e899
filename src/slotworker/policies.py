"""Take policies: how many jobs to ask for, and how a full worker waits.

Selected by the config key ``take_policy``. Each is small on purpose:

- ``drain`` (default): take every free slot; when full, wait on the
  scaler's ``job_exited`` Condition until no job is in progress, at most
  :data:`FULL_WAIT_SECONDS`, so a drained worker takes a full batch at once
  and one straggler cannot hold the freed slots idle for longer than that.
- ``fixed``: when full, sleep :data:`FULL_WAIT_SECONDS` (runpod 1.12.0's
  behaviour), kept only as the benchmark's reference arm.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Dict, Type

if TYPE_CHECKING:  # pragma: no cover
    from .scaler import Scaler

#: The most a full worker waits before it looks at its slots again.
FULL_WAIT_SECONDS = 1.0


class TakePolicy:
    """The interface the fetch loop drives; the base class is ``drain``."""

    name = "drain"

    def how_many(self, scaler: "Scaler") -> int:
        """Slots to take now; 0 means the worker counts as full."""
        return scaler.slots.free

    def wait_full(self, scaler: "Scaler") -> None:
        """Block while full: until no job is in progress, shutdown, or the bound."""
        slots = scaler.slots
        scaler.wait_until(lambda: slots.in_use == 0, FULL_WAIT_SECONDS)

    def observe_take(self, scaler: "Scaler", asked: int, got: int, seconds: float) -> None:
        """Called after each successful take with its round trip."""

    def observe_job(self, scaler: "Scaler", seconds: float) -> None:
        """Called from a job's thread as it exits, with its run time."""


class DrainPolicy(TakePolicy):
    """Wait until drained (bounded), then take a full batch."""


class FixedPolicy(TakePolicy):
    """The old fixed sleep when full."""

    name = "fixed"

    def wait_full(self, scaler: "Scaler") -> None:
        # A plain sleep, as runpod's asyncio.sleep(1): not even shutdown ends it.
        time.sleep(FULL_WAIT_SECONDS)


POLICIES: Dict[str, Type[TakePolicy]] = {"drain": DrainPolicy, "fixed": FixedPolicy}


def make_policy(name: str) -> TakePolicy:
    """The policy called ``name``; ValueError names the known ones."""
    try:
        return POLICIES[str(name)]()
    except KeyError:
        raise ValueError(f"unknown take_policy {name!r}; use one of {', '.join(sorted(POLICIES))}") from None
