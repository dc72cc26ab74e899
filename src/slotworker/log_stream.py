"""A stream handler that hundreds of job threads can log through at once.

:class:`logging.StreamHandler` writes and flushes each line under one lock.
With hundreds of job threads each logging "Started." and "Finished.", they
queue on that lock, and each hand-over costs a wake-up and the GIL.

:class:`CombiningStreamHandler` formats a record in the thread that logs it
and appends the line to a queue. The thread then tries the write lock
without waiting: if it gets it, it writes everything queued in one write and
one flush; if another thread holds it, that thread writes the line for it,
because a writer only lets go once the queue is empty. So no thread waits
for another's write, and under load many lines go out in one system call.
Alone, a thread writes its own line before ``emit`` returns, as before.

A record at ``sync_level`` or above (by default WARNING: errors, ``LOST``
lines) waits for the lock, so it is written before ``emit`` returns,
together with every line queued before it. :meth:`flush` (which
:func:`logging.shutdown` calls, also before the worker's ``os._exit``)
writes whatever is queued. Lines are written in the order they were queued.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Deque, Optional, TextIO, Tuple


class CombiningStreamHandler(logging.StreamHandler):
    """A :class:`logging.StreamHandler` whose threads never wait for each other's writes."""

    def __init__(self, stream: Optional[TextIO] = None, sync_level: int = logging.WARNING) -> None:
        super().__init__(stream)
        self.sync_level = sync_level
        self._queued: Deque[Tuple[str, logging.LogRecord]] = collections.deque()
        self._write_lock = threading.Lock()

    def handle(self, record: logging.LogRecord) -> bool:  # type: ignore[override]
        """Filter, then :meth:`emit`, without the handler's lock (``emit`` needs none)."""
        passed = self.filter(record)
        if isinstance(passed, logging.LogRecord):  # Python 3.12: a filter may return a new record
            record = passed
        if passed:
            self.emit(record)
        return bool(passed)

    def emit(self, record: logging.LogRecord) -> None:
        """Queue the formatted line; write the queue unless another thread is writing it."""
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        self._queued.append((line, record))
        self._write_queued(wait=record.levelno >= self.sync_level)

    def flush(self) -> None:
        """Write every queued line and flush the stream."""
        self._write_queued(wait=True)
        with self._write_lock:
            if self.stream and hasattr(self.stream, "flush"):
                self.stream.flush()

    def _write_queued(self, wait: bool) -> None:
        queued = self._queued
        lock = self._write_lock
        # The check after release closes the gap where a thread queued a line
        # while this one held the lock, failed to take it, and left.
        while (queued or wait) and lock.acquire(wait):
            wait = False
            try:
                while queued:  # (only the lock's holder takes lines out)
                    self._write([queued.popleft() for _ in range(len(queued))])
            finally:
                lock.release()

    def _write(self, batch: "list[Tuple[str, logging.LogRecord]]") -> None:
        stream = self.stream
        try:
            stream.write("".join(line for line, _ in batch))
            stream.flush()
        except Exception:
            self.handleError(batch[0][1])
