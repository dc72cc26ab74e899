"""CombiningStreamHandler: every line written once, in order, and nobody waits on another's write.

Real threads throughout. A stream whose write can be held open (``HeldStream``)
puts one thread inside the write, so the others' paths are seen deterministically.
"""

from __future__ import annotations

import io
import logging
import re
import signal
import sys
import threading
from typing import Any, Callable, Dict, List

import pytest

from slotworker.log_stream import CombiningStreamHandler
from slotworker.logs import TextFormatter
from slotworker.platform import Platform
from support import spawn_script, wait_for, write_script


class HeldStream(io.StringIO):
    """A text stream; while ``hold`` is set, a write waits for ``release`` (and says it entered)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.writers: List[str] = []  # the thread that wrote each chunk

    def write(self, text: str) -> int:
        if self.hold:
            self.hold = False
            self.entered.set()
            assert self.release.wait(30)
        self.writers.append(threading.current_thread().name)
        return super().write(text)


def make_logger(name: str, stream: Any) -> "tuple[logging.Logger, CombiningStreamHandler]":
    handler = CombiningStreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger(f"test-log-stream.{name}")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger, handler


def in_thread(name: str, fn: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=fn, name=name, daemon=True)
    thread.start()
    return thread


def waiting_on_the_write_lock(thread: threading.Thread) -> bool:
    """True once ``thread`` is inside ``_write_queued`` (it can only stay there on the lock)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == "_write_queued":
            return True
        frame = frame.f_back
    return False


def test_alone_a_line_is_written_before_the_call_returns() -> None:
    stream = io.StringIO()
    logger, _ = make_logger("alone", stream)
    logger.info("one")
    assert stream.getvalue() == "INFO one\n"
    logger.debug("two %s", "args")
    assert stream.getvalue() == "INFO one\nDEBUG two args\n"


def test_many_threads_write_every_line_once_and_each_threads_lines_in_order() -> None:
    stream = io.StringIO()
    logger, _ = make_logger("many", stream)
    threads, lines = 64, 200
    go = threading.Event()

    def log_lines(t: int) -> None:
        assert go.wait(30)
        for i in range(lines):
            logger.info("t%d %d", t, i)

    workers = [in_thread(f"w{t}", lambda t=t: log_lines(t)) for t in range(threads)]
    go.set()
    for worker in workers:
        worker.join(30)
        assert not worker.is_alive()
    written = stream.getvalue().splitlines()
    assert len(written) == threads * lines
    seen: Dict[int, List[int]] = {}
    for line in written:
        match = re.fullmatch(r"INFO t(\d+) (\d+)", line)
        assert match, line
        seen.setdefault(int(match.group(1)), []).append(int(match.group(2)))
    assert seen == {t: list(range(lines)) for t in range(threads)}


def test_an_info_line_does_not_wait_for_another_threads_write_and_that_thread_writes_it() -> None:
    stream = HeldStream()
    logger, _ = make_logger("nowait", stream)
    stream.hold = True
    holder = in_thread("holder", lambda: logger.info("first"))
    assert stream.entered.wait(30)  # the holder is inside its write, holding the lock
    logger.info("second")  # returns at once: the holder writes it
    assert stream.getvalue() == ""
    stream.release.set()
    holder.join(30)
    assert not holder.is_alive()
    assert stream.getvalue() == "INFO first\nINFO second\n"
    assert stream.writers == ["holder", "holder"]


def test_a_warning_waits_for_the_write_lock_and_is_written_when_the_call_returns() -> None:
    stream = HeldStream()
    logger, _ = make_logger("sync", stream)
    stream.hold = True
    holder = in_thread("holder", lambda: logger.info("first"))
    assert stream.entered.wait(30)
    logger.info("queued")  # queued for the holder
    returned = threading.Event()
    written_at_return: List[str] = []

    def warn() -> None:
        logger.warning("careful")
        written_at_return.append(stream.getvalue())
        returned.set()

    warner = in_thread("warner", warn)
    assert wait_for(lambda: waiting_on_the_write_lock(warner), timeout=30)
    assert not returned.is_set()
    stream.release.set()
    assert returned.wait(30)
    holder.join(30)
    assert written_at_return[0].endswith("WARNING careful\n")
    assert stream.getvalue() == "INFO first\nINFO queued\nWARNING careful\n"


