"""Log lines from hundreds of job threads: the standard library's queue handler and listener.

:class:`logging.StreamHandler` writes and flushes each line under one lock;
hundreds of job threads logging "Started." and "Finished." queue on it, and
each hand-over costs a wake-up and the GIL. Here a thread that logs formats
its record (after the handler's filters, so the API key is already masked)
and puts the line on a :class:`queue.SimpleQueue`
(:class:`logging.handlers.QueueHandler`); one
:class:`logging.handlers.QueueListener` thread takes the lines and writes
them, everything queued at that moment in one write and one flush
(:class:`LineWriter`). No lock is taken on the way in: the handler's lock
is a no-op (:meth:`QueueingStreamHandler.createLock`), as there is nothing
to guard between formatting a record and putting it on a thread-safe queue.

Each write costs the listener a wake-up and a turn at the GIL. Hundreds of
job threads log at a wave's end within a few milliseconds; written as they
came (1,024 threads, a line each every 0.1 s), that was a write every 7.5
lines, and 15 % more CPU a line than the lock-free handler this one
replaced. So after the first line of a quiet spell the listener waits
``LINGER`` (5 ms) before it writes, and the lines logged meanwhile go out
in the same write (130 lines a write there, and the CPU of the handler it
replaced); a line a thread waits on (WARNING and worse, a flush) cuts the
wait short.

What a user can rely on:

- every line is written once, whole, and each thread's lines in the order
  it logged them (one queue, one writer);
- a record at ``sync_level`` or above (WARNING: errors, ``LOST`` lines) is on
  the stream, together with every line queued before it, when the call that
  logged it returns; a stream that takes longer than ``wait_limit`` to accept
  it lets the call go on (the line stays queued);
- so is any line logged from the main thread (``sync_main_thread``): the
  thread that tells a program's story in order, start-up, shutdown, a local
  test job, a script, and prints in between. A line of a job thread may
  reach the stream a few milliseconds after the call returned, so after a
  ``print`` of that thread that followed it: call :meth:`flush` (or
  ``slotworker.logs.flush()``) before such a print to keep them in order;
- :meth:`~QueueingStreamHandler.flush` returns once every line queued before
  it is written; :func:`logging.shutdown` (at exit, and in the worker before
  its ``os._exit``) flushes and closes the handler, and an :mod:`atexit` hook
  of this module stops every listener as a backstop;
- with no listener to take them (before :meth:`~QueueingStreamHandler.start`,
  after :meth:`~QueueingStreamHandler.stop`, in the child of :func:`os.fork`,
  where the parent's listener thread does not exist, or if the listener
  thread died) the thread that logs writes its line itself, under the
  writer's lock, after any lines still queued.
"""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import os
import queue
import sys
import threading
import time
import weakref
from typing import Any, List, Optional, TextIO

#: At most this many lines go out in one write, so a flood does not hold back
#: a batch's lines (and the threads waiting on them) behind an ever longer write.
MAX_BATCH = 512
#: How long a WARNING (or a flush) waits for its line to be written before it
#: gives up waiting: a stream that accepts nothing for this long is stuck, and
#: waiting longer would only hang the thread that logged.
WAIT_LIMIT = 10.0
#: How long the listener waits after the first line of a quiet spell before
#: writing, so the lines other threads log meanwhile go out in the same write.
#: Each write costs the listener a wake-up and a turn at the GIL; hundreds of
#: job threads logging at a wave's end would otherwise pay one every few lines.
#: A line that a thread waits on (WARNING and worse, a flush) cuts it short.
LINGER = 0.005
#: How often a waiting thread looks whether the listener thread is still there.
_LOOK_EVERY = 0.25


class _Line:
    """One queued line: its text, the record it came from, and an Event if a thread waits for it."""

    __slots__ = ("text", "record", "written")

    def __init__(self, text: str, record: Optional[logging.LogRecord],
                 written: Optional[threading.Event]) -> None:
        self.text = text
        self.record = record  # for Handler.handleError, if the write fails
        self.written = written


