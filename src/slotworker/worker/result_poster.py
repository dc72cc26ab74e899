"""The threads that post final results, so a job's thread is free once its handler returns.

A job thread hands its final result (already encoded) to :class:`ResultPoster`
and goes back for its next job; a poster thread sends it, retrying as
:func:`~.platform_client.deliver` does, and then ends the job (its slot is
given back only then, so a job counts as running until its result is in).

Posting from a few threads rather than from every job's own is cheaper at
high concurrency: the HTTP work of hundreds of jobs runs on threads that are
already awake, instead of on hundreds of threads that each wake, take the
GIL and contend for it a few times per request.

How many: :data:`BASE_THREADS` (one) poster at work, started with the first
result. While it is awake it takes the results queued behind it one after
another, with no wake-up of another thread in between and no GIL passed
between posters: in a burst at 32 slots, four base posters cost about 8.5
thread switches a job, one poster 2 (a job thread's own, about 6, are
unchanged). More are added in two cases. When a result has waited longer
than :data:`GROW_AFTER_WAIT` while the process is not busy on the CPU (under
:data:`IDLE_CPU_SHARE` of one core since it last looked, a thread per look),
results wait on the platform's latency, which more threads hide (a platform
answering in 50 ms needs 25 of them for 500 results a second), not on the
GIL, which more threads would only contend for (on the local platform at
1,024 slots, 2 posters cost 0.59 ms of CPU per job and an unbounded pool
0.97 ms, at the same throughput). And when posts stall: while results wait
and no poster is idle, a watch thread looks at
whether any poster has taken a result in the last :data:`STALL_SECONDS`. If
none has, every poster is stuck on a post (a platform that holds a request,
say), and a thread is added whatever the CPU, at most one per stall; so a
hung post never holds up the results queued behind it for longer than that.
The watch thread sleeps when no result waits.

A poster whose result failed and waits to retry steps aside
(:meth:`ResultPoster.step_aside`): up to :data:`BASE_THREADS` of those no
longer count among the threads at work, and each retry is a look at whether
results wait (growing as above), so results the platform keeps refusing (a
500 for those bodies, say) do not hold up the others. A thread beyond
:data:`BASE_THREADS` that has idled :data:`IDLE_EXIT_SECONDS` ends, so
neither a burst of retries nor a stall leaves a large pool behind.
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

#: Posters started whenever results wait and none is idle (beyond, see above).
BASE_THREADS = 1
#: The most poster threads there can be.
MAX_THREADS = 256
#: Beyond BASE_THREADS a thread is added only for a result that waited this long (seconds) ...
GROW_AFTER_WAIT = 0.02
#: ... while the process used less CPU than this (cores).
IDLE_CPU_SHARE = 0.5
#: Beyond BASE_THREADS, at most one thread is added per this many seconds.
CPU_LOOK_SECONDS = 0.1
#: A thread beyond BASE_THREADS that waited this long for a task ends.
IDLE_EXIT_SECONDS = 2.0
#: Results waiting while no poster has taken one for this long (seconds): all are stuck, add one.
STALL_SECONDS = 0.25


class ResultPoster(QueueThreads):
    """Runs posting tasks on a pool of threads that grows while tasks wait.

    Each task must not raise: a job's own code catches everything.
    """

    def __init__(self, name: str = "slotworker-post", base_threads: int = BASE_THREADS,
                 max_threads: int = MAX_THREADS) -> None:
        super().__init__(name)  # queue items: (when queued, task), or None to stop a thread
        self._base = base_threads
        self._max = max(max_threads, base_threads)
        # When the process's CPU time was last looked at, and what it was.
        self._look_at, self._look_cpu = time.monotonic(), time.process_time()
        self._idle = 0  # threads waiting for a task, or about to (guarded by _lock, as is the CPU look)
        self._aside = 0  # threads waiting to retry a task (guarded by _lock)
        # The stall watch: when a poster last took a task (or one was added
        # for a stall), whether results wait unwatched, and the watch thread.
        self._last_take = time.monotonic()
        self._watching = False
        self._stalls = 0  # threads added for stalls while results have waited without a break
        self._watch_wake = threading.Condition(self._lock)
        self._watcher: Optional[threading.Thread] = None

    def submit(self, task: Task) -> None:
        """Run ``task()`` on a poster thread."""
        self._queue.put((time.monotonic(), task))
        if self._queue.qsize() > self._idle:
            if self._at_work_or_idle() < self._base:
                self._add_thread_if_behind(waited=0.0)
            elif not self._watching:
                self._watch()

    def _at_work_or_idle(self) -> int:
        """Threads, less those waiting to retry (at most BASE_THREADS of them)."""
        return len(self._threads) - min(self._aside, self._base)

    def step_aside(self, wait: Callable[[], None]) -> None:
        """Run ``wait()`` (a task waiting to retry) with this thread not counted as at work.

        Called from a task. On a poster thread, while it waits, queued tasks
        may get another thread as if this one were not there (up to
        :data:`BASE_THREADS` such threads; beyond, as results waiting
        :data:`GROW_AFTER_WAIT` do). Elsewhere (a task run by the thread
        that submitted it, when no poster could start) it just waits.
        """
        if threading.current_thread() not in self._threads:
            wait()
            return
        with self._lock:
            self._aside += 1
        try:
            if self._queue.qsize() > self._idle:
                self._add_thread_if_behind(waited=GROW_AFTER_WAIT)
            wait()
        finally:
            with self._lock:
                self._aside -= 1

    def _watch(self) -> None:
        """Have the watch thread look for a stall while results wait."""
        with self._lock:
            if self._watching or self._closed:
                return
            self._watching = True
            if self._watcher is None:
                watcher = threading.Thread(target=self._watch_stalls, name=f"{self._name}-watch", daemon=True)
                try:
                    watcher.start()
                except RuntimeError:  # no thread to spare: the posters' own growth still applies
                    self._watching = False
                    return
                self._watcher = watcher
            else:
                self._watch_wake.notify()

    def _watch_stalls(self) -> None:
        while True:
            with self._lock:
                stall = self._next_stall_locked()
            if stall is None:
                return
            stalled, waiting, in_a_row = stall
            # One warning per spell of stalls; the threads added after it at debug.
            log.log(logging.WARNING if in_a_row == 1 else logging.DEBUG,
                    "no result posted in %.2fs while %d wait: a post is stalled; one more poster thread",
                    stalled, waiting)

    def _next_stall_locked(self) -> "Optional[tuple[float, int, int]]":
        """Wait (holding ``_lock``) for a stall and add a thread for it; None once closed.

        Returns how long no task was taken, how many wait, and how many
        threads this spell of waiting results has added so far.
        """
        wake, queue_size = self._watch_wake, self._queue.qsize
        while not self._closed:
            if not self._watching:
                wake.wait()
                continue
            if queue_size() <= self._idle:  # nothing waits untaken any more
                self._watching, self._stalls = False, 0
                continue
            now = time.monotonic()
            due = self._last_take + STALL_SECONDS
            if now < due:
                wake.wait(due - now)
                continue
            # Results wait and no poster took one for a stall's length: every
            # poster is stuck on a post. One more, whatever the CPU.
            stalled, self._last_take = now - self._last_take, now
            if len(self._threads) < self._max and self._start_thread_locked() is None:
                self._stalls += 1
                return stalled, queue_size(), self._stalls
        return None

    def _start_thread_locked(self) -> Optional[str]:
        """Start a poster thread (hold ``_lock``); why it could not, or None."""
        thread = self._new_thread(self._serve)
        try:
            thread.start()
        except RuntimeError as exc:  # the process may not start more threads
            return str(exc)
        self._threads.append(thread)
        self._idle += 1  # counted as idle until it has taken a task
        return None

    def _add_thread_if_behind(self, waited: float) -> None:
        with self._lock:
            if not (self._queue.qsize() > self._idle and not self._closed and self._may_grow_locked(waited)):
                return
            reason = self._start_thread_locked()
            if reason is None:
                return
            alone = not self._threads
        log.warning("could not start a result poster thread (%s)%s", reason,
                    "; posting from this thread" if alone else "; the others carry on")
        if alone:  # nobody else would ever take what is queued
            self._drain_here()

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

    def _may_grow_locked(self, waited: float) -> bool:
        if len(self._threads) >= self._max:
            return False
        if self._at_work_or_idle() < self._base:
            return True
        if waited < GROW_AFTER_WAIT:
            return False
        # One thread more per look at the CPU, and only if that look, over
        # the time since the last one, found the process mostly idle.
        now = time.monotonic()
        elapsed = now - self._look_at
        if elapsed < CPU_LOOK_SECONDS:
            return False
        cpu = time.process_time()
        share = (cpu - self._look_cpu) / elapsed
        self._look_at, self._look_cpu = now, cpu
        # A look over a long quiet spell says nothing about this burst.
        return elapsed <= 4 * CPU_LOOK_SECONDS and share < IDLE_CPU_SHARE

    def shutdown(self, wait: bool = True, timeout: Optional[float] = None) -> None:
        """Let every poster post what was queued and stop, and the watch thread end."""
        super().shutdown(wait=False)
        with self._lock:
            self._watch_wake.notify_all()
            watcher = self._watcher
        if wait:
            super().shutdown(wait=True, timeout=timeout)
            if watcher is not None:
                watcher.join(timeout)

    def _serve(self) -> None:
        get, lock = self._queue.get, self._lock
        while True:
            try:  # the base threads wait without a timeout (no wake-ups while idle)
                item = get(timeout=IDLE_EXIT_SECONDS if len(self._threads) > self._base else None)
            except queue.Empty:
                with lock:
                    if len(self._threads) > self._base and not self._closed:
                        self._threads.remove(threading.current_thread())
                        self._idle -= 1
                        return
                continue
            with lock:
                self._idle -= 1
                self._last_take = time.monotonic()
            if item is None:
                return
            queued, task = item
            # Tasks queued while this one was taken and no other thread was
            # idle would otherwise wait for it: start a thread for them.
            if self._queue.qsize() > self._idle:
                self._add_thread_if_behind(waited=time.monotonic() - queued)
            task()
            with lock:
                self._idle += 1
