"""Injected faults of the worker-facing routes of the local platform.

A `Faults` is plain configuration plus its own seeded random generator, so a
run with the same seed and the same request order draws the same faults.
Faults apply to worker-side routes only; the client API is never faulted.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import FrozenSet, Optional

#: Every kind of worker-side request (the `kind` of an `RequestRecord`).
WORKER_KINDS: FrozenSet[str] = frozenset(
    {"take", "take_batch", "done", "progress", "stream", "ping", "stop_poll"}
)
TAKE_KINDS: FrozenSet[str] = frozenset({"take", "take_batch"})

# Fault names, as recorded in `RequestRecord.fault`.
ERROR = "error"  # 500
THROTTLE = "throttle"  # 429
GARBAGE = "garbage"  # 200 with a non-JSON body
DROP = "drop"  # connection closed, nothing answered, nothing recorded
DROP_AFTER_ASSIGN = "drop_after_assign"  # take only: jobs assigned, then dropped
SLOW = "slow"  # answer delayed by slow_seconds
DOWN = "down"  # Platform.set_down: 503


@dataclass
class Faults:
    """Rates (0..1) of injected faults; all off by default.

    One uniform draw per request picks at most one of error, throttle,
    garbage, drop and (takes only) drop_after_assign, in that order of the
    cumulative rates; a second, independent draw decides whether the answer
    is also delayed by `slow_seconds`. `routes` limits the faults to some
    kinds of request (see `WORKER_KINDS`).
    """

    error_rate: float = 0.0
    throttle_rate: float = 0.0
    garbage_rate: float = 0.0
    drop_rate: float = 0.0
    slow_rate: float = 0.0
    slow_seconds: float = 0.0
    drop_after_assign_rate: float = 0.0
    routes: FrozenSet[str] = field(default_factory=lambda: WORKER_KINDS)
    #: Jobs whose final results are always answered 500 (a body this platform keeps refusing).
    refuse_results_of: FrozenSet[str] = frozenset()
    seed: Optional[int] = None
    _rng: random.Random = field(init=False, repr=False, compare=False)
    _lock: threading.Lock = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.routes = frozenset(self.routes)
        self.refuse_results_of = frozenset(self.refuse_results_of)
        unknown = self.routes - WORKER_KINDS
        if unknown:
            raise ValueError(f"unknown fault routes: {sorted(unknown)}")
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    def draw(self, kind: str) -> "tuple[Optional[str], float]":
        """Decide the fault of one request of `kind`: (fault or None, delay)."""
        if kind not in self.routes:
            return None, 0.0
        with self._lock:
            r = self._rng.random()
            s = self._rng.random()
        fault = None
        edge = 0.0
        choices = [
            (ERROR, self.error_rate),
            (THROTTLE, self.throttle_rate),
            (GARBAGE, self.garbage_rate),
            (DROP, self.drop_rate),
        ]
        if kind in TAKE_KINDS:
            choices.append((DROP_AFTER_ASSIGN, self.drop_after_assign_rate))
        for name, rate in choices:
            edge += rate
            if rate > 0 and r < edge:
                fault = name
                break
        delay = self.slow_seconds if (self.slow_rate > 0 and s < self.slow_rate) else 0.0
        return fault, delay
