"""Take policies: how many jobs to ask for, and how a full worker waits.

The take loop (:mod:`slotworker.worker.take_loop`) is the mechanism: it
reserves slots, takes, hands jobs out and notifies. A policy only decides,
through the narrow :class:`LoopView` the loop gives it::

    loop                               policy
    ----                               ------
    snapshot = view.snapshot()  ---->  how_many(snapshot) -> n   (0: not now)
    n == 0                      ---->  wait_full(view)           (blocks)
    take(n) answered            ---->  observe_take(asked, got, seconds)
    a job gets its slot at t    ---->  observe_start(t)
    n jobs get theirs at t      ---->  observe_starts(t, n)
    a job gives its slot back   ---->  observe_exit(started, ended, began)   (job or poster thread)

``observe_*`` may be called from any thread; the others only from the fetch
thread. Selected by the config key ``take_policy``:

- ``pipeline`` (default): keep one take in flight, sent to land as the
  running jobs end and sized to the slots free by then, and to those of a
  spread-out wave's ends just after (see :class:`PipelinePolicy`).
- ``drain``: take every free slot; when full, wait until no job is
  in progress, at most :data:`FULL_WAIT_SECONDS`, so a drained worker takes a
  full batch at once and one straggler cannot hold the freed slots idle for
  longer than that.
- ``fixed``: when full, sleep :data:`FULL_WAIT_SECONDS` (runpod 1.12.0's
  behaviour), kept only as the benchmark's reference arm.
- ``lookahead``: take before the slots free, timed so that the answer lands
  as they free. It estimates the take's round trip and a job's run time
  (EWMAs of what it has seen) and asks for the slots expected to be free
  when the answer arrives; jobs that arrive before their slot wait in the
  loop's pending queue, in order, and start as slots free. ``pipeline``'s
  predecessor.
"""

from __future__ import annotations

import bisect
import collections
import threading
import time
from typing import Deque, Dict, List, NamedTuple, Optional, Protocol, Type

#: The most a full worker waits before it looks at its slots again.
FULL_WAIT_SECONDS = 1.0


class Snapshot(NamedTuple):
    """The slots as the loop saw them in one consistent read."""

    free: int      #: slots free now
    in_use: int    #: slots held by running jobs
    pending: int   #: jobs taken and waiting for a slot


class LoopView(Protocol):
    """What a policy may read and wait on; the take loop implements it."""

    def snapshot(self) -> Snapshot:
        """Free slots, slots in use and pending jobs, read together under the loop's lock."""

    def wait_drained(self, timeout: float) -> bool:
        """Block until no job runs or waits here, shutdown, or ``timeout``; True if drained."""

    def wait_free(self, timeout: float) -> bool:
        """Block until a slot is free that no pending job will take, shutdown, or ``timeout``."""

    def wait_started(self, timeout: float) -> bool:
        """Block until no job waits for a slot, shutdown, or ``timeout``."""

    def pause(self, timeout: float) -> None:
        """Block ``timeout`` seconds; shutdown or a capacity change ends it early."""


class TakePolicy:
    """The interface the take loop drives; the base class is ``drain``."""

    name = "drain"

    def how_many(self, snapshot: Snapshot) -> int:
        """Jobs to ask for now; 0 means the worker counts as full."""
        return snapshot.free

    def wait_full(self, view: LoopView) -> None:
        """Block while full: until no job is in progress, shutdown, or the bound."""
        view.wait_drained(FULL_WAIT_SECONDS)

    def observe_take(self, asked: int, got: int, seconds: float) -> None:
        """A take was answered: ``got`` of ``asked`` jobs after ``seconds``."""

    def observe_start(self, at: float) -> None:
        """A job was handed its slot at ``at`` (``time.monotonic()``)."""

    def observe_starts(self, at: float, count: int) -> None:
        """``count`` jobs were handed their slots at ``at``."""
        for _ in range(count):
            self.observe_start(at)

    def observe_exit(self, started: float, ended: float, began: Optional[float] = None) -> None:
        """The job handed its slot at ``started`` is leaving it at ``ended``.

        ``began``: when its thread took it up, if known. A wave handed out at
        once wakes its threads in turn on one GIL (about 0.1 s for 1,024), a
        delay that belongs to the hand-out, not to the job's length.
        """


class DrainPolicy(TakePolicy):
    """Wait until drained (bounded), then take a full batch."""


