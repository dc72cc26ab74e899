"""QueueingStreamHandler (QueueHandler + QueueListener): every line written once, in order,
WARNING and worse written before the call returns, and nothing left behind at exit or in a fork.

Real threads throughout. A stream whose write can be held open (``HeldStream``)
keeps the listener inside a write, so what other threads do meanwhile is seen
deterministically.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, List

import pytest

from slotworker import logs
from slotworker.log_stream import QueueingStreamHandler
from slotworker.logs import JsonFormatter, TextFormatter
from slotworker.platform import Platform
from support import script_env, spawn_script, wait_for, write_script

DEADLINE = 30.0


class HeldStream(io.StringIO):
    """A text stream; while ``hold`` is set, the next write waits for ``release`` (and says it entered)."""

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
            assert self.release.wait(DEADLINE)
        self.writers.append(threading.current_thread().name)
        return super().write(text)


@pytest.fixture
def make_logger() -> Iterator[Callable[..., "tuple[logging.Logger, QueueingStreamHandler]"]]:
    """A logger with its own started handler on ``stream``; every handler is closed at teardown."""
    made: List[QueueingStreamHandler] = []

    def make(name: str, stream: Any, start: bool = True) -> "tuple[logging.Logger, QueueingStreamHandler]":
        # A wait limit past the tests' deadlines: a call that waits when it
        # should not is seen, not let go after the limit.
        handler = QueueingStreamHandler(stream, wait_limit=4 * DEADLINE)
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        made.append(handler)
        if start:
            handler.start()
        logger = logging.getLogger(f"test-log-stream.{name}")
        logger.handlers[:] = [handler]
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        return logger, handler

    try:
        yield make
    finally:
        for handler in made:
            if isinstance(handler.stream, HeldStream):
                handler.stream.release.set()
            handler.close()


def in_thread(name: str, fn: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=fn, name=name, daemon=True)
    thread.start()
    return thread


def from_job_thread(fn: Callable[[], None]) -> None:
    """Run ``fn`` in another thread (as a job's lines are logged) and wait for it to return."""
    thread = in_thread("job", fn)
    thread.join(DEADLINE)
    assert not thread.is_alive(), "the call did not return"


def waiting_for_its_line(thread: threading.Thread) -> bool:
    """True once ``thread`` is inside ``_wait_written`` (it waits there for the listener)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == "_wait_written":
            return True
        frame = frame.f_back
    return False


def listener_threads() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "slotworker-log"]


# -- the listener writes; the threads that log do not wait --------------------------
def test_the_listener_writes_a_job_threads_lines_and_flush_waits_for_them(make_logger) -> None:
    stream = HeldStream()
    logger, handler = make_logger("listener", stream)
    from_job_thread(lambda: (logger.info("one"), logger.debug("two %s", "args")))
    handler.flush()
    assert stream.getvalue() == "INFO one\nDEBUG two args\n"
    assert set(stream.writers) == {"slotworker-log"}  # not the thread that logged


def test_a_line_of_the_main_thread_is_written_when_the_call_returns(make_logger) -> None:
    stream = HeldStream()
    logger, handler = make_logger("main", stream)
    from_job_thread(lambda: logger.info("from a job"))
    logger.info("from main")  # (pytest runs tests on the main thread)
    assert stream.getvalue() == "INFO from a job\nINFO from main\n"
    for i in range(50):
        logger.debug("line %d", i)
        assert stream.getvalue().endswith(f"DEBUG line {i}\n")
    assert set(stream.writers) == {"slotworker-log"}


def test_many_threads_write_every_line_once_and_each_threads_lines_in_order(make_logger) -> None:
    stream = io.StringIO()
    logger, handler = make_logger("many", stream)
    threads, lines = 64, 200
    go = threading.Event()

    def log_lines(t: int) -> None:
        assert go.wait(DEADLINE)
        for i in range(lines):
            logger.info("t%d %d", t, i)

    workers = [in_thread(f"w{t}", lambda t=t: log_lines(t)) for t in range(threads)]
    go.set()
    for worker in workers:
        worker.join(DEADLINE)
        assert not worker.is_alive()
    handler.flush()
    written = stream.getvalue().splitlines()
    assert len(written) == threads * lines
    seen: Dict[int, List[int]] = {}
    for line in written:
        match = re.fullmatch(r"INFO t(\d+) (\d+)", line)
        assert match, line  # whole lines: none cut or run into another
        seen.setdefault(int(match.group(1)), []).append(int(match.group(2)))
    assert seen == {t: list(range(lines)) for t in range(threads)}


def test_an_info_line_does_not_wait_while_the_listener_is_inside_a_write(make_logger) -> None:
    stream = HeldStream()
    logger, handler = make_logger("nowait", stream)
    stream.hold = True
    from_job_thread(lambda: logger.info("first"))
    assert stream.entered.wait(DEADLINE)  # the listener is inside its write of "first"
    from_job_thread(lambda: logger.info("second"))  # returns at once: queued for the listener
    assert stream.getvalue() == ""
    stream.release.set()
    handler.flush()
    assert stream.getvalue() == "INFO first\nINFO second\n"
    assert set(stream.writers) == {"slotworker-log"}


def test_a_warning_is_written_with_everything_before_it_when_the_call_returns(make_logger) -> None:
    stream = HeldStream()
    logger, handler = make_logger("sync", stream)
    stream.hold = True
    from_job_thread(lambda: logger.info("first"))
    assert stream.entered.wait(DEADLINE)
    from_job_thread(lambda: logger.info("queued"))
    returned = threading.Event()
    written_at_return: List[str] = []

    def warn() -> None:
        logger.warning("careful")
        written_at_return.append(stream.getvalue())
        returned.set()

    warner = in_thread("warner", warn)
    assert wait_for(lambda: waiting_for_its_line(warner), timeout=DEADLINE)
    assert not returned.is_set()
    stream.release.set()
    assert returned.wait(DEADLINE)
    assert written_at_return == ["INFO first\nINFO queued\nWARNING careful\n"]


def test_flush_waits_for_the_lines_queued_before_it(make_logger) -> None:
    stream = HeldStream()
    logger, handler = make_logger("flush", stream)
    stream.hold = True
    from_job_thread(lambda: logger.info("first"))
    assert stream.entered.wait(DEADLINE)
    from_job_thread(lambda: logger.info("second"))
    flushed = threading.Event()
    flusher = in_thread("flusher", lambda: (handler.flush(), flushed.set()))
    assert wait_for(lambda: waiting_for_its_line(flusher), timeout=DEADLINE)
    assert not flushed.is_set()
    stream.release.set()
    assert flushed.wait(DEADLINE)
    assert stream.getvalue() == "INFO first\nINFO second\n"


# -- without a listener: before start, after close, if it died -----------------------------
def test_before_start_and_after_close_the_thread_that_logs_writes_its_line(make_logger) -> None:
    stream = HeldStream()
    logger, handler = make_logger("direct", stream, start=False)
    logger.info("before start")
    assert stream.getvalue() == "INFO before start\n"
    handler.start()
    thread = handler.listener.thread if handler.listener else None
    assert thread is not None and thread.is_alive()
    logger.info("queued")
    handler.close()  # writes what is queued, stops the listener
    assert stream.getvalue() == "INFO before start\nINFO queued\n"
    assert not thread.is_alive()
    logger.info("after close")  # logging after logging.shutdown() still shows
    assert stream.getvalue().endswith("INFO queued\nINFO after close\n")
    assert stream.writers[0] == stream.writers[-1] == threading.current_thread().name


def test_a_warning_does_not_hang_when_the_listener_thread_is_gone(make_logger) -> None:
    stream = io.StringIO()
    logger, handler = make_logger("dead", stream)
    assert handler.listener is not None
    handler.listener.stop()  # its thread ends; the handler was not told (as if it had died)
    from_job_thread(lambda: logger.info("queued for nobody"))
    done = threading.Event()
    warner = in_thread("warner", lambda: (logger.warning("still written"), done.set()))
    assert done.wait(DEADLINE), "a WARNING waited forever for a listener that is gone"
    warner.join(DEADLINE)
    assert stream.getvalue() == "INFO queued for nobody\nWARNING still written\n"
    logger.info("then directly")
    assert stream.getvalue().endswith("WARNING still written\nINFO then directly\n")


def test_a_record_that_cannot_be_formatted_is_reported_and_the_next_one_still_written(
        make_logger, monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    logger, handler = make_logger("bad", stream)
    reported: List[logging.LogRecord] = []
    monkeypatch.setattr(handler, "handleError", reported.append)
    logger.info("%d", "not a number")
    logger.info("fine")
    handler.flush()
    assert [r.msg for r in reported] == ["%d"]
    assert stream.getvalue() == "INFO fine\n"


def test_a_failing_stream_is_reported_and_loses_no_later_line(
        make_logger, monkeypatch: pytest.MonkeyPatch) -> None:
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
    monkeypatch.setattr(handler.writer, "handleError", reported.append)
    logger.info("lost to the stream")
    handler.flush()
    logger.info("after")
    handler.flush()
    assert [r.getMessage() for r in reported] == ["lost to the stream"]
    assert stream.getvalue() == "INFO after\n"


# -- logs.configure ----------------------------------------------------------------------
@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], io.StringIO]]:
    """Makes ``logs.configure`` write to a StringIO as stdout; the handler closed at teardown.

    Call it in the test itself: pytest sets its own ``sys.stdout`` for the call.
    """
    monkeypatch.setattr(logs, "_handler", None)
    level = logs.log.level

    def use_stdout() -> io.StringIO:
        stream = io.StringIO()
        monkeypatch.setattr(sys, "stdout", stream)
        return stream

    try:
        yield use_stdout
    finally:
        if logs._handler is not None:
            logs.log.removeHandler(logs._handler)
            logs._handler.close()
        logs.log.setLevel(level)


def test_the_worker_logs_through_it_with_the_api_key_masked(configured) -> None:
    stdout = configured()
    logs.configure("INFO", secrets=["sekrit-key-1234"])
    assert isinstance(logs._handler, QueueingStreamHandler)
    assert isinstance(logs._handler.formatter, TextFormatter)
    logs.log.info("key is sekrit-key-1234", extra={"job_id": "j1"})
    try:
        raise ValueError("sekrit-key-1234 in a traceback")
    except ValueError:
        logs.log.exception("failed with sekrit-key-1234")
    logs.flush()
    text = stdout.getvalue()
    assert text.startswith("INFO   | j1 | key is ***\nERROR  | failed with ***\nTraceback")
    assert "sekrit-key-1234" not in text


def test_deployed_lines_are_json_with_the_job_id_and_the_key_masked(configured) -> None:
    stdout = configured()
    logs.configure("DEBUG", json_lines=True, secrets=["sekrit-key-1234"])
    assert isinstance(logs._handler.formatter, JsonFormatter)
    logs.log.debug("Started. sekrit-key-1234", extra={"job_id": "job-1"})
    logs.flush()
    assert [json.loads(line) for line in stdout.getvalue().splitlines()] == [
        {"requestId": "job-1", "message": "Started. ***", "level": "DEBUG"}]


def test_configuring_again_writes_the_old_lines_first_and_leaves_one_listener(configured) -> None:
    stdout = configured()
    before = len(listener_threads())
    logs.configure("INFO")
    first = logs._handler
    assert first is not None and first.listener is not None
    first_thread = first.listener.thread
    logs.log.info("through the first")
    logs.configure("INFO")
    logs.log.info("through the second")
    logs.flush()
    assert stdout.getvalue() == "INFO   | through the first\nINFO   | through the second\n"
    assert first_thread is not None and not first_thread.is_alive()
    assert len(listener_threads()) == before + 1


def test_importing_starts_no_thread() -> None:
    code = ("import threading, slotworker, slotworker.logs, slotworker.log_stream; "
            "print(sorted(t.name for t in threading.enumerate()))")
    proc = subprocess.run([sys.executable, "-c", code], env=script_env(), capture_output=True, text=True,
                          timeout=DEADLINE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['MainThread']"


# -- a forked child ------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork")
def test_a_forked_child_writes_its_warning_and_exits(make_logger, tmp_path: Any) -> None:
    path = tmp_path / "fork.log"
    # Append mode: parent and child write at the end of the file, never over each other.
    stream = open(path, "a", encoding="utf-8")
    try:
        logger, handler = make_logger("fork", stream)
        stop = threading.Event()
        logged = [0]

        def chatter() -> None:  # keeps the parent's listener busy across the fork
            while not stop.is_set() and logged[0] < 50000:
                logger.info("parent %d", logged[0])
                logged[0] += 1

        parent = in_thread("chatter", chatter)
        assert wait_for(lambda: logged[0] >= 100, timeout=DEADLINE)
        with warnings.catch_warnings():
            # Python 3.12+ warns that forking a process with threads may deadlock
            # the child: what the handler's fork hooks are there for.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: the parent's listener thread does not exist here
            code = 1
            try:
                logger.warning("child %d", os.getpid())
                handler.flush()
                code = 0
            finally:
                os._exit(code)
        stop.set()
        parent.join(DEADLINE)
        status: List[int] = []
        reaper = in_thread("reaper", lambda: status.append(os.waitpid(pid, 0)[1]))
        reaper.join(DEADLINE)
        if reaper.is_alive():
            os.kill(pid, signal.SIGKILL)
            reaper.join(DEADLINE)
            pytest.fail("the forked child hung logging")
        assert os.WIFEXITED(status[0]) and os.WEXITSTATUS(status[0]) == 0
        handler.close()
    finally:
        stream.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines.count(f"WARNING child {pid}") == 1
    # The parent's lines: each once, in order (the child wrote none of them again).
    assert [line for line in lines if not line.startswith("WARNING")] == [
        f"INFO parent {i}" for i in range(logged[0])]


# -- a real process: the log is complete when it exits -------------------------------------
EXITING = """
    import logging, os, sys, threading
    import slotworker as runpod

    log = runpod.RunPodLogger()

    def lines(t):
        for i in range(500):
            log.info(f"t{t} {i}", f"job-{t}")

    threads = [threading.Thread(target=lines, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # From a thread too: a line of the main thread is written before its call
    # returns, and would leave the exit nothing to write.
    last = threading.Thread(target=log.info, args=("last line",))
    last.start()
    last.join()
    how = sys.argv[1]
    if how == "sys.exit":
        sys.exit(3)
    if how == "os._exit":  # as the worker leaves when a job outlived the grace period
        logging.shutdown()
        os._exit(4)
    if how == "killed":
        # An error line, from a job's thread: on the stream when the call returns.
        error = threading.Thread(target=log.error, args=("LOST: 1 job(s)",))
        error.start()
        error.join()
        sys.stderr.write("ready\\n")
        sys.stderr.flush()
        threading.Event().wait()
"""


def complete_log(out: str) -> None:
    lines = [line for line in out.splitlines() if line.startswith("INFO")]
    assert len(lines) == 8 * 500 + 1, out[-2000:]
    seen: Dict[str, List[int]] = {}
    for line in lines[:-1]:
        match = re.fullmatch(r"INFO +\| (job-\d) \| t\d (\d+)", line)
        assert match, line
        seen.setdefault(match.group(1), []).append(int(match.group(2)))
    assert seen == {f"job-{t}": list(range(500)) for t in range(8)}
    assert lines[-1] == "INFO   | last line"


@pytest.mark.parametrize("how, code", [("return", 0), ("sys.exit", 3), ("os._exit", 4)])
def test_a_process_that_exits_has_written_every_line(tmp_path: Any, how: str, code: int) -> None:
    path = write_script(str(tmp_path), "exiting.py", EXITING)
    proc = subprocess.run([sys.executable, path, how], env=script_env({"RUNPOD_LOG_LEVEL": "INFO"}),
                          capture_output=True, text=True, timeout=DEADLINE)
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr
    complete_log(proc.stdout)


def test_an_error_line_is_out_before_the_process_is_killed(tmp_path: Any) -> None:
    path = write_script(str(tmp_path), "exiting.py", EXITING)
    proc = subprocess.Popen([sys.executable, path, "killed"], env=script_env({"RUNPOD_LOG_LEVEL": "INFO"}),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    chunks: List[str] = []
    # Read stdout all along: a pipe nobody reads fills up and stops the writes.
    reader = in_thread("reader", lambda: chunks.append(proc.stdout.read() if proc.stdout else ""))
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline() == "ready\n"
        proc.kill()  # SIGKILL: no exit hook runs
        proc.wait(DEADLINE)
        reader.join(DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(chunks)
    assert out.splitlines()[-1] == "ERROR  | LOST: 1 job(s)"
    complete_log(out)  # and every line logged before it


FIRST_LINES = """
    import threading
    import slotworker as runpod
    from slotworker import logs

    go = threading.Barrier(32)

    def first(t):
        go.wait()  # every thread's first line at once: each would configure logging
        runpod.RunPodLogger().info(f"first {t}")

    threads = [threading.Thread(target=first, args=(t,)) for t in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"handlers {len(logs.log.handlers)}")
"""


def test_threads_logging_their_first_lines_at_once_install_one_handler(tmp_path: Any) -> None:
    path = write_script(str(tmp_path), "first.py", FIRST_LINES)
    for _ in range(3):
        proc = subprocess.run([sys.executable, path], env=script_env({"RUNPOD_LOG_LEVEL": "INFO"}),
                              capture_output=True, text=True, timeout=DEADLINE)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert "handlers 1" in lines
        assert sorted(line for line in lines if line != "handlers 1") == sorted(
            f"INFO   | first {t}" for t in range(32))


PRINTS = """
    import slotworker as runpod

    log = runpod.RunPodLogger()
    for i in range(50):
        print(f"print {i}")
        log.info(f"log {i}")
        if i % 10 == 0:
            log.warn(f"warn {i}")
"""


def test_a_scripts_prints_and_log_lines_come_out_in_the_order_it_made_them(tmp_path: Any) -> None:
    path = write_script(str(tmp_path), "prints.py", PRINTS)
    proc = subprocess.run([sys.executable, path], env=script_env({"RUNPOD_LOG_LEVEL": "INFO"}),
                          capture_output=True, text=True, timeout=DEADLINE)
    assert proc.returncode == 0, proc.stderr
    expected: List[str] = []
    for i in range(50):
        expected += [f"print {i}", f"INFO   | log {i}"] + ([f"WARN   | warn {i}"] if i % 10 == 0 else [])
    assert proc.stdout.splitlines() == expected


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
            proc.send_signal(signal.SIGTERM)  # the worker's own shutdown, then its exit
            out, _ = proc.communicate(timeout=DEADLINE)
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
    assert out.splitlines()[-1] == "INFO   | worker stopped", out[-2000:]
