"""The threads that post final results, so a job's thread is free once its handler returns.

A job thread hands its final result (already encoded) to :class:`ResultPoster`
and goes back for its next job; a poster thread sends it, retrying as
:func:`~.platform_client.deliver` does, and then ends the job (its slot is
given back only then, so a job counts as running until its result is in).

Posting from a few threads rather than from every job's own is cheaper at
high concurrency: the HTTP work of hundreds of jobs runs on threads that are
already awake, instead of on hundreds of threads that each wake, take the
GIL and contend for it a few times per request.

How many: a poster is started whenever results wait and no poster is idle to
take them, so there are as many as the platform's latency needs (a remote
platform answering in 50 ms needs 25 for 500 results a second; the local one
needs one or two), never one per job, and one slow or retried post never holds
up the results queued behind it.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, List, Optional

Task = Callable[[], None]


class ResultPoster:
    """Runs posting tasks on a pool of threads that grows while tasks wait.

    Each task must not raise: a job's own code catches everything.
    """

    def __init__(self, name: str = "slotworker-post") -> None:
        self._name = name
        # Tasks, or None: one per thread, to stop it.
        self._queue: "queue.SimpleQueue[Optional[Task]]" = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards _idle, _threads and _closed
        self._idle = 0  # threads waiting for a task, or about to
        self._threads: List[threading.Thread] = []
        self._closed = False

    def __len__(self) -> int:
        """Threads started so far."""
        return len(self._threads)

    def submit(self, task: Task) -> None:
        """Run ``task()`` on a poster thread."""
        self._queue.put(task)
        if self._queue.qsize() > self._idle:
            self._add_thread_if_behind()

    def _add_thread_if_behind(self) -> None:
        with self._lock:
            if self._queue.qsize() > self._idle and not self._closed:
                thread = threading.Thread(target=self._serve, name=f"{self._name}_{len(self._threads)}",
                                          daemon=True)
                self._threads.append(thread)
                self._idle += 1  # counted as idle until it has taken a task
                thread.start()

    def _serve(self) -> None:
        get, lock = self._queue.get, self._lock
        while True:
            task = get()
            with lock:
                self._idle -= 1
            if task is None:
                return
            # Tasks queued while this one was taken and no other thread was
            # idle would otherwise wait for it: start a thread for them.
            if self._queue.qsize() > self._idle:
                self._add_thread_if_behind()
            task()
            with lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, timeout: Optional[float] = None) -> None:
        """Let every queued task run and stop the threads (idempotent); ``wait`` joins them."""
        with self._lock:
            if not self._closed:
                self._closed = True
                for _ in self._threads:
                    self._queue.put(None)
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join(timeout)
