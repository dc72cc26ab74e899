"""The take loop: decide how many jobs to take, take them, hand them out.

One fetch thread runs :meth:`TakeLoop.run`. Each turn applies the
``concurrency_modifier``, asks the take policy (:mod:`.take_policies`) how
many jobs to take, reserves the free slots among them, takes (a batch take
when more than one) and hands each job to a job thread; a job taken ahead of
its slot waits in :attr:`TakeLoop.pending` and starts, oldest first, as a
slot frees. Jobs run on :class:`~.job_threads.JobThreads`, a thread per slot
in use. A job gives its slot back when its handler is done and its result is
queued to post, while fewer than ``post_backlog`` results (by default, the
concurrency) wait to be posted; past that, as the first of those results
is in, or its own; a result that stops the worker keeps its slot until it
is in. Either way the job stays in the registry, and in
the heartbeat, until its result is in. When the policy says the worker is full, the policy waits on
:attr:`TakeLoop.job_exited` through the loop's :class:`~.take_policies.LoopView`;
the loop never spins.

Locking, after :mod:`queue`: one mutex, ``_mutex``, guards ``pending``,
``_posting``, ``_queued`` and ``_wake_when``; the Condition ``job_exited``
shares it. The slot counter is lock-free and may be read anywhere; it is
changed by the fetch thread (reserve, resize) and, under ``_mutex``, by the
thread that ends a job's hold on its slot (release): its job thread, or the
poster thread whose post ended a hold (its own job's, or a queued one's). A
job's slot is taken for a pending job only under ``_mutex``, so a pending
job never waits beside a free slot.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Deque, List

from ..backoff import Backoff
from ..config import Options
from .job_runner import JobRunner
from .job_threads import JobThreads
from .lifecycle import Lifecycle
from .platform_client import THROTTLE_BACKOFF, BadResponse, PlatformClient, PlatformError, Throttled
from . import switch_interval
from .take_policies import FULL_WAIT_SECONDS, Snapshot, TakePolicy, make_policy

log = logging.getLogger("slotworker")

#: An empty take answered faster than this is followed by a wait of the rest,
#: so a platform that does not hold takes open is not asked in a tight loop.
EMPTY_TAKE_FLOOR = 0.25
#: Waits after failed takes: the first, and the cap it doubles up to.
TAKE_BACKOFF = (0.5, 8.0)


def _unchanged(current: int) -> int:
    return current


def _never() -> bool:
    return False


class TakeLoop:
    """Takes jobs while there are free slots; runs each on a job thread."""

    def __init__(self, options: Options, client: PlatformClient, runner: JobRunner,
                 slots: Any, lifecycle: Lifecycle) -> None:
        self.client = client
        self.runner = runner
        self.slots = slots
        self.lifecycle = lifecycle
        self.modifier: Callable[[int], int] = options.concurrency_modifier or _unchanged
        self.policy: TakePolicy = make_policy(options.take_policy)
        #: Jobs to hold taken beyond the free slots (the ``prefetch`` option).
        self.prefetch = options.prefetch
        #: Results that may wait to be posted with their slots given back (None: the concurrency).
        self.post_backlog = options.post_backlog
        #: The switch interval option (None: with the slots; 0: left alone).
        self.switch_interval = options.switch_interval
        self._mutex = threading.Lock()
        # job_exited: notified when a slot is given back (by a job's thread,
        # or a poster's) or a result given back early is in, when a
        # waiter's predicate now holds; by a capacity change; and by
        # wake() (shutdown). Waited on by the fetch thread while full (through
        # the policy) and by drain() at shutdown.
        self.job_exited = threading.Condition(self._mutex)
        # What each waiter on job_exited waits for. A job's exit notifies only
        # when one of these holds, so a full worker is not woken once per job
        # to find itself still full. Guarded by _mutex.
        self._wake_when: List[Callable[[], bool]] = []
        # Jobs taken ahead of their slot, in arrival order. Guarded by _mutex.
        self.pending: Deque[Any] = collections.deque()
        # Results queued or being posted whose jobs gave their slots back. Guarded by _mutex.
        self._posting = 0
        # Jobs whose results are queued to post but found the backlog full
        # (or others waiting before them): each gives its slot back, oldest
        # first, as the backlog has room again, unless its own post ends
        # first (then it leaves the queue). Each holds a slot, so there are
        # never more than the slots. Guarded by _mutex.
        self._queued: Deque["_SlotHold"] = collections.deque()
        self.given_back_queued = 0  # slots given back from that queue (tests count these)
        if runner.poster is not None:  # retries over: what waited for them may go
            runner.poster.on_settled = self._retries_over
        # One thread per slot in use; the slot counter bounds how many jobs run.
        self.threads = JobThreads(self._job_thread)
        self.loops = 0       # fetch-loop turns (tests count these)
        self.takes = 0       # take requests sent

    # -- the policy's view (LoopView) -------------------------------------------
    def snapshot(self) -> Snapshot:
        """Free slots, slots in use and pending jobs, read together under ``_mutex``."""
        with self._mutex:
            free, in_use = self.slots.free, self.slots.in_use
            return Snapshot(free, in_use, len(self.pending))

    def wait_drained(self, timeout: float) -> bool:
        """Wait until no job runs or waits here, shutdown, or ``timeout``.

        Results still posting from slots already given back do not count:
        for taking, those slots are free.
        """
        return self._wait(self._idle, time.monotonic() + timeout, until_shutdown=True)

    def wait_free(self, timeout: float) -> bool:
        """Wait until a slot is free that no pending job will take, shutdown, or ``timeout``."""
        return self._wait(self._has_spare_slot, time.monotonic() + timeout, until_shutdown=True)

    def wait_started(self, timeout: float) -> bool:
        """Wait until every pending job has started, shutdown, or ``timeout``."""
        return self._wait(self._none_pending, time.monotonic() + timeout, until_shutdown=True)

    def pause(self, timeout: float) -> None:
        """Wait ``timeout`` seconds; shutdown or a capacity change ends it early."""
        self._wait(_never, time.monotonic() + timeout, until_shutdown=True)

    # Predicates: called with _mutex held.
    def _idle(self) -> bool:
        return self.slots.in_use == 0 and not self.pending

    def _drained(self) -> bool:
        return self.slots.in_use == 0 and not self.pending and not self._posting

    def _none_pending(self) -> bool:
        return not self.pending

    def _prefetch_short(self) -> bool:
        return len(self.pending) <= self.prefetch // 2

    def _has_spare_slot(self) -> bool:
        return self.slots.free > len(self.pending)

    def _wait(self, predicate: Callable[[], bool], deadline: float, until_shutdown: bool) -> bool:
        """Wait on :attr:`job_exited` until ``predicate()``, ``deadline``, or (if asked) shutdown.

        The predicate is checked under the Condition's lock, so a job that
        exits between the check and the wait is not missed.
        """
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
        """Wake the fetch thread (shutdown)."""
        with self.job_exited:
            self.job_exited.notify_all()

    # -- concurrency ----------------------------------------------------------
    def apply_modifier(self) -> int:
        """Ask the modifier for the capacity and resize the slots to it."""
        current = self.slots.capacity
        try:
            wanted = int(self.modifier(current))
            if wanted < 0:
                raise ValueError(f"negative concurrency {wanted}")
        except Exception as exc:  # a broken modifier must not stop the worker
            log.error("concurrency_modifier failed (%s); keeping concurrency %d", exc, current)
            return current
        if wanted != current:
            self.slots.resize(wanted)
            log.debug("concurrency set to %d", wanted)
            self._fit_switch_interval(wanted)
            with self.job_exited:  # more slots may start pending jobs or end a full wait
                self._start_pending_locked()
                self.job_exited.notify_all()
        return wanted

    def _fit_switch_interval(self, slots: int) -> None:
        """Ask for the switch interval ``slots`` call for (see :mod:`.switch_interval`)."""
        if self.switch_interval == 0:
            return
        wanted = switch_interval.for_slots(slots) if self.switch_interval is None else self.switch_interval
        switch_interval.ask(self, wanted)

    # -- the fetch thread ---------------------------------------------------------
    def run(self) -> None:
        """The fetch loop; returns when shutdown starts (after a take in flight)."""
        self._fit_switch_interval(self.slots.capacity)
        try:
            self._run()
        finally:
            switch_interval.give_back(self)

    def _run(self) -> None:
        backoff = Backoff(*TAKE_BACKOFF)
        stopping = self.lifecycle.stopping
        while not stopping.is_set():
            self.loops += 1
            if self.apply_modifier() == 0:
                # Not "all free": nothing may run. Wait the full bound.
                self.pause(FULL_WAIT_SECONDS)
                continue
            snapshot = self.snapshot()
            want = max(0, self.policy.how_many(snapshot))
            if self.prefetch:
                # Keep up to `prefetch` jobs waiting here on top of what the
                # policy asks for, refilled once half of them have started:
                # one take in flight at a time, so a take for one or two jobs
                # would hold back the next, larger one.
                if snapshot.pending <= self.prefetch // 2:
                    want += self.prefetch - snapshot.pending
                if want == 0:
                    self._wait(self._prefetch_short, time.monotonic() + FULL_WAIT_SECONDS, until_shutdown=True)
                    continue
            if want <= 0:
                self.policy.wait_full(self)
                continue
            # Slots free now are reserved for this take, so nothing else can
            # oversubscribe them; jobs asked beyond them wait for a slot.
            reserved = self.slots.try_acquire(min(want, snapshot.free)) if snapshot.free else 0
            started = time.monotonic()
            try:
                jobs = self._take(want, reserved)
            except Throttled:
                self._give_back(reserved)
                log.warning("platform throttled the take (429); waiting %.0fs", THROTTLE_BACKOFF)
                stopping.wait(THROTTLE_BACKOFF)
                continue
            except PlatformError as exc:
                self._give_back(reserved)
                level = logging.ERROR if isinstance(exc, BadResponse) else logging.WARNING
                delay = backoff.next()
                log.log(level, "take failed: %s; retrying in %.1fs", exc, delay)
                stopping.wait(delay)
                continue
            backoff.reset()
            elapsed = time.monotonic() - started
            self.policy.observe_take(want, len(jobs), elapsed)
            self._hand_out(jobs, want, reserved)
            if not jobs and elapsed < EMPTY_TAKE_FLOOR:
                stopping.wait(EMPTY_TAKE_FLOOR - elapsed)
        log.debug("fetch loop stopped")

    def _take(self, n: int, reserved: int) -> List[Any]:
        self.takes += 1
        # The slots just reserved are this take's; any others are running jobs.
        jobs = self.client.take(n, job_in_progress=self.slots.in_use > reserved or self._posting > 0)
        if jobs:
            log.debug("took %d job(s) of %d asked", len(jobs), n)
        return jobs

    def _hand_out(self, jobs: List[Any], asked: int, reserved: int) -> None:
        """Start a job per reserved slot; queue the rest; give back reservations not used."""
        if len(jobs) > asked:
            log.warning("platform sent more jobs than asked (%d > %d); the extra ones wait for a slot",
                        len(jobs), asked)
        if reserved and jobs:
            self._start_all(jobs[:reserved])
        unused, ahead = reserved - len(jobs), jobs[reserved:]
        if unused > 0 or ahead:
            with self._mutex:
                if unused > 0:
                    self.slots.release(unused)
                self.pending.extend(ahead)
                self._start_pending_locked()

    def _give_back(self, reserved: int) -> None:
        if reserved:
            with self._mutex:
                self.slots.release(reserved)
                self._start_pending_locked()

    # -- jobs -----------------------------------------------------------------------
    def _start(self, job: Any) -> None:
        """Run ``job`` on a job thread; its slot is already held."""
        # Observed here, not in the job's thread, so that the fetch loop's
        # next look already counts it.
        started = time.monotonic()
        self.policy.observe_start(started)
        self.threads.submit(job, started, busy=self.slots.in_use)

    def _start_pending_locked(self) -> None:
        """Start pending jobs, oldest first, while slots are free. Hold ``_mutex``."""
        pending = self.pending
        if not pending:
            return
        granted = self.slots.try_acquire(len(pending))
        if granted == 1:
            self._start(pending.popleft())
        elif granted:
            popleft = pending.popleft
            self._start_all([popleft() for _ in range(granted)])

    def _start_all(self, jobs: List[Any]) -> None:
        """Run ``jobs`` on job threads; their slots are already held.

        One start time and one submit for the lot: a wave of 1,024 is queued
        in about a millisecond, and the fetch thread plans (and sends) the
        next take then, not after every job thread it wakes has had its turn
        at the GIL.
        """
        started = time.monotonic()
        self.policy.observe_starts(started, len(jobs))
        self.threads.submit_all([(job, started) for job in jobs], busy=self.slots.in_use)

    def _job_thread(self, job: Any, started: float) -> None:
        hold = _SlotHold(started, time.monotonic())
        self.runner.run(job, lambda: self._job_over(hold), lambda: self._leave_slot_early(hold))

    def _backlog(self) -> int:
        return self.slots.capacity if self.post_backlog is None else self.post_backlog

    def _leave_slot_early(self, hold: "_SlotHold") -> None:
        """The job's result is queued to post: give its slot back now, or once fewer results wait.

        Not if the job is over already (its result posted before this ran).
        """
        ended = time.monotonic()
        backlog = self._backlog()
        if backlog <= 0:
            return
        with self.job_exited:
            if hold.state is not _HOLDING:
                return
            if self._queued or self._posting >= backlog:
                hold.state = _QUEUED  # behind those queued before it
                self._queued.append(hold)
                self._give_back_queued_locked(ended)
                return
            self._give_back_locked(hold, ended)

    def _give_back_locked(self, hold: "_SlotHold", ended: float) -> None:
        hold.state = _POSTING
        self._posting += 1  # before the slot shows free: no look in between finds the worker drained
        self._free_slot_locked(hold, ended)

    def _job_over(self, hold: "_SlotHold") -> None:
        """The job is over here (its result posted or given up on, or none due)."""
        ended = time.monotonic()
        with self.job_exited:
            if hold.state is _POSTING:
                hold.state = _OVER
                self._posting -= 1
                self._give_back_queued_locked(ended)
                if any(wanted() for wanted in self._wake_when):
                    self.job_exited.notify_all()
            else:  # _HOLDING, or _QUEUED: its own post ended first
                if hold.state is _QUEUED:
                    self._queued.remove(hold)  # at most one per slot
                hold.state = _OVER
                self._free_slot_locked(hold, ended)

    def _retries_over(self) -> None:
        """No result waits to retry any more: queued results may give their slots back."""
        with self.job_exited:
            self._give_back_queued_locked(time.monotonic())

    def _give_back_queued_locked(self, now: float) -> None:
        """Give back the slots of queued results, oldest first, while the backlog has room (hold ``_mutex``).

        Not while a result waits to retry, as for a result just queued.
        """
        queued, poster = self._queued, self.runner.poster
        if not queued or poster is None or poster.retrying:
            return
        backlog = self._backlog()
        while queued and self._posting < backlog:
            self._give_back_locked(queued.popleft(), now)
            self.given_back_queued += 1

    def _free_slot_locked(self, hold: "_SlotHold", ended: float) -> None:
        """Give a job's slot back and start what waits (hold ``_mutex``)."""
        # The policy forgets the job before its slot shows free: a plan made
        # in between counts the slot once (free), not twice (free, and a job
        # about to end). Its failing (a bug of ours) costs an estimate, never
        # the slot: the caller has already marked the job as out of it.
        try:
            self.policy.observe_exit(hold.started, ended, hold.began)
        except Exception:
            log.exception("internal error in the take policy's bookkeeping; the slot is given back")
        self.slots.release(1)
        if self.pending:
            self._start_pending_locked()
        if any(wanted() for wanted in self._wake_when):
            self.job_exited.notify_all()

    def in_progress_ids(self) -> List[str]:
        """Ids of the jobs this worker holds: running or posting their results, and taken but not started.

        The heartbeat reports both, so the platform does not requeue a job
        that waits here for its slot.
        """
        with self._mutex:
            waiting = [job["id"] for job in self.pending if isinstance(job, dict) and "id" in job]
        return self.runner.registry.ids() + [str(job_id) for job_id in waiting]

    # -- shutdown -------------------------------------------------------------------
    def drain(self, deadline: float) -> int:
        """Wait until no job runs or waits here, or ``deadline``.

        Returns the jobs not finished: running, pending ones (taken, so they
        are run, not abandoned) and those whose results are still posting.
        """
        self._wait(self._drained, deadline, until_shutdown=False)
        with self.job_exited:
            return self.slots.in_use + len(self.pending) + self._posting


#: A job's hold on its slot: running (or keeping its slot through its post),
#: result queued to post while the backlog is full, given back while its
#: result posts, over.
_HOLDING, _QUEUED, _POSTING, _OVER = "holding", "queued", "posting", "over"


class _SlotHold:
    """One job's hold on its slot; changed under the take loop's ``_mutex``."""

    __slots__ = ("started", "began", "state")

    def __init__(self, started: float, began: float) -> None:
        self.started = started  # handed its slot
        self.began = began  # taken up by its thread
        self.state = _HOLDING