class _NoLock:
    """The lock of a handler that needs none (``Handler.handle`` holds it around ``emit``).

    With a real lock, a thread pre-empted while it formats its record would
    hold up every other thread's log call until it got the GIL back.
    """

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return True

    def release(self) -> None:
        pass

    def __enter__(self) -> bool:
        return True

    def __exit__(self, *exc: Any) -> None:
        return None


class LineWriter(logging.Handler):
    """Writes queued lines to a stream, as many as are queued in one write: the listener's handler.

    The listener thread calls :meth:`emit` (``Handler.handle`` holds this
    handler's lock around it). Other threads take the same lock to write
    themselves when there is no listener (:meth:`drain`), or to write what
    the listener holds (:meth:`flush`).
    """

    def __init__(self, stream: TextIO, lines: "queue.SimpleQueue[Any]") -> None:
        super().__init__()
        self.stream = stream
        self.lines = lines
        self._pending: List[str] = []
        self._waiting: List[threading.Event] = []
        self._record: Optional[logging.LogRecord] = None  # one of the pending lines', for error reports

    def emit(self, record: Any) -> None:
        """Take one queued line; write the batch once nothing more is queued or someone waits on it."""
        line: _Line = record
        self._add(line)
        if line.written is not None or len(self._pending) >= MAX_BATCH or self.lines.empty():
            self.write_pending()

    @property
    def holding(self) -> bool:
        """True while lines taken are not yet written (the listener is inside a batch)."""
        return bool(self._pending) or bool(self._waiting)

    def _add(self, line: _Line) -> None:
        if line.text:
            self._pending.append(line.text)
            if self._record is None:
                self._record = line.record
        if line.written is not None:
            self._waiting.append(line.written)

    def write_pending(self) -> None:
        """Write the lines taken so far in one write, then tell the threads waiting on them.

        Called with this handler's lock held.
        """
        pending, self._pending = self._pending, []
        waiting, self._waiting = self._waiting, []
        record, self._record = self._record, None
        if pending:
            try:
                self.stream.write("".join(pending))
                self.stream.flush()
            except Exception:
                self.handleError(record or logging.makeLogRecord({"msg": pending[0]}))
        for event in waiting:  # set even when the write failed: waiting longer would not help
            event.set()

    def drain(self) -> None:
        """Write every line still queued. Called with the lock held when no listener takes lines."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            if line is None:  # QueueListener's stop sentinel, left by a listener that is gone
                continue
            self._add(line)
            if len(self._pending) >= MAX_BATCH:
                self.write_pending()
        self.write_pending()

    def flush(self) -> None:
        """Write the lines taken and not yet written, then flush the stream."""
        with self.lock:  # type: ignore[union-attr]
            self.write_pending()
            if self.stream is not None and hasattr(self.stream, "flush"):
                self.stream.flush()

    def reset_in_child(self, lines: "queue.SimpleQueue[Any]") -> None:
        """After :func:`os.fork`, in the child: the parent's lines are the parent's to write."""
        self.createLock()  # the parent's listener may have held the old one at the fork
        self.lines = lines
        self._pending, self._waiting, self._record = [], [], None


class _Listener(logging.handlers.QueueListener):
    """A :class:`~logging.handlers.QueueListener` that knows its thread (to wait on it, or see it is gone)
    and lets lines gather for ``linger`` seconds before a write."""

    def __init__(self, lines: "queue.SimpleQueue[Any]", writer: LineWriter, linger: float) -> None:
        super().__init__(lines, writer)
        self.writer = writer
        self.linger = linger
        self.thread: Optional[threading.Thread] = None
        self._running = threading.Event()
        #: Set by a thread that queued a line it waits on: ends the listener's linger.
        self.nudge = threading.Event()

    def start(self) -> None:
        """Start the thread; return once it takes lines (so :attr:`thread` is set)."""
        super().start()
        self._running.wait()

    def dequeue(self, block: bool) -> Any:
        """The documented hook the listener's thread calls for each line; names the thread on the first."""
        if self.thread is None:
            thread = threading.current_thread()
            thread.name = "slotworker-log"
            self.thread = thread
            self._running.set()
        # A quiet spell: nothing taken and not written, nothing queued. (After
        # a full batch the queue still holds lines: no wait then.)
        lingers = self.linger > 0 and not self.writer.holding and self.queue.empty()
        if lingers:
            self.nudge.clear()  # before the get: a waited-on line queued after it ends the linger
        line = self.queue.get(block)
        if lingers and line is not None and line.written is None:
            # The first line since the last write: let the lines of the other
            # threads logging now queue behind it (a sleep, not woken by each put).
            self.nudge.wait(self.linger)
        return line


