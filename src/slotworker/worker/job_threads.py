"""The threads jobs run on: one per slot in use, started when first needed, then reused.

Why not :class:`concurrent.futures.ThreadPoolExecutor`: nothing waits on a
job's outcome (each job posts its own result), so its per-job ``Future``
(a Condition and an Event each) is pure cost, and it starts a new thread
whenever no thread is idle at the moment of a submit — in a burst, that is
whenever a thread has given its slot back but not yet returned to the queue,
so the pool creeps towards its maximum. Here the number of threads follows
the slots: a job is submitted holding its slot, and a thread is started
only while there are fewer threads than slots in use.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

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
            with self._lock:
                if len(self._threads) < busy and not self._closed:
                    try:
                        self._start_thread_locked(self._serve)
                    except RuntimeError as exc:
                        if not self._threads:  # nothing would ever take the job
                            raise
                        # Queued: a thread already started takes it when free.
                        log.warning("could not start a job thread (%s); the job waits for one", exc)

    def _serve(self) -> None:
        get, target = self._queue.get, self._target
        while True:
            item = get()
            if item is None:
                return
            target(*item)
