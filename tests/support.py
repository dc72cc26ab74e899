"""Helpers for the worker tests: a worker on a thread, a gate for handlers,
and running handler scripts as real processes."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import traceback

import pytest
from typing import Any, Callable, Dict, List, Optional, Tuple

from slotworker.platform import Platform
from slotworker.config import DEFAULT_TAKE_POLICY, Options, Settings
from slotworker.worker.worker import Worker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: A self-signed certificate for 127.0.0.1 (valid until 2126) and its key, made for the tests only.
TLS_CERT = os.path.join(ROOT, "tests", "data", "tls_cert.pem")
TLS_KEY = os.path.join(ROOT, "tests", "data", "tls_key.pem")


class WorkerThread:
    """A :class:`Worker` running on a background thread against ``platform``."""

    def __init__(self, platform: Platform, handler: Callable[..., Any], concurrency: Optional[int] = None,
                 worker_id: str = "w1", env: Optional[Dict[str, str]] = None, **config: Any) -> None:
        config["handler"] = handler
        # SLOTWORKER_TEST_POLICY runs the suite under another take policy, e.g.
        # "fixed", to show which tests a fixed 1 s sleep would fail.
        config.setdefault("take_policy", os.environ.get("SLOTWORKER_TEST_POLICY", DEFAULT_TAKE_POLICY))
        if concurrency is not None and "concurrency_modifier" not in config:
            config["concurrency_modifier"] = lambda current: concurrency
        environment = dict(platform.worker_env(worker_id), **(env or {}))
        self.worker = Worker(Options.load(config, settings=Settings.from_env(environment)))
        self.exit_code: Optional[int] = None
        self.thread = threading.Thread(target=self._run, name=f"test-worker-{worker_id}", daemon=True)

    def _run(self) -> None:
        self.exit_code = self.worker.run()

    def start(self) -> "WorkerThread":
        self.thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> Optional[int]:
        """Shut the worker down and wait for it; returns its exit code."""
        self.worker.shutdown("test teardown")
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker did not stop"
        return self.exit_code

    def __enter__(self) -> "WorkerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        if self.thread.is_alive():
            self.stop()


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``predicate`` until true or ``timeout``: for state no Condition announces
    (a loop counter, the take loop's pending queue)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def raw_exchange(platform: Platform, raw: bytes, timeout: float = 10.0) -> Tuple[int, Dict[str, str], bytes]:
    """Send ``raw`` bytes to the platform, read until it closes the connection;
    (status, headers, body) of the last answer."""
    with socket.create_connection(("127.0.0.1", platform.port), timeout=timeout) as s:
        s.sendall(raw)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.rpartition(b"HTTP/1.1 ")[2].partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[0]), headers, body


class Gate:
    """Handlers block in :meth:`enter` until the test opens their job's gate."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.started: List[str] = []
        self.exited: Dict[str, float] = {}
        self._open: set = set()
        self._all_open = False

    def enter(self, job: Dict[str, Any], timeout: float = 30.0) -> None:
        job_id = job["id"]
        with self._cond:
            self.started.append(job_id)
            self._cond.notify_all()
            ok = self._cond.wait_for(lambda: self._all_open or job_id in self._open, timeout)
        if not ok:
            raise RuntimeError("gate never opened")
        with self._cond:
            self.exited[job_id] = time.monotonic()
            self._cond.notify_all()

    def open(self, *job_ids: str) -> None:
        with self._cond:
            self._open.update(job_ids)
            self._cond.notify_all()

    def open_all(self) -> None:
        with self._cond:
            self._all_open = True
            self._cond.notify_all()

    def wait_started(self, n: int, timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.started) >= n, timeout)

    def running(self) -> List[str]:
        with self._cond:
            return [j for j in self.started if j not in self.exited]


def write_script(directory: str, name: str, body: str) -> str:
    """Write a handler script (dedented) into ``directory``; returns its path."""
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(textwrap.dedent(body))
    return path


def script_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The test process's environment without any RUNPOD_ variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPOD_")}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra or {})
    return env


def run_script(path: str, *args: str, env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
               timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run a handler script to completion with this interpreter."""
    return subprocess.run([sys.executable, path, *args], env=script_env(env), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def spawn_script(path: str, *args: str, env: Optional[Dict[str, str]] = None,
                 cwd: Optional[str] = None) -> subprocess.Popen:
    """Start a handler script as a worker process."""
    return subprocess.Popen([sys.executable, path, *args], env=script_env(env), cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class LogRecords(logging.Handler):
    """Every record of the ``slotworker`` logger while installed (the ``records`` fixture).

    ``lines`` holds each as ``LEVEL job-id message``; :meth:`text` adds each
    record's traceback and all its attributes, unredacted, so a secret that
    reached the logger anywhere is found.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: List[str] = []
        self._full: List[str] = []
        self._guard = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        line = f"{record.levelname} {getattr(record, 'job_id', '-')} {record.getMessage()}"
        full = line
        if record.exc_info:
            full += "\n" + "".join(traceback.format_exception(*record.exc_info))
        full += " " + repr(record.__dict__)
        with self._guard:
            self.lines.append(line)
            self._full.append(full)
            self._guard.notify_all()

    def text(self) -> str:
        with self._guard:
            return "\n".join(self._full)

    def wait_for(self, text: str, timeout: float = 30.0) -> bool:
        """Wait until a record containing ``text`` has been logged."""
        with self._guard:
            return self._guard.wait_for(lambda: any(text in entry for entry in self._full), timeout)


class Meter:
    """Growth of this process's peak memory (the server's threads included) since it was made, in bytes.

    CPython: :mod:`tracemalloc`, the peak of Python's allocations. PyPy has
    no tracemalloc: there, the peak resident set (VmHWM), reset through
    /proc/self/clear_refs; it cannot tell memory the process reuses from
    memory it did not need, so it serves only as a ceiling.
    """

    def __init__(self) -> None:
        self._tracemalloc: Any = None
        try:
            import tracemalloc
            tracemalloc.start()
        except ImportError:  # PyPy
            try:
                with open("/proc/self/clear_refs", "w") as handle:
                    handle.write("5")  # peak resident set := current
            except OSError:
                pytest.skip("no way to measure peak memory here (no tracemalloc, no /proc/self/clear_refs)")
            self._base = self._status("VmRSS")
        else:
            self._tracemalloc = tracemalloc
            self._base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()

    @property
    def exact(self) -> bool:
        """True when what is measured is allocations, not resident pages."""
        return self._tracemalloc is not None

    @staticmethod
    def _status(field: str) -> int:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise AssertionError(f"no {field} in /proc/self/status")

    def growth(self) -> int:
        if self._tracemalloc is not None:
            return self._tracemalloc.get_traced_memory()[1] - self._base
        return self._status("VmHWM") - self._base

    def stop(self) -> None:
        if self._tracemalloc is not None:
            self._tracemalloc.stop()