class QueueingStreamHandler(logging.handlers.QueueHandler):
    """A :class:`~logging.handlers.QueueHandler` whose own listener writes the lines to ``stream``.

    Call :meth:`start` once it is configured (formatter, filters); until then,
    and after :meth:`stop`, each thread writes its own lines.
    """

    terminator = "\n"

    def __init__(self, stream: Optional[TextIO] = None, sync_level: int = logging.WARNING,
                 wait_limit: float = WAIT_LIMIT, linger: Optional[float] = None,
                 sync_main_thread: bool = True) -> None:
        super().__init__(queue.SimpleQueue())
        self.sync_level = sync_level
        self.sync_main_thread = sync_main_thread
        self.wait_limit = wait_limit
        self.linger = LINGER if linger is None else linger
        self.writer = LineWriter(sys.stderr if stream is None else stream, self.queue)
        self.listener: Optional[_Listener] = None  # (QueueHandler's attribute since 3.12)
        # The listener's thread, kept after stop() so a thread can wait for it to finish.
        self._consumer: Optional[threading.Thread] = None
        # True while a listener takes the lines: read without a lock on every emit.
        self._live = False
        self._started = False
        self._state = threading.RLock()  # start and stop; never taken on the way in

    @property
    def stream(self) -> TextIO:
        """The stream the lines are written to."""
        return self.writer.stream

    def createLock(self) -> None:
        """A no-op lock: emit formats a record and puts it on a thread-safe queue, nothing to guard."""
        self.lock = _NoLock()  # type: ignore[assignment]

    def start(self) -> None:
        """Start the listener thread (once; a stopped handler stays with direct writes)."""
        with self._state:
            if self._started:
                return
            self._started = True
            listener = _Listener(self.queue, self.writer, self.linger)  # type: ignore[arg-type]
            listener.start()
            self.listener, self._consumer = listener, listener.thread
            self._live = True
        _track(self)

    def stop(self) -> None:
        """Write every queued line and stop the listener; from then on threads write their own lines."""
        with self._state:
            listener, self.listener = self.listener, None
            if listener is None:
                return
            thread = listener.thread
            running = thread is not None and thread is not threading.current_thread() and thread.is_alive()
            if running:
                # The sentinel is queued before threads turn to writing
                # directly: one that then waits for the listener to finish
                # (in _write_directly; a signal handler on this very thread
                # too) waits for a listener that is finishing. Hence not
                # QueueListener.stop(), which queues it only as it joins.
                listener.enqueue_sentinel()
                listener.nudge.set()  # no linger: write up to the sentinel now
            self._live = False
            if running:
                thread.join()  # it writes what was queued before its sentinel
            self._write_directly(None)  # and what came after, from threads that saw it live
            self._consumer = None

    def close(self) -> None:
        """Stop the listener (writing what is queued), then close as any handler."""
        try:
            self.stop()  # (each write is flushed: nothing is left in the stream's buffer)
        finally:
            super().close()

    def flush(self) -> None:
        """Return once every line queued before the call is written, and the stream flushed."""
        if self._live and self._consumer is not threading.current_thread():
            self.enqueue(_Line("", None, threading.Event()))  # waits until the listener reached it
        elif not self._live:
            self._write_directly(None)
        self.writer.flush()

    def prepare(self, record: logging.LogRecord) -> Any:
        """Format the record here, in the thread that logs it, into the line to queue.

        The listener then only writes; and a record's arguments are rendered
        as they were when it was logged. The record itself is not changed (other
        handlers of the logger may see it after this one).
        """
        text = self.format(record) + self.terminator
        waits = record.levelno >= self.sync_level or (
            self.sync_main_thread and threading.current_thread() is threading.main_thread())
        return _Line(text, record, threading.Event() if waits else None)

    def enqueue(self, record: Any) -> None:
        """Queue the line for the listener, or write it here if no listener takes lines."""
        line: _Line = record
        if self._live:
            self.queue.put_nowait(line)
            if self._live:  # looked at again: stop() may have drained the queue since the first look
                if line.written is not None:
                    listener = self.listener
                    if listener is not None:
                        listener.nudge.set()
                    self._wait_written(line)
                return
            line = None  # type: ignore[assignment]  # queued: written below, with what came before it
        self._write_directly(line)

    def _wait_written(self, line: _Line) -> None:
        assert line.written is not None
        thread = self._consumer
        if thread is None or thread is threading.current_thread():
            return  # the listener itself logged (it must not wait on itself); it writes the line next
        deadline = time.monotonic() + self.wait_limit
        while not line.written.wait(_LOOK_EVERY):
            if not thread.is_alive():
                # Stopped (and stop() wrote the line) or died: write what is queued here, from now on.
                self._live = False
                self._write_directly(None)
                return
            if time.monotonic() >= deadline:
                return  # the stream is stuck; the line stays queued for when it moves

    def _write_directly(self, line: Optional[_Line]) -> None:
        """Write the queued lines, then ``line``, in this thread, under the writer's lock."""
        consumer = self._consumer
        if consumer is not None and consumer is not threading.current_thread():
            consumer.join()  # a stopping listener writes up to its sentinel first: order, and no line twice
        with self.writer.lock:  # type: ignore[union-attr]
            self.writer.drain()
            if line is not None:
                self.writer._add(line)
                self.writer.write_pending()

    def _after_fork_in_child(self) -> None:
        # The parent's listener thread does not exist here, and the lines
        # queued or held for it are the parent's to write: write directly,
        # from a fresh queue and lock.
        self._state = threading.RLock()
        self._live = False
        self.listener = None
        self._consumer = None
        self.queue = queue.SimpleQueue()
        self.writer.reset_in_child(self.queue)


