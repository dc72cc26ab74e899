"""The threads jobs run on: one per slot in use, started when first needed, then reused.

Why not :class:`concurrent.futures.ThreadPoolExecutor`: nothing waits on a
job's outcome (each job posts its own result), so its per-job ``Future``
(a Condition and an Event each) is pure cost, and it starts a new thread
whenever no thread is idle at the moment of a submit — in a burst, that is
whenever a thread has given its slot back but not yet returned to the queue,
so the pool creeps towards its maximum. Here the number of threads follows
the slots: a job is submitted holding its slot, and a thread is started
only while there are fewer threads than slots in use.

The submitting thread starts the threads a submit is missing, one after
another. In a burst that is the first wave only (threads are reused after),
and ``Thread.start`` waits for each new thread to run: about 0.14 s for the
first 1,024 jobs. Starting them in a chain instead (each new thread starting
the next) took that off the fetch thread but was no faster end to end
(t99 at 1,024 slots within the runs' spread of this), so it was dropped.
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
        """Start threads until there are ``busy`` (or the process may start no more)."""
        with self._lock:
            while len(self._threads) < busy and not self._closed:
                try:
                    self._start_thread_locked(self._serve)
                except RuntimeError as exc:
                    if not self._threads:  # nothing would ever take the job
                        raise
                    # Queued: a thread already started takes it when free.
                    log.warning("could not start a job thread (%s); queued jobs wait for one", exc)
                    return

    def _serve(self) -> None:
        get, target = self._queue.get, self._target
        while True:
            item = get()
            if item is None:
                return
            target(*item)
