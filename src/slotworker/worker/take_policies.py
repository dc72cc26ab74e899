"""Take policies: how many jobs to ask for, and how a full worker waits.

Selected by the config key ``take_policy``. Each is small on purpose:

- ``drain`` (default): take every free slot; when full, wait on the
  scaler's ``job_exited`` Condition until no job is in progress, at most
  :data:`FULL_WAIT_SECONDS`, so a drained worker takes a full batch at once
  and one straggler cannot hold the freed slots idle for longer than that.
- ``fixed``: when full, sleep :data:`FULL_WAIT_SECONDS` (runpod 1.12.0's
  behaviour), kept only as the benchmark's reference arm.
- ``lookahead``: take before the slots free, timed so that the answer lands
  as they free. It estimates the take's round trip and a job's run time
  (EWMAs of what it has seen) and asks for the slots expected to be free
  when the answer arrives. Such jobs claim no slot at take time: they wait
  in the scaler's ``pending`` queue, in order, and start as slots free.
"""

from __future__ import annotations

import bisect
import collections
import threading
import time
from typing import TYPE_CHECKING, Deque, Dict, Optional, Type

if TYPE_CHECKING:  # pragma: no cover
    from .take_loop import Scaler

#: The most a full worker waits before it looks at its slots again.
FULL_WAIT_SECONDS = 1.0


class TakePolicy:
    """The interface the fetch loop drives; the base class is ``drain``."""

    name = "drain"
    #: True: the fetch loop reserves the slots before the take. False: jobs
    #: are taken ahead of their slots and wait in ``scaler.pending``.
    reserves = True

    def how_many(self, scaler: "Scaler") -> int:
        """Slots to take now; 0 means the worker counts as full."""
        return scaler.slots.free

    def wait_full(self, scaler: "Scaler") -> None:
        """Block while full: until no job is in progress, shutdown, or the bound."""
        slots = scaler.slots
        scaler.wait_until(lambda: slots.in_use == 0, FULL_WAIT_SECONDS)

    def observe_take(self, scaler: "Scaler", asked: int, got: int, seconds: float) -> None:
        """Called after each successful take with its round trip."""

    def observe_start(self, scaler: "Scaler") -> None:
        """Called as a job is handed its slot (lookahead's pending jobs only)."""

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


def _ewma(old: Optional[float], sample: float, alpha: float) -> float:
    return sample if old is None else old + alpha * (sample - old)


class LookaheadPolicy(TakePolicy):
    """Take the slots expected to be free when the take's answer lands.

    Until it has seen a full take (its round trip) and a job's run time it
    behaves as ``drain``. A running job counts as freeing in time when its
    expected end (start + job estimate) is at most one round trip away; one
    already overdue by more than a round trip is a straggler and does not
    count, so taken jobs wait for their slot about one round trip at most.
    """

    name = "lookahead"
    reserves = False
    #: EWMA weights: a take is rarer than a job exit, so it weighs more.
    TAKE_ALPHA = 0.3
    JOB_ALPHA = 0.1

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _starts (job threads and the fetch thread)
        self._starts: Deque[float] = collections.deque()  # running jobs' starts, oldest first
        self.round_trip: Optional[float] = None
        self.job_seconds: Optional[float] = None

    def observe_start(self, scaler: "Scaler") -> None:
        with self._lock:
            self._starts.append(time.monotonic())

    def observe_job(self, scaler: "Scaler", seconds: float) -> None:
        # Jobs of a like length end in start order: dropping the oldest start
        # is exact for them and a cheap approximation otherwise.
        with self._lock:
            if self._starts:
                self._starts.popleft()
            self.job_seconds = _ewma(self.job_seconds, seconds, self.JOB_ALPHA)

    def observe_take(self, scaler: "Scaler", asked: int, got: int, seconds: float) -> None:
        # Only a full answer measures the round trip: a partial one may have
        # sat in the platform's long poll waiting for work.
        if got >= asked > 0:
            self.round_trip = _ewma(self.round_trip, seconds, self.TAKE_ALPHA)

    def _starts_list(self) -> "list[float]":
        with self._lock:
            return list(self._starts)

    def how_many(self, scaler: "Scaler") -> int:
        free = scaler.slots.free
        rtt, run = self.round_trip, self.job_seconds
        if rtt is None or run is None:
            return free
        now = time.monotonic()
        starts = self._starts_list()
        # Ends in (now - rtt, now + rtt]: free by the time the answer lands.
        soon = bisect.bisect_right(starts, now + rtt - run) - bisect.bisect_right(starts, now - rtt - run)
        return max(0, free + soon - len(scaler.pending))

    def wait_full(self, scaler: "Scaler") -> None:
        rtt, run = self.round_trip, self.job_seconds
        if rtt is None or run is None:
            super().wait_full(scaler)
            return
        now = time.monotonic()
        # Wake when the next take must leave to land as the earliest job ends.
        wakes = [s + run - rtt for s in self._starts_list() if s + run - rtt > now]
        timeout = min(FULL_WAIT_SECONDS, min(wakes) - now + 0.001) if wakes else FULL_WAIT_SECONDS
        slots, pending = scaler.slots, scaler.pending
        scaler.wait_until(lambda: slots.free > len(pending), timeout)


POLICIES: Dict[str, Type[TakePolicy]] = {"drain": DrainPolicy, "fixed": FixedPolicy,
                                         "lookahead": LookaheadPolicy}


def make_policy(name: str) -> TakePolicy:
    """The policy called ``name``; ValueError names the known ones."""
    try:
        return POLICIES[str(name)]()
    except KeyError:
        raise ValueError(f"unknown take_policy {name!r}; use one of {', '.join(sorted(POLICIES))}") from None