# -- every started handler: stopped at exit, and reset in a forked child -------------------
_handlers: "weakref.WeakSet[QueueingStreamHandler]" = weakref.WeakSet()
_handlers_lock = threading.Lock()
_hooked = False
_held_at_fork: List[LineWriter] = []


def _track(handler: QueueingStreamHandler) -> None:
    """Remember a started handler; install the exit and fork hooks with the first one."""
    global _hooked
    with _handlers_lock:
        _handlers.add(handler)
        if _hooked:
            return
        _hooked = True
    # Registered after logging's own atexit hook (logging.shutdown), so it runs
    # before it: listeners stop while the interpreter is whole.
    atexit.register(stop_all)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                            after_in_child=_after_fork_in_child)


def stop_all() -> None:
    """Stop every started handler's listener, writing what is queued (the atexit backstop)."""
    for handler in list(_handlers):
        try:
            handler.stop()
            handler.writer.flush()
        except Exception:  # at exit: one broken stream must not keep the others from being written
            pass


def _before_fork() -> None:
    # Hold each listener between two writes, so the child does not inherit a
    # stream (and its buffer's lock) in the middle of one. Bounded: a stuck
    # stream must not hang the fork.
    for handler in list(_handlers):
        writer = handler.writer
        if handler._live and writer.lock.acquire(timeout=1.0):  # type: ignore[union-attr]
            _held_at_fork.append(writer)


def _after_fork_in_parent() -> None:
    while _held_at_fork:
        _held_at_fork.pop().lock.release()  # type: ignore[union-attr]


def _after_fork_in_child() -> None:
    global _handlers_lock
    _handlers_lock = threading.Lock()  # a parent's thread may have held it at the fork
    _held_at_fork.clear()  # those locks are replaced below
    for handler in list(_handlers):
        handler._after_fork_in_child()
