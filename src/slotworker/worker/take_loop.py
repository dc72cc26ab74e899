"""The fetch loop: decide how many jobs to take, take them, hand them out.

One fetch thread runs :meth:`Scaler.run`. Each loop applies the
``concurrency_modifier``, reserves free slots, takes that many jobs (a batch
take when more than one) and submits each to the executor. When the worker
is full it waits on :attr:`Scaler.job_exited` as the take policy says (see
:mod:`slotworker.worker.take_policies`); it never spins.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Deque, Dict, List

from ..backoff import Backoff
from .platform_client import BadResponse, PlatformClient, PlatformError, Throttled, THROTTLE_BACKOFF
from .take_policies import FULL_WAIT_SECONDS, TakePolicy, make_policy
from .job_runner import JobRunner
from .lifecycle import Lifecycle

log = logging.getLogger("slotworker")

#: An empty take answered faster than this is followed by a wait of the rest,
#: so a platform that does not hold takes open is not asked in a tight loop.
EMPTY_TAKE_FLOOR = 0.25
#: Waits after failed takes: the first, and the cap it doubles up to.
TAKE_BACKOFF = (0.5, 8.0)
#: The executor may grow to this many threads; the slot counter, not the
#: pool, bounds how many jobs run.
MAX_THREADS = 4096


def _default_modifier(current: int) -> int:
    return current


class Scaler:
    """Takes jobs while there are free slots; runs each on the executor."""

    def __init__(self, config: Dict[str, Any], client: PlatformClient, runner: JobRunner,
                 slots: Any, lifecycle: Lifecycle) -> None:
        self.client = client
        self.runner = runner
        self.slots = slots
        self.lifecycle = lifecycle
        self.modifier: Callable[[int], int] = config.get("concurrency_modifier") or _default_modifier
        self.policy: TakePolicy = make_policy(config.get("take_policy", "drain"))
        self._mutex = threading.Lock()
        # job_exited: notified by every job's thread as it releases its slot,
        # and by shutdown(); waited on by the fetch thread when it is full.
        self.job_exited = threading.Condition(self._mutex)
        # What each waiter on job_exited waits for. A job's exit notifies only
        # when one of these holds, so a full worker is not woken once per job
        # to find itself still full. Guarded by _mutex.
        self._wake_when: List[Callable[[], bool]] = []
        # Jobs taken ahead of their slot (policies with reserves=False), in
        # arrival order; guarded by _mutex. Each starts as a slot frees.
        self.pending: Deque[Any] = collections.deque()
        self.executor = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="slotworker-job")
        self.loops = 0       # fetch-loop iterations (tests count these)
        self.takes = 0       # take requests sent

    # -- concurrency ----------------------------------------------------------
    def apply_modifier(self) -> int:
        """Ask the modifier for the capacity and resize the slots to it."""
        current = self.slots.capacity
        try:
            wanted = self.modifier(current)
            wanted = int(wanted)
            if wanted < 0:
                raise ValueError(f"negative concurrency {wanted}")
        except Exception as exc:  # a broken modifier must not stop the worker
            log.error("concurrency_modifier failed (%s); keeping concurrency %d", exc, current)
            return current
        if wanted != current:
            self.slots.resize(wanted)
            log.debug("concurrency set to %d", wanted)
            with self.job_exited:  # raising capacity may end a full wait
                self._start_pending()
                self.job_exited.notify_all()
        return wanted

    # -- waiting ----------------------------------------------------------------
    def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait on :attr:`job_exited` until ``predicate()``, shutdown, or ``timeout``.

        The predicate is checked under the Condition's lock, so a job that
        exits between the check and the wait is not missed.
        """
        return self._wait(predicate, time.monotonic() + timeout, until_shutdown=True)

    def _wait(self, predicate: Callable[[], bool], deadline: float, until_shutdown: bool) -> bool:
        stopping = self.lifecycle.stopping
        with self.job_exited:
            self._wake_when.append(predicate)
            try:
                while not (predicate() or (until_shutdown and stopping.is_set())):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self.job_exited.wait(remaining)
                return True
            finally:
                self._wake_when.remove(predicate)

    def wake(self) -> None:
        """Wake the fetch thread (shutdown, capacity change)."""
        with self.job_exited:
            self.job_exited.notify_all()

    # -- the fetch thread ---------------------------------------------------------
    def run(self) -> None:
        """The fetch loop; returns when shutdown starts (after a take in flight)."""
        backoff = Backoff(*TAKE_BACKOFF)
        stopping = self.lifecycle.stopping
        while not stopping.is_set():
            self.loops += 1
            capacity = self.apply_modifier()
            if capacity == 0:
                # Not "all free": nothing may run. Wait the full bound.
                self.wait_until(lambda: False, FULL_WAIT_SECONDS)
                continue
            want = self.policy.how_many(self)
            if want <= 0:
                self.policy.wait_full(self)
                continue
            if self.policy.reserves:
                granted = self.slots.try_acquire(want)
                if granted == 0:
                    continue
            else:
                granted = 0  # taken ahead: each job claims its slot as it frees (_admit)
            started = time.monotonic()
            try:
                jobs = self._take(granted or want, granted)
            except Throttled:
                self.slots.release(granted)
                log.warning("platform throttled the take (429); waiting %.0fs", THROTTLE_BACKOFF)
                stopping.wait(THROTTLE_BACKOFF)
                continue
            except PlatformError as exc:
                self.slots.release(granted)
                level = logging.ERROR if isinstance(exc, BadResponse) else logging.WARNING
                delay = backoff.next()
                log.log(level, "take failed: %s; retrying in %.1fs", exc, delay)
                stopping.wait(delay)
                continue
            backoff.reset()
            elapsed = time.monotonic() - started
            self.policy.observe_take(self, granted or want, len(jobs), elapsed)
            if self.policy.reserves:
                self._dispatch(jobs, granted)
            else:
                self._admit(jobs)
            if not jobs and elapsed < EMPTY_TAKE_FLOOR:
                stopping.wait(EMPTY_TAKE_FLOOR - elapsed)
        log.debug("fetch loop stopped")

    def _take(self, n: int, reserved: int) -> List[Any]:
        self.takes += 1
        # The slots just reserved are this take's; any others are running jobs.
        jobs = self.client.take(n, job_in_progress=self.slots.in_use > reserved)
        if jobs:
            log.debug("took %d job(s) of %d asked", len(jobs), n)
        return jobs

    def _dispatch(self, jobs: List[Any], granted: int) -> None:
        """Submit every job taken; give back the reservations not used."""
        if len(jobs) < granted:
            self.slots.release(granted - len(jobs))
        for index, job in enumerate(jobs):
            holds_slot = index < granted
            if not holds_slot:
                # More than we asked for: it was taken, so it runs, past capacity.
                log.warning("platform sent more jobs than asked (%d > %d); running the extra one anyway",
                            len(jobs), granted)
            self.executor.submit(self._job_thread, job, holds_slot)

    def _admit(self, jobs: List[Any]) -> None:
        """Queue jobs taken ahead of their slots; start those that have one."""
        with self._mutex:
            self.pending.extend(jobs)
            self._start_pending()

    def _start_pending(self) -> None:
        """Start pending jobs, oldest first, while slots are free. Hold ``_mutex``.

        Every slot release is followed by this call under the lock, so a
        pending job never waits beside a free slot.
        """
        pending = self.pending
        while pending and self.slots.try_acquire(1):
            # Observed here, not in the job's thread, so that the fetch loop's
            # next look already counts it.
            self.policy.observe_start(self)
            self.executor.submit(self._job_thread, pending.popleft(), True)

    def _job_thread(self, job: Any, holds_slot: bool) -> None:
        started = time.monotonic()
        try:
            self.runner.run(job)
        finally:
            if holds_slot:
                self.slots.release(1)
            self.policy.observe_job(self, time.monotonic() - started)
            with self.job_exited:
                if self.pending:
                    self._start_pending()
                if any(wanted() for wanted in self._wake_when):
                    self.job_exited.notify_all()

    def in_progress_ids(self) -> List[str]:
        """Ids of the jobs this worker holds: running, and taken but not started.

        The heartbeat reports both, so the platform does not requeue a job
        that waits here for its slot.
        """
        with self._mutex:
            waiting = [job["id"] for job in self.pending if isinstance(job, dict) and "id" in job]
        return self.runner.registry.ids() + [str(job_id) for job_id in waiting]

    # -- shutdown -------------------------------------------------------------------
    def drain(self, deadline: float) -> int:
        """Wait until no slot is held and nothing is pending, or ``deadline``.

        Returns the jobs not finished: running, plus pending ones (taken, so
        they are run, not abandoned).
        """
        self._wait(lambda: self.slots.in_use == 0 and not self.pending, deadline, until_shutdown=False)
        with self.job_exited:
            return self.slots.in_use + len(self.pending)
