"""The threads jobs run on: one per slot in use, started when first needed, then reused.

Why not :class:`concurrent.futures.ThreadPoolExecutor`: nothing waits on a
job's outcome (each job posts its own result), so its per-job ``Future``
(a Condition and an Event each) is pure cost, and it starts a new thread
whenever no thread is idle at the moment of a submit — in a burst, that is
whenever a thread has given its slot back but not yet returned to the queue,
so the pool creeps towards its maximum. Here the number of threads follows
the slots: a job is submitted holding its slot, and a thread is started
only while there are fewer threads than slots in use.

Threads are started in a chain: the submitting thread starts one, and each
new thread starts the next before it takes a job, until there are as many
as the slots in use. ``Thread.start`` waits until the new thread runs, which
behind hundreds of job threads taking the GIL is a while: the first wave of
1,024 jobs took the fetch thread 0.14 s to hand out when it started every
thread itself, and the next take waited for that.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Tuple

from .queue_threads import QueueThreads

log = logging.getLogger("slotworker")


class JobThreads(QueueThreads):
    """Runs ``target(*args)`` for each submitted job on a reused thread.

    ``target`` must not raise: a job's own code catches everything.
    """

    def __init__(self, target: Callable[..., None], name: str = "slotworker-job") -> None:
        super().__init__(name)
        self._target = target
        # Guarded by _lock: the threads wanted (the most slots in use a
        # submit has said), and whether a chain of starts is under way.
        self._wanted = 0
        self._chaining = False

    def submit(self, *args: Any, busy: int) -> None:
        """Run ``target(*args)`` on a thread; ``busy`` is the slots in use, this job's included."""
        self._queue.put(args)
        if len(self._threads) < busy:
            self._want(busy)

    def submit_all(self, jobs: Iterable[Tuple[Any, ...]], busy: int) -> None:
        """Run ``target(*args)`` for each ``args`` in ``jobs``; ``busy``: the slots in use, theirs included."""
        put = self._queue.put
        for args in jobs:
            put(args)
        if len(self._threads) < busy:
            self._want(busy)

    def _want(self, busy: int) -> None:
        """Have ``busy`` threads: start the first of those missing here, the rest in a chain."""
        with self._lock:
            if busy > self._wanted:
                self._wanted = busy
            if self._chaining or self._closed or len(self._threads) >= self._wanted:
                return
            try:
                self._start_thread_locked(self._serve)
            except RuntimeError as exc:
                if not self._threads:  # nothing would ever take the job
                    raise
                # Queued: a thread already started takes it when free.
                log.warning("could not start a job thread (%s); the job waits for one", exc)
                return
            self._chaining = True

    def _start_next(self) -> None:
        """A thread of the chain starts the next one, if more are wanted."""
        with self._lock:
            if self._closed or len(self._threads) >= self._wanted:
                self._chaining = False
                return
            try:
                self._start_thread_locked(self._serve)
            except RuntimeError as exc:
                self._chaining = False
                log.warning("could not start a job thread (%s); queued jobs wait for one", exc)

    def _serve(self) -> None:
        self._start_next()
        get, target = self._queue.get, self._target
        while True:
            item = get()
            if item is None:
                return
            target(*item)
