"""The threads that post final results, so a job's thread is free once its handler returns.

A job thread hands its final result (already encoded) to :class:`ResultPoster`
and goes back for its next job; a poster thread sends it, retrying as
:func:`~.platform_client.deliver` does, and then ends the job. The job's slot
is given back when its result is queued, while few enough results wait
(``post_backlog``), else once one of them (or its own) is in; either way
the job is the worker's, and in its heartbeat, until its result is in.

Posting from a few threads rather than from every job's own is cheaper at
high concurrency: the HTTP work of hundreds of jobs runs on threads that are
already awake, instead of on hundreds of threads that each wake, take the
GIL and contend for it a few times per request.

How many: :data:`BASE_THREADS` (one) poster, started with the first result.
While it is awake it takes the results queued behind it one after another,
with no wake-up of another thread in between and no GIL passed between
posters: in a burst at 32 slots, four posters cost about 8.5 thread
switches a job, one poster 2 (a job thread's own, about 6, are unchanged).

More are added by a watch thread, which runs only while results wait and
no poster is free to take them. Every :data:`GROW_AFTER_WAIT` it looks:

- if no poster has taken a result for :data:`STALL_SECONDS` since results
  began to wait (every poster is held on a post: a platform that holds a
  request, say): one more, whatever the CPU, so a held post does not hold
  up the results behind it;
- if results are waiting (no take, or the last one taken had waited, for
  :data:`GROW_AFTER_WAIT`) while the process used under
  :data:`IDLE_CPU_SHARE` of one core since the last look, and the platform's
  answer is at least as long as the rest of a post (its time here) times
  the posters at work, results wait on the platform's latency, which one
  more thread hides, overlapping its wait with the others' work: one more.
  (Without a recent measure of the answer, a post of
  :data:`SLOW_POST_SECONDS` or more counts as waiting on the platform.)
  A platform answering in 50 ms and a post's own 0.1 ms allow hundreds; on
  the local platform at 1,024 slots (answers in 0.2 ms, posts of 0.3 ms) a
  second poster posts a wave's results half again as fast (about 5,000 a
  second against 3,300); the rule would allow a third, but by then the CPU
  is no longer idle;
- otherwise they wait on this process (the GIL), which more threads would
  only contend for (on the local platform at 512 slots, a burst of 16,384
  jobs: t99 22.8 s and 0.38 ms of CPU a job with posters added on idle CPU
  alone, as a GIL convoy leaves the CPU half idle, against 19.8 s and
  0.24 ms without): none.

Where the platform has been taking :data:`GROW_AFTER_WAIT` or more to answer (the quickest of
its recent answers; without a measure of it, a moving average of a task's
time less its waits to retry) and a look in the last
:data:`SHARE_FRESH_SECONDS` found the CPU idle, a result that finds no
poster free gets one at once: it would wait as long. Threads are added only
while results wait.

A poster whose result failed and waits to retry steps aside
(:meth:`ResultPoster.step_aside`): up to :data:`BASE_THREADS` such no
longer count as at work, so the next result gets a thread at once, and the
rest is the watch's (a result the platform keeps refusing holds up no
other). A thread beyond :data:`BASE_THREADS` that has idled
:data:`IDLE_EXIT_SECONDS` ends, so neither a burst of retries nor a stall
leaves a large pool behind.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable, Optional

from .queue_threads import QueueThreads

Task = Callable[[], None]

log = logging.getLogger("slotworker")

#: Posters started whenever results wait and none is idle (more: see above).
BASE_THREADS = 1
#: The most poster threads there can be.
MAX_THREADS = 256
#: How often (seconds) the watch looks while results wait, and how long they wait before it adds one.
GROW_AFTER_WAIT = 0.02
#: ... while the process used less CPU than this (cores) since the last look.
IDLE_CPU_SHARE = 0.5
#: ... and, when the platform's answer time is not known, while a post takes this long (seconds).
SLOW_POST_SECONDS = 0.001
#: No result taken for this long (seconds) while results wait: every poster is stuck; add one.
STALL_SECONDS = 0.25
#: A look at the CPU this recent (seconds) still counts for a result that finds no poster free.
SHARE_FRESH_SECONDS = 1.0
#: A thread beyond BASE_THREADS that waited this long for a task ends.
IDLE_EXIT_SECONDS = 2.0


class ResultPoster(QueueThreads):
    """Runs posting tasks on a pool of threads that grows while tasks wait.

    Each task must not raise: a job's own code catches everything.
    """

    def __init__(self, name: str = "slotworker-post", base_threads: int = BASE_THREADS,
                 max_threads: int = MAX_THREADS,
                 answer_seconds: Optional[Callable[[], Optional[float]]] = None) -> None:
        """``answer_seconds``: how long the platform takes to answer a post once it
        is sent (:meth:`.PlatformClient.answer_seconds`); without it, how long a
        task takes stands for it."""
        super().__init__(name)  # queue items: (when queued, task), or None to stop a thread
        self._answer_seconds = answer_seconds
        self._base = base_threads
        self._max = max(max_threads, base_threads)
        # All guarded by _lock:
        self._idle = 0  # threads waiting for a task, or about to
        self._aside = 0  # threads waiting to retry a task
        self._failing = 0  # threads whose task has waited to retry at least once
        #: Called, outside the poster's lock, when no result waits to retry any more.
        self.on_settled: Optional[Callable[[], None]] = None
        now = time.monotonic()
        self._last_take = now  # when a poster last took a task ...
        self._last_waited = 0.0  # ... and how long that task had waited
        self._post_seconds: Optional[float] = None  # how long a task takes (a moving average) ...
        self._local = threading.local()  # ... less the time it waited to retry (per thread: .aside)
        # The watch: whether it looks (results wait), since when, when it last
        # looked and the process's CPU time then, whether it has added a
        # thread for a stall since results began to wait, and its thread.
        self._watching = False
        self._watch_from = self._look_at = now
        self._look_cpu = 0.0
        # CPU (cores) the last look found since the one before, and when it
        # looked (busy until it has; starting a watch is not a look).
        self._share, self._share_at = 1.0, now
        self._stalled = False
        self._watch_failed = False  # a watch thread could not start (said once)
        self._watcher: Optional[threading.Thread] = None
        self._wake_watch = threading.Condition(self._lock)

    def submit(self, task: Task) -> None:
        """Run ``task()`` on a poster thread."""
        self._queue.put((time.monotonic(), task))
        if self._queue.qsize() > self._idle and self._may_add():
            self._behind()

    def _may_add(self) -> bool:
        """Whether :meth:`_behind` may have something to do, looked at without the lock.

        Usually not: the base threads are at work and the watch looks. A
        wave of hundreds of jobs ending at once submits hundreds of results
        within milliseconds; had each taken the lock to find that out, they
        would have queued on it, each hand-over waiting for the GIL. A stale
        answer costs at most a thread added a submit or a look later; the
        threads there are take every queued task either way.
        """
        return not self._watching or self._short_of_base() or self._slow_posts_on_idle_cpu()

    def _short_of_base(self) -> bool:
        """Fewer than the base threads at work (those waiting to retry not counted, up to the base)."""
        return len(self._threads) - min(self._aside, self._base) < self._base

    @property
    def retrying(self) -> bool:
        """True from a result's first failed post until it is in or given up on."""
        return self._failing > 0

    def settle(self) -> None:
        """The calling task's result is in, or given up on: it no longer counts as retrying.

        Called from a task before it ends its job, so that what waits for
        the retries to end (:attr:`on_settled`) sees them over when the job
        is. Does nothing for a task that never waited to retry.
        """
        if not getattr(self._local, "failing", False):
            return
        self._local.failing = False
        with self._lock:
            self._failing -= 1
            settled = self._failing == 0
        if settled and self.on_settled is not None:
            self.on_settled()

    def step_aside(self, wait: Callable[[], None]) -> None:
        """Run ``wait()`` (a task waiting to retry) with this thread not counted as at work.

        Called from a task. On a poster thread, while it waits, queued tasks
        may get another thread as if this one were not there (up to
        :data:`BASE_THREADS` such threads; beyond, as the watch finds results
        waiting). Elsewhere (a task run by the thread that submitted it,
        when no poster could start) it just waits.
        """
        if threading.current_thread() not in self._threads:
            wait()
            return
        first = not self._local.failing
        with self._lock:
            self._aside += 1
            self._failing += first
        self._local.failing = True
        began = time.monotonic()
        try:
            if self._queue.qsize() > self._idle:
                self._behind()
            wait()
        finally:
            self._local.aside += time.monotonic() - began  # not the platform's answer time
            with self._lock:
                self._aside -= 1

    def _behind(self) -> None:
        """Tasks wait and no thread is idle: a thread at once, or the watch looks.

        At once: while under the base, or while the platform is slow to
        answer and a recent look found the CPU idle.
        """
        reason = None
        with self._lock:
            if self._closed or self._queue.qsize() <= self._idle:
                return
            if self._short_of_base():
                reason = self._start_poster_locked()
                if reason is None:
                    return
                alone = not self._threads
            elif self._slow_posts_on_idle_cpu() and self._start_poster_locked() is None:
                return
            if not self._watching:  # (also after a failed start: the watch retries)
                self._start_watch_locked()
        if reason is not None:
            log.warning("could not start a result poster thread (%s)%s", reason,
                        "; posting from this thread" if alone else "; the others carry on")
            if alone:  # nobody else would ever take what is queued
                self._drain_here()

    def _slow_posts_on_idle_cpu(self) -> bool:
        """Whether a result that finds no poster free gets one at once.

        Yes while the platform takes :data:`GROW_AFTER_WAIT` or more to
        answer (the result would wait as long) and a look in the last
        :data:`SHARE_FRESH_SECONDS` found the CPU idle. Read under the lock
        by :meth:`_behind`, and without it by :meth:`_may_add` (a hint).
        """
        return (self._share < IDLE_CPU_SHARE and time.monotonic() - self._share_at < SHARE_FRESH_SECONDS
                and len(self._threads) < self._max and self._platform_wait() >= GROW_AFTER_WAIT)

    def _platform_wait(self) -> float:
        """How long a post waits on the platform (0 before any).

        The platform's recent answer time where the client measures it, else
        a task's whole time. The answer time is what more threads hide: a
        post that takes long because its thread waits for the GIL behind
        hundreds of job threads (the answer itself came in 0.2 ms) is not
        helped by another thread, and the idle-CPU rule would be fooled by it
        (a GIL convoy leaves the CPU half idle).
        """
        if self._answer_seconds is not None:
            answer = self._answer_seconds()
            if answer is not None:
                return answer
        return self._post_seconds or 0.0  # (no answer of late: a task's time stands in)

    def _answers_outlast_posting_locked(self) -> bool:
        """Whether one more poster would hide the platform's answer time (hold ``_lock``).

        Yes while the answer is at least the rest of a post (the time a post
        spends in this process: its work, and its waits for the GIL) times
        the posters at work: each of them then waits on the platform for
        longer than the others take to do their part, and one more overlaps
        that wait with theirs. A post whose time goes to this process, not
        to the answer, gets none.
        """
        post = self._post_seconds
        if post is None:  # no post has ended yet: nothing to weigh
            return False
        answer = self._answer_seconds() if self._answer_seconds is not None else None
        if answer is None:  # only a post's whole time is known: it cannot be split
            return post >= SLOW_POST_SECONDS
        return answer >= (len(self._threads) - self._aside) * max(0.0, post - answer)

    def _start_poster_locked(self) -> Optional[str]:
        """Start a poster thread (hold ``_lock``); why it could not, or None."""
        try:  # listed first: beyond the base, it counts itself for its idle exit
            self._start_thread_locked(self._serve)
        except RuntimeError as exc:  # the process may not start more threads
            return str(exc)
        self._idle += 1  # counted as idle until it has taken a task
        return None

    def _drain_here(self) -> None:
        """Run queued tasks on the calling thread until none is left."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is None:  # a stop meant for a thread that never started
                continue
            item[1]()

    # -- the watch ------------------------------------------------------------------
    def _start_watch_locked(self) -> None:
        self._watching = True
        self._watch_from = self._look_at = time.monotonic()
        self._look_cpu = time.process_time()
        if self._watcher is not None:
            self._wake_watch.notify()
            return
        watcher = threading.Thread(target=self._watch, name=f"{self._name}-watch", daemon=True)
        try:
            watcher.start()
        except RuntimeError as exc:  # no thread to spare: the posters carry on as they are
            self._watching = False
            if not self._watch_failed:
                self._watch_failed = True
                log.warning("could not start the result posters' watch thread (%s); "
                            "no poster is added while results wait", exc)
            return
        self._watcher = watcher

    def _watch(self) -> None:
        try:
            self._watch_until_closed()
        finally:  # closed, or a bug of ours: the next wait starts a new watch
            with self._lock:
                self._watcher, self._watching = None, False

    def _watch_until_closed(self) -> None:
        while True:
            with self._lock:
                added = self._next_addition_locked()
            if added is None:
                return
            stalled, waiting, first = added
            if stalled:  # once per spell of waiting results at INFO; the rest at DEBUG
                log.log(logging.INFO if first else logging.DEBUG,
                        "no result taken for posting in %.2fs while %d wait (posts held by the "
                        "platform, or waiting to retry): one more poster thread", stalled, waiting)
            else:
                log.debug("%d result(s) wait on the platform's answers: one more poster thread", waiting)

    def _next_addition_locked(self) -> "Optional[tuple[float, int, bool]]":
        """Wait (holding ``_lock``) until the watch adds a thread; None once closed.

        Returns how long results had waited if that was a stall (else 0), how
        many tasks wait, and whether it is this spell's first stall.
        """
        wake, waiting = self._wake_watch, self._queue.qsize
        while not self._closed:
            if not self._watching:
                wake.wait()
                continue
            now = time.monotonic()
            look = self._look_at + GROW_AFTER_WAIT
            if now < look:
                wake.wait(look - now)
                continue
            if waiting() <= self._idle:  # every waiting task has a thread
                self._watching = self._stalled = False
                continue
            # No take since results began to wait counts; before, none was due.
            quiet = now - max(self._last_take, self._watch_from)
            cpu = time.process_time()
            self._share = share = (cpu - self._look_cpu) / (now - self._look_at)
            self._share_at = self._look_at = now
            self._look_cpu = cpu
            # Held posts: no take for a stall's length. One more, whatever the CPU.
            stalled = quiet >= STALL_SECONDS
            # (How long the last result taken had waited, if taken in this spell.)
            waited = self._last_waited if self._last_take >= self._watch_from else 0.0
            behind = quiet >= GROW_AFTER_WAIT or waited >= GROW_AFTER_WAIT
            # Waiting on the platform's answers (not on the GIL): more threads hide them.
            latency = share < IDLE_CPU_SHARE and self._answers_outlast_posting_locked()
            if len(self._threads) >= self._max or not (stalled or (behind and latency)):
                continue
            if self._start_poster_locked() is None:
                first, self._stalled = stalled and not self._stalled, self._stalled or stalled
                return (quiet if stalled else 0.0), waiting(), first
        return None

    def shutdown(self, wait: bool = True, timeout: Optional[float] = None) -> None:
        """Let every poster post what was queued and stop, and the watch end."""
        super().shutdown(wait=False)
        with self._lock:
            self._wake_watch.notify_all()
            watcher = self._watcher
        if wait:
            super().shutdown(wait=True, timeout=timeout)
            if watcher is not None:
                watcher.join(timeout)

    # -- a poster -------------------------------------------------------------------
    def _serve(self) -> None:
        get, lock, waiting = self._queue.get, self._lock, self._queue.qsize
        while True:
            try:  # the base threads wait without a timeout (no wake-ups while idle)
                item = get(timeout=IDLE_EXIT_SECONDS if len(self._threads) > self._base else None)
            except queue.Empty:
                with lock:
                    ends = len(self._threads) > self._base and not self._closed
                    if ends:
                        self._threads.remove(threading.current_thread())
                        self._idle -= 1
                if ends:
                    # A task put while this thread still counted as idle got no look.
                    if waiting() > self._idle:
                        self._behind()
                    return
                continue
            if item is None:
                with lock:
                    self._idle -= 1
                return
            self._local.aside = 0.0
            self._local.failing = False
            with lock:
                self._idle -= 1
                self._last_take = now = time.monotonic()
                self._last_waited = now - item[0]
            # Tasks put while this one was taken, when no other thread was
            # idle, got no look: have one now.
            if waiting() > self._idle:
                self._behind()
            item[1]()
            self.settle()  # for a task that did not settle itself
            with lock:
                self._idle += 1
                took = time.monotonic() - now - self._local.aside
                average = self._post_seconds
                self._post_seconds = took if average is None else average + 0.3 * (took - average)
