"""The worker's state, shared by its threads: running, draining, stopped.

One :class:`Lifecycle` per worker. The fetch loop stops taking once
:attr:`Lifecycle.stopping` is set; job threads use the grace deadline to
bound their result posts; :class:`~slotworker.worker.worker.Worker` moves it
from one state to the next.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import Optional, Tuple

#: Once shutdown has started, a result post still gets at least this long,
#: so a job that finishes on the deadline can still report.
MIN_ATTEMPT_SECONDS = 0.5


class State(enum.Enum):
    """Where a worker is in its life; it only ever moves forward."""

    STARTING = "starting"   # fitness checks, threads not yet started
    RUNNING = "running"     # taking jobs
    DRAINING = "draining"   # no new takes; jobs taken finish within the grace period
    STOPPED = "stopped"     # every thread is done or given up on


class Lifecycle:
    """Shutdown state: the worker's :class:`State` and the grace deadline.

    ``stopping`` is set once, when draining starts; ``deadline`` is set
    just before it and never changes after, so readers need no lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.state = State.STARTING
        self.stopping = threading.Event()
        self.deadline: Optional[float] = None

    def running(self) -> None:
        """The worker's threads have started."""
        with self._lock:
            if self.state is State.STARTING:
                self.state = State.RUNNING

    def begin_shutdown(self, grace: float) -> bool:
        """Start draining with ``grace`` seconds for running jobs; False if already (thread-safe)."""
        with self._lock:
            if self.stopping.is_set():
                return False
            self.deadline = time.monotonic() + grace
            self.state = State.DRAINING
            self.stopping.set()
            return True

    def stopped(self) -> None:
        """Shutdown has completed."""
        with self._lock:
            self.state = State.STOPPED

    def past_grace(self) -> bool:
        """True once shutdown's grace period has run out."""
        deadline = self.deadline
        return deadline is not None and time.monotonic() >= deadline

    def bound(self, timeout: Tuple[float, float]) -> Tuple[float, float]:
        """A request's (connect, read) ``timeout``, cut to the grace left once draining."""
        deadline = self.deadline
        if deadline is None:
            return timeout
        left = max(deadline - time.monotonic(), MIN_ATTEMPT_SECONDS)
        return (min(timeout[0], left), min(timeout[1], left))

    def pause(self, seconds: float) -> None:
        """Wait between two tries of a request.

        Before shutdown the wait ends early when draining starts (the next
        try then runs under the grace deadline); after, it never outlasts
        the grace left.
        """
        if not self.stopping.is_set():
            self.stopping.wait(seconds)
            return
        left = (self.deadline or 0.0) - time.monotonic()
        time.sleep(max(0.0, min(seconds, left)))