def test_flush_writes_what_a_writer_left_queued() -> None:
    stream = io.StringIO()
    logger, handler = make_logger("flush", stream)
    assert handler._write_lock.acquire(timeout=30)  # as if another thread were writing
    try:
        logger.info("queued")
    finally:
        handler._write_lock.release()  # ...and had let go without writing it
    assert stream.getvalue() == ""
    handler.flush()
    assert stream.getvalue() == "INFO queued\n"


def test_a_record_that_cannot_be_formatted_is_reported_and_the_next_one_still_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    logger, handler = make_logger("bad", stream)
    reported: List[logging.LogRecord] = []
    monkeypatch.setattr(handler, "handleError", reported.append)
    logger.info("%d", "not a number")
    logger.info("fine")
    assert [r.msg for r in reported] == ["%d"]
    assert stream.getvalue() == "INFO fine\n"


def test_a_failing_stream_is_reported_and_loses_no_later_line(monkeypatch: pytest.MonkeyPatch) -> None:
    class Flaky(io.StringIO):
        fail = True

        def write(self, text: str) -> int:
            if self.fail:
                self.fail = False
                raise OSError("disk full")
            return super().write(text)

    stream = Flaky()
    logger, handler = make_logger("flaky", stream)
    reported: List[logging.LogRecord] = []
    monkeypatch.setattr(handler, "handleError", reported.append)
    logger.info("lost to the stream")
    logger.info("after")
    assert [r.getMessage() for r in reported] == ["lost to the stream"]
    assert stream.getvalue() == "INFO after\n"


def test_the_worker_logs_through_it_with_the_api_key_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    from slotworker import logs

    monkeypatch.setattr(logs, "_handler", None)
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stdout", stream)
    try:
        logs.configure("INFO", secrets=["sekrit-key-1234"])
        assert isinstance(logs._handler, CombiningStreamHandler)
        assert isinstance(logs._handler.formatter, TextFormatter)
        logs.log.info("key is sekrit-key-1234", extra={"job_id": "j1"})
        assert stream.getvalue() == "INFO   | j1 | key is ***\n"
    finally:
        logs.log.removeHandler(logs._handler)


SLOTS, JOBS = 256, 1024
MANY_JOBS = f"""
    import time
    import slotworker as runpod

    def handler(job):
        time.sleep(0.02)
        if job["input"]["n"] % 97 == 0:
            runpod.RunPodLogger().warn("warned", job["id"])
        return job["input"]["n"]

    runpod.serverless.start({{"handler": handler, "concurrency_modifier": lambda c: {SLOTS}}})
"""


def test_a_worker_at_hundreds_of_slots_logs_each_jobs_lines_exactly_once(tmp_path: Any) -> None:
    path = write_script(str(tmp_path), "many.py", MANY_JOBS)
    with Platform(long_poll=0.2) as platform:
        ids = [platform.submit({"n": n}, job_id=f"job-{n}") for n in range(JOBS)]
        proc = spawn_script(path, env=dict(platform.worker_env("w1"), RUNPOD_LOG_LEVEL="INFO"))
        try:
            assert platform.wait_final(ids, timeout=60)
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out[-2000:]
    counts: Dict[str, int] = {}
    for line in out.splitlines():
        match = re.fullmatch(r"(\w+) +\| (job-\d+) \| (.*)", line)
        if match:
            key = f"{match.group(2)} {match.group(1)} {match.group(3)}"
            counts[key] = counts.get(key, 0) + 1
    for n in range(JOBS):
        assert counts.pop(f"job-{n} INFO Started.") == 1
        assert counts.pop(f"job-{n} INFO Finished.") == 1
        if n % 97 == 0:
            assert counts.pop(f"job-{n} WARN warned") == 1
    assert counts == {}