class FixedPolicy(TakePolicy):
    """Sleep a fixed second when full, as runpod 1.12.0 does."""

    name = "fixed"

    def wait_full(self, view: LoopView) -> None:
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
    #: EWMA weights: a take is rarer than a job exit, so it weighs more.
    TAKE_ALPHA = 0.3
    JOB_ALPHA = 0.1

    def __init__(self) -> None:
        # Guards _starts and job_seconds: job threads and the fetch thread.
        self._lock = threading.Lock()
        self._starts: Deque[float] = collections.deque()  # running jobs' starts, oldest first
        self.round_trip: Optional[float] = None  # written by the fetch thread only
        self.job_seconds: Optional[float] = None

    def observe_start(self, at: float) -> None:
        with self._lock:
            self._starts.append(at)

    def observe_exit(self, started: float, ended: float, began: Optional[float] = None) -> None:
        # Jobs of a like length end in start order: dropping the oldest start
        # is exact for them and a cheap approximation otherwise.
        with self._lock:
            if self._starts:
                self._starts.popleft()
            self.job_seconds = _ewma(self.job_seconds, ended - started, self.JOB_ALPHA)

    def observe_take(self, asked: int, got: int, seconds: float) -> None:
        # Only a full answer measures the round trip: a partial one may have
        # sat in the platform's long poll waiting for work.
        if got >= asked > 0:
            self.round_trip = _ewma(self.round_trip, seconds, self.TAKE_ALPHA)

    def _estimates(self) -> "tuple[Optional[float], Optional[float], List[float]]":
        with self._lock:
            return self.round_trip, self.job_seconds, list(self._starts)

    def how_many(self, snapshot: Snapshot) -> int:
        rtt, run, starts = self._estimates()
        if rtt is None or run is None:
            return snapshot.free
        now = time.monotonic()
        # Ends in (now - rtt, now + rtt]: free by the time the answer lands.
        soon = bisect.bisect_right(starts, now + rtt - run) - bisect.bisect_right(starts, now - rtt - run)
        return max(0, snapshot.free + soon - snapshot.pending)

    def wait_full(self, view: LoopView) -> None:
        rtt, run, starts = self._estimates()
        if rtt is None or run is None:
            super().wait_full(view)
            return
        now = time.monotonic()
        # Wake when the next take must leave to land as the earliest job ends.
        wakes = [s + run - rtt for s in starts if s + run - rtt > now]
        timeout = min(FULL_WAIT_SECONDS, min(wakes) - now + 0.001) if wakes else FULL_WAIT_SECONDS
        view.wait_free(timeout)


