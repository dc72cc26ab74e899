"""The deployed worker's lifecycle: start its threads, run, shut down.

:class:`Worker` owns the fetch thread (:mod:`~slotworker.worker.take_loop`), the job
job threads, the heartbeat and the stop channel. Shutdown (SIGTERM/SIGINT,
``refresh_worker``, or :meth:`Worker.shutdown`) stops taking, lets a take in
flight land and every job already taken finish and report within the grace
period, then returns. A second signal exits at once.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import socket
import threading
import time
from typing import Any, Optional

from .. import slots as slots_module
from .._version import __version__
from .platform_client import PlatformClient
from .interruption import Registry, Watchdog
from .fitness import run_fitness_checks
from .heartbeat import Heartbeat
from .job_runner import JobRunner
from .result_poster import ResultPoster
from .lifecycle import Lifecycle
from .take_loop import TakeLoop
from ..config import Options
from .stop_channel import StopChannel

log = logging.getLogger("slotworker")

#: Without a wake-up descriptor (signal handlers not ours, or not the main
#: thread): the longest delay, in seconds, before the waiting thread looks again.
SIGNAL_POLL = 0.1
#: With one: how long the main thread sleeps between two looks at the state.
IDLE_LOOK = 30.0


def _poke(sock: Optional[socket.socket]) -> None:
    """Write a byte to wake whoever waits on the other end (if anyone; never blocks)."""
    if sock is not None:
        try:
            sock.send(b"\0")
        except OSError:  # full (a wake-up is pending anyway) or closed (nobody waits)
            pass


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except OSError:  # nothing more to read
        pass


class Worker:
    """One worker process's job loop against the platform in ``options.settings``."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.settings = options.settings
        if not self.settings.deployed:
            raise ValueError("no job-take URL: set RUNPOD_WEBHOOK_GET_JOB (or run in local mode)")
        self.grace = options.shutdown_grace
        self.lifecycle = Lifecycle()
        self.registry = Registry()
        self.watchdog = Watchdog()
        self.client = PlatformClient(self.settings)
        self.slots = slots_module.SlotCounter(0)
        self.poster = ResultPoster(answer_seconds=self.client.answer_seconds)
        self.runner = JobRunner(options, self.client, self.registry, self.watchdog, self.lifecycle,
                                on_refresh=self._refresh, poster=self.poster)
        self.take_loop = TakeLoop(options, self.client, self.runner, self.slots, self.lifecycle)
        self.heartbeat = Heartbeat(self.client, self.settings.ping_interval, self.take_loop.in_progress_ids)
        self.stop_channel = StopChannel(self.client, self.registry)
        self.fetch_thread: Optional[threading.Thread] = None
        #: Set when the fetch loop has returned: no take will be sent any more.
        #: (Waiting on it, rather than joining the thread, leaves the join to
        #: run(): two threads joining one thread at once trip PyPy's threading.)
        self.fetch_stopped = threading.Event()
        self._signals = 0
        self._handles_signals = False
        self._wake_main: Optional[socket.socket] = None  # written to wake the main thread
        self.lost = 0  # jobs still running when the grace period ran out
        # The concurrency starts at 1, as runpod's does; the modifier raises it.
        self.slots.resize(1)

    # -- control ----------------------------------------------------------------
    def shutdown(self, reason: str = "requested", grace: Optional[float] = None) -> None:
        """Stop taking jobs; running ones get ``grace`` seconds (idempotent, thread-safe)."""
        if self.lifecycle.begin_shutdown(self.grace if grace is None else grace):
            log.info("shutting down (%s): no new jobs; %d running get up to %.0fs to finish",
                     reason, len(self.registry), self.grace if grace is None else grace)
        self.take_loop.wake()
        _poke(self._wake_main)

    def _refresh(self, job_id: str) -> None:
        self.shutdown(f"refresh_worker set by job {job_id}")

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: graceful shutdown; a second one: exit at once."""
        def handle(signum: int, frame: Any) -> None:
            self._signals += 1
            if self._signals > 1:
                log.warning("second signal %d: exiting now", signum)
                logging.shutdown()
                os._exit(128 + signum)
            # Not here: the handler runs on the main thread between two of its
            # bytecodes, maybe while it holds the fetch Condition's lock or an
            # Event's (both plain Locks); taking them again would deadlock.
            threading.Thread(target=self.shutdown, args=(f"signal {signal.Signals(signum).name}",),
                             name="slotworker-signal", daemon=True).start()
        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
        self._handles_signals = True

    # -- running ----------------------------------------------------------------
    def run(self) -> int:
        """Run until shutdown completes; returns the process exit code.

        0 when every job taken reported (or was stopped by the platform);
        1 when jobs were still running when the grace period ran out, or a
        final result could not be posted (each is logged by id as lost).
        A failing fitness check ends the process with exit code 1 before
        the first take.
        """
        run_fitness_checks(self.settings)
        slots_module.warn_if_fallback()
        log.info("slotworker %s | worker %s | slots: %s backend | take policy: %s",
                 __version__, self.settings.worker_id, slots_module.BACKEND, self.take_loop.policy.name)
        self.heartbeat.start()
        self.stop_channel.start()
        self.fetch_thread = threading.Thread(target=self._fetch, name="slotworker-fetch", daemon=True)
        self.fetch_thread.start()
        self.lifecycle.running()
        try:
            self._wait_for_shutdown()
        finally:
            code = self._finish()
        return code

    def _wait_for_shutdown(self) -> None:
        """Block until shutdown starts, running signal handlers promptly.

        Python runs a signal handler in the main thread, and only when that
        thread runs bytecode; the kernel may deliver SIGTERM to any thread (a
        job's, the fetch thread in recv). So the main thread sleeps in a
        selector on a socket that the C-level handler writes each signal's
        number to (``signal.set_wakeup_fd``) and that shutdown writes to: it
        wakes at once for either and otherwise costs nothing (polling every
        0.1 s cost 2-3 ms of CPU a second, as much as 40 jobs' posts).
        Elsewhere (a worker run in a thread) it waits on the state in short
        steps.
        """
        stopping = self.lifecycle.stopping
        if not (self._handles_signals and threading.current_thread() is threading.main_thread()):
            self._wait_in_steps()
            return
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        try:
            previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except (TypeError, ValueError, OSError):  # an interpreter without it: look in short steps
            reader.close()
            writer.close()
            self._wait_in_steps()
            return
        self._wake_main = writer
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(reader, selectors.EVENT_READ)
                while not stopping.is_set():
                    selector.select(IDLE_LOOK)
                    _drain(reader)
        finally:
            signal.set_wakeup_fd(previous)
            self._wake_main = None
            reader.close()
            writer.close()

    def _wait_in_steps(self) -> None:
        """Wait for shutdown, looking every SIGNAL_POLL seconds (no wake-up descriptor)."""
        while not self.lifecycle.stopping.wait(SIGNAL_POLL):
            pass

    def _fetch(self) -> None:
        try:
            self.take_loop.run()
        except BaseException:
            log.exception("the fetch loop died; shutting down")
            self.shutdown("fetch loop error")
        finally:
            self.fetch_stopped.set()

    def _finish(self) -> int:
        deadline = self.lifecycle.deadline or (time.monotonic() + self.grace)
        if self.fetch_thread is not None:
            # A take in flight is waited for: jobs in its answer are ours to run.
            self.fetch_thread.join(max(0.0, deadline - time.monotonic()))
            if self.fetch_thread.is_alive():
                log.error("LOST?: a take was still in flight when the %.0fs grace period ran out; "
                          "jobs the platform puts in it will not run here (it requeues them on its "
                          "job timeout)", self.grace)
        left = self.take_loop.drain(deadline)
        self.stop_channel.stop()
        if left:
            ids = self.take_loop.in_progress_ids()
            self.lost = left
            log.error("LOST: %d job(s) still running after the %.0fs grace period, not reported: %s",
                      left, self.grace, ", ".join(ids) or "(starting)")
        self.heartbeat.stop()
        self.watchdog.close()
        self.take_loop.threads.shutdown(wait=not left)
        self.poster.shutdown(wait=not left)
        self.client.close()
        if self.runner.lost_results:
            log.error("LOST: %d final result(s) could not be posted (see the LOST lines above for their ids)",
                      self.runner.lost_results)
        self.lifecycle.stopped()
        log.info("worker stopped")
        return 1 if left or self.runner.lost_results else 0
