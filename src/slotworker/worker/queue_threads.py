"""What the job threads and the poster threads share: threads serving one queue.

:class:`QueueThreads` owns the queue, the list of threads and their stop: a
``None`` on the queue for each thread, after everything queued before it.
Subclasses decide when to start a thread and what an item is.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, List, Optional


class QueueThreads:
    """Threads that take items from one queue until each takes a ``None``."""

    def __init__(self, name: str) -> None:
        self._name = name
        # Work items, or None: one per thread, to stop it.
        self._queue: "queue.SimpleQueue[Optional[Any]]" = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards _threads and _closed (and what a subclass adds)
        self._threads: List[threading.Thread] = []
        self._closed = False

    def __len__(self) -> int:
        """Threads started so far."""
        return len(self._threads)

    def _start_thread_locked(self, serve: Callable[[], None]) -> None:
        """Start a daemon thread named after this group, running ``serve`` (hold ``_lock``).

        It is listed before it starts, so that it counts itself from its
        first look at the list; a start that fails (RuntimeError: the process
        may not start more threads) unlists it and raises. Nobody sees the
        list meanwhile: it is read and changed under ``_lock``.
        """
        thread = threading.Thread(target=serve, name=f"{self._name}_{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        try:
            thread.start()
        except BaseException:
            self._threads.remove(thread)
            raise

    def shutdown(self, wait: bool = True, timeout: Optional[float] = None) -> None:
        """Let every thread finish what was queued and stop (idempotent); ``wait`` joins them."""
        with self._lock:
            if not self._closed:
                self._closed = True
                for _ in self._threads:
                    self._queue.put(None)
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join(timeout)