class PipelinePolicy(TakePolicy):
    """Keep one take in flight, timed to land as slots free, sized to what will be free.

    It learns the take's round trip ``rtt`` (an EWMA; only full answers
    measure one) and a job's run time ``est``, the median of the last
    wave's run times (as many as there are slots, at least
    ``MIN_SAMPLES``), each counted from when the job's thread took it up:
    the jobs of a large wave leave their slots in turn on one GIL, the last
    ones later, and an average weighted to the latest exits would put every
    wave's end late, as would counting from a hand-out that woke the
    threads of a wave in turn. It keeps
    every running job's start, so a job is expected to end at ``start +
    est``. A job still running more than ``SLACK`` × ``est`` and more than a
    round trip past that is a straggler and not counted. Each time the fetch thread looks, it weighs
    taking now against waiting: a take sent now lands at ``now + rtt`` with
    ``n0`` jobs' worth of free slots; waiting ``d`` more lands ``Δ(d)`` more jobs at once (those
    expected to end in the meantime), which a take sent now would leave idle
    until the next take lands one round trip later, but it delays the next
    job of every one of the ``C`` slots (and every take after) by ``d``.
    Waiting wins when some ``Δ(d) · rtt > C · d``, that is while slots free
    faster than ``C`` per round trip: a whole batch about to end is worth a
    short wait, and so is the rest of a wave whose ends spread out (at
    1,024 slots, over the 0.1 s or so it takes to hand a wave out), while
    slots freeing at a steady rate are taken at once, back to back. Ends
    worth gathering are not waited for to the last: the take is timed to
    land as the first of them ends (once that is no more than
    ``AHEAD_SHARE`` of the gathering wait away, it goes now) and asks for
    them all, and the jobs for slots still held wait here, starting as
    those free, for less than a round trip. A job
    taken and waiting for a slot counts as starting when the running job
    expected to end first does (one that keeps its slot while its result
    waits past the ``post_backlog``, say), so a take sent then asks for its
    slot too.
    Until it has seen a round trip it behaves as ``drain``; until it
    has ``MIN_SAMPLES`` run times it takes what is free, plus one batch
    ahead while the jobs it has seen ran shorter than a round trip.
    """

    name = "pipeline"
    TAKE_ALPHA = 0.3
    #: Run times kept: ``est`` is the median of the last wave's worth (the slots, at most this).
    RUN_WINDOW = 4096
    #: A job overdue by more than this fraction of ``est`` no longer counts as about to end.
    SLACK = 0.25
    #: Land this long after the expected end, so the job has really left its slot.
    MARGIN = 0.002
    #: Run times seen before ``est`` is trusted (one warm-up job says little about a burst).
    MIN_SAMPLES = 8
    #: Waits in a row to gather ends, at most; back from the last, it takes what is free and what it gathers.
    GAIN_WAITS = 2
    #: Ends worth gathering are taken ahead once the first is this share of the gathering wait away, or nearer.
    AHEAD_SHARE = 0.25

    def __init__(self) -> None:
        # Guards every attribute below: job threads and the fetch thread.
        self._lock = threading.Lock()
        self._starts: List[float] = []  # running jobs' start times, sorted
        self.round_trip: Optional[float] = None
        self.job_seconds: Optional[float] = None
        self._samples = 0
        self._runs: Deque[float] = collections.deque(maxlen=self.RUN_WINDOW)  # recent run times, oldest first
        self._fresh = False  # run times seen since job_seconds was last worked out
        self._look_again: Optional[float] = None  # set by how_many, read by wait_full (fetch thread)
        self._for_gain = False  # _look_again is the end of a wait chosen to gather ends (fetch thread)
        self._gain_waits = 0  # such waits in a row (fetch thread)

    def observe_start(self, at: float) -> None:
        with self._lock:
            bisect.insort(self._starts, at)

    def observe_starts(self, at: float, count: int) -> None:
        with self._lock:
            starts = self._starts
            i = bisect.bisect_right(starts, at)
            starts[i:i] = [at] * count

    def observe_exit(self, started: float, ended: float, began: Optional[float] = None) -> None:
        # The run time counts from when the job's thread took it up: the
        # threads of a wave handed out at once wake over 0.1 s or more, and
        # counted from the hand-out, the run times of such a wave (a median
        # of 1.07-1.15 s for jobs of 1 s at 1,024 slots) made the take after
        # the next wave, whose jobs start one by one as slots free, land
        # that much after its first slots freed. From the thread's start, a
        # take lands as a wave's first jobs end; the jobs it brings for slots
        # still held wait here and start as those free.
        run = ended - (started if began is None or began < started else began)
        with self._lock:
            starts = self._starts
            i = bisect.bisect_left(starts, started)
            if i < len(starts) and starts[i] == started:
                del starts[i]
            self._runs.append(run)
            self._fresh = True
            self._samples += 1

    def observe_take(self, asked: int, got: int, seconds: float) -> None:
        if got >= asked > 0:
            with self._lock:
                self.round_trip = _ewma(self.round_trip, seconds, self.TAKE_ALPHA)

    def how_many(self, snapshot: Snapshot) -> int:
        return self._look(snapshot, time.monotonic())

    def _look(self, snapshot: Snapshot, now: float) -> int:
        # Back from GAIN_WAITS waits in a row chosen for what they gather:
        # take now (what is free, and the ends gathered just after) rather
        # than wait again for the next few ends
        # (as a large wave's ends spread out, each short wait looked worth
        # it, and it re-planned every few ms). Back from the first, it may
        # wait once more: the jobs of a batch that landed while the last
        # wave's slots were still held start a few ms late, and end so, and
        # a take without them splits the wave for good. Back from a look set
        # a round trip before the next end, it weighs afresh: the first few
        # ends of a wave due then are not worth a take that leaves the rest
        # a round trip idle.
        back = self._for_gain and self._look_again is not None and now >= self._look_again
        waited = back and self._gain_waits >= self.GAIN_WAITS
        n, self._look_again = self._plan(snapshot, now, waited)
        self._gain_waits = (self._gain_waits + 1 if back else 1) if self._for_gain else 0
        return n

    def _plan(self, snapshot: Snapshot, now: float, waited: bool = False) -> "tuple[int, Optional[float]]":
        """(jobs to ask for now, or 0 and when to look again; None: when a slot frees)."""
        # The starts are copied (a C-speed copy) so that the decision, a loop
        # in Python, runs outside the lock every job's exit takes.
        # So are the latest run times, one wave's worth, when some are new.
        with self._lock:
            window = max(self.MIN_SAMPLES, snapshot.free + snapshot.in_use)
            recent = list(self._runs)[-window:] if self._fresh else None
            self._fresh = False
            rtt, samples = self.round_trip, self._samples
            starts = self._starts[:] if rtt is not None and samples >= self.MIN_SAMPLES else []
        if recent:
            recent.sort()
            self.job_seconds = recent[len(recent) // 2]  # written and read by the fetch thread only
        return self._decide(snapshot, now, rtt, self.job_seconds, samples, starts, waited)

    def _decide(self, snapshot: Snapshot, now: float, rtt: Optional[float], est: Optional[float],
                samples: int, starts: List[float], waited: bool) -> "tuple[int, Optional[float]]":
        self._for_gain = False
        if rtt is None:
            return snapshot.free, None
        if est is None or samples < self.MIN_SAMPLES:
            # Learning. Jobs seen so far shorter than a round trip: guess that
            # what runs now ends by the time the next answer lands, and keep
            # one batch taken ahead (if the guess is wrong it waits here,
            # never more than one batch, once). No job seen yet, or longer
            # ones: take only what is free, so a cold worker facing long jobs
            # holds none back from other workers.
            ahead = snapshot.in_use if est is not None and est < rtt else 0
            return max(0, snapshot.free + ahead - snapshot.pending), None
        landing = now + rtt
        # Running jobs overdue by more than the slack and than a round trip
        # (stragglers) are not counted. A round trip at least: handing out a
        # large wave of short jobs takes the GIL long enough (0.14 s for
        # 1,024 jobs) that its first jobs look overdue when the next take is
        # planned, though only the hand-out kept them from ending.
        first = bisect.bisect_left(starts, now - max(self.SLACK * est, rtt) - est)
        if snapshot.pending:
            starts = _with_pending(starts, first, snapshot.pending, snapshot.free, now, est)
        # Expected ends in [now - slack, landing] free by the time a take sent now lands.
        by_landing = bisect.bisect_right(starts, landing - est)
        slots = snapshot.free + snapshot.in_use
        # (Never more than the slots: a plan made as a job exits may see its slot twice.)
        n0 = min(snapshot.free - snapshot.pending + max(0, by_landing - first), slots)
        # Ends in (landing, landing + rtt]: what waiting d would add.
        within = bisect.bisect_right(starts, landing + rtt - est)
        # Waiting `wait` lands the ends up to i with this take, each of which
        # would otherwise wait a round trip for the next one; it delays every
        # slot's next job (and every take after) by `wait`.
        best_gain, best_wait, gathered = 0.0, None, 0
        for i in range(by_landing, within):
            wait = starts[i] + est - landing
            gain = (i - by_landing + 1) * rtt - slots * wait
            if gain > best_gain:
                best_gain, best_wait, gathered = gain, wait, i - by_landing + 1
        if best_wait is not None:
            # Worth gathering. The take lands as the first of those ends and
            # asks for them all: the jobs for slots still held wait here and
            # start as those free, rather than leave the slots that free
            # first idle until the last (a wave handed out at once ends over
            # the 0.1 s or more its threads took to wake, and the next one,
            # started as slots freed, ends so too).
            # With jobs taken and waiting for a slot, those may be all that
            # the first ends free (n <= 0): then it waits, as for the last.
            first_wait = starts[by_landing] + est - landing
            n = min(n0 + gathered, slots)
            if n > 0 and ((waited and n0 > 0) or first_wait <= self.AHEAD_SHARE * best_wait):
                return n, None
            self._for_gain = True
            return 0, now + (first_wait if n > 0 else best_wait) + self.MARGIN
        if n0 > 0:
            return n0, None
        if within < len(starts):  # the next expected end is more than a round trip away
            return 0, starts[within] + est - rtt
        return 0, None

    def wait_full(self, view: LoopView) -> None:
        look_again = self._look_again
        if look_again is None:
            # No round trip yet: wait as drain does. Jobs taken ahead: until
            # they have started (the plan changes then). Only stragglers
            # run: until a slot frees.
            if self.round_trip is None:
                view.wait_drained(FULL_WAIT_SECONDS)
            elif view.snapshot().pending:
                view.wait_started(FULL_WAIT_SECONDS)
            else:
                view.wait_free(FULL_WAIT_SECONDS)
            return
        delay = look_again - time.monotonic()
        if delay > 0:
            view.pause(min(delay, FULL_WAIT_SECONDS))


def _with_pending(starts: List[float], first: int, pending: int, free: int, now: float,
                  est: float) -> List[float]:
    """``starts`` with the expected starts of ``pending`` jobs merged in.

    A job taken and waiting for a slot starts at once on a free slot, else
    on the slot of the running job expected to end first (from ``first``,
    stragglers left out), and counts as ending ``est`` after that: a wave
    whose slots are held until its results are posted (past the
    ``post_backlog``) when the next take is planned holds back part of that
    take's batch, and that part frees its slots too by the time a take sent
    now lands. Pending jobs beyond the slots
    expected to free are not counted.
    """
    at_once = min(free, pending)
    later = starts[first:first + pending - at_once]
    return sorted(starts + [now] * at_once + [max(start + est, now) for start in later])


POLICIES: Dict[str, Type[TakePolicy]] = {"drain": DrainPolicy, "fixed": FixedPolicy,
                                         "lookahead": LookaheadPolicy, "pipeline": PipelinePolicy}


def make_policy(name: str) -> TakePolicy:
    """The policy called ``name``; ValueError names the known ones."""
    try:
        return POLICIES[str(name)]()
    except KeyError:
        raise ValueError(f"unknown take_policy {name!r}; use one of {', '.join(sorted(POLICIES))}") from None
