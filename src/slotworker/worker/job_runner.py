"""Running one job in its own thread: call the handler, stream, report.

:meth:`JobRunner.run` is what a job thread runs for each job. It never
raises: whatever the handler does (returns, raises, yields, never returns
until stopped), the job ends with exactly one final result posted, except
when the platform asked for it to stop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from . import progress, results
from .platform_client import PlatformClient, Rejected, deliver, encode
from .result_poster import ResultPoster
from .lifecycle import Lifecycle
from .interruption import JobInterrupted, JobStopped, JobTimedOut, Registry, RunningJob, Watchdog
from ..config import Options

log = logging.getLogger("slotworker")

_loops = threading.local()


def _thread_loop() -> asyncio.AbstractEventLoop:
    """One event loop per job thread, reused across jobs, for async handlers."""
    loop = getattr(_loops, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        _loops.loop = loop
    return loop


def _discard_thread_loop() -> None:
    loop = getattr(_loops, "loop", None)
    if loop is not None:
        _loops.loop = None
        try:
            loop.close()
        except Exception:  # a loop interrupted mid-run may refuse; drop it anyway
            pass


#: runpod's timers for handler code (``rp_debugger.LineTimer``/``FunctionTimer``).
_TIMERS_MODULE = "slotworker.serverless.utils.rp_debugger"


def _handler_checkpoints(keep: bool) -> List[Dict[str, Any]]:
    """The timings a handler recorded with runpod's debugger timers, taken out of their store.

    As runpod does after each job: returned under ``--rp_debugger``, thrown
    away otherwise (a ``FunctionTimer`` fails on its second run if they are
    not). Looked up, not imported: a handler that never imported the timers
    has none.
    """
    timers = sys.modules.get(_TIMERS_MODULE)
    if timers is None:
        return []
    if keep:
        return list(timers.get_debugger_output().get("timestamps", []))
    timers.clear_debugger_output()
    return []


def _nothing() -> None:
    pass


class _Final(NamedTuple):
    """A job's final result, ready to post."""

    post: Callable[[], None]  #: posts it once, then ends the job
    stops_worker: bool        #: it asks the worker to stop (``refresh_worker``, ``stopPod``)


def is_generator_handler(handler: Callable[..., Any]) -> bool:
    """True for handlers that stream (sync or async generator functions)."""
    return inspect.isgeneratorfunction(handler) or inspect.isasyncgenfunction(handler)


class JobRunner:
    """Runs jobs with one handler and posts their results."""

    def __init__(self, options: Options, client: PlatformClient, registry: Registry, watchdog: Watchdog,
                 lifecycle: Lifecycle, on_refresh: Callable[[str], None],
                 poster: Optional[ResultPoster] = None) -> None:
        self.handler = options.handler
        self.streams = is_generator_handler(self.handler)
        self.aggregate = options.return_aggregate_stream
        self.refresh_every_job = options.refresh_worker
        self.debugger = bool(options.flags.get("rp_debugger"))
        self.job_timeout = options.job_timeout
        self.ready_at = options.started_at
        self.client = client
        self.settings = options.settings
        self.registry = registry
        self.watchdog = watchdog
        self.lifecycle = lifecycle
        self.on_refresh = on_refresh
        #: Where final results are posted from; None: from the job's thread.
        self.poster = poster
        # How a final result waits between tries: on a poster thread, with
        # that thread stepping aside so the results queued behind it move on.
        self._retry_wait = poster.step_aside if poster is not None else None
        #: Final results given up on (shutdown past its grace, or refused):
        #: each is logged as LOST with its job id; the worker exits 1 if any.
        self.lost_results = 0
        self._lost_lock = threading.Lock()

    # -- the job's life -----------------------------------------------------
    def run(self, job: Any, on_exit: Callable[[], None] = _nothing,
            on_posting: Optional[Callable[[], None]] = None) -> None:
        """Run ``job`` to its one final result. Never raises.

        ``on_exit()`` is called once, when the job is over here: its result
        posted or given up on, or no result due (malformed, a duplicate,
        stopped by the platform). With a poster, a result is posted, and
        ``on_exit()`` called, on a poster thread after this returns.
        ``on_posting()``, if given, is called on this thread once the result
        is with the poster, unless that result stops the worker or a post
        waits to retry: the handler is done with the job, which now only
        waits for its post.
        """
        running: Optional[RunningJob] = None
        final: Optional[_Final] = None
        try:
            job_id = self._job_id(job)
            if job_id is None:
                return
            running = RunningJob(job_id)
            if not self.registry.add(running):
                # The platform handed out a job this worker is running already
                # (requeued while we ran it, or twice in a batch): the first
                # copy will report; a second result would be a duplicate.
                log.warning("job is already running on this worker; this copy is dropped",
                            extra={"job_id": job_id})
                running = None
                return
            progress.bind(job_id, self)
            try:
                final = self._run(job, running, on_exit)
            except JobInterrupted:
                raise
            except BaseException as exc:  # a bug of ours, or a value that broke the shaping
                log.exception("internal error while running the job; reporting it as an error",
                              extra={"job_id": job_id})
                final = self._final(job_id, results.plain_error(
                    f"Worker internal error while handling the job: {type(exc).__name__}"), False, running, on_exit)
            finally:
                running.finish()
                if self.job_timeout:
                    self.watchdog.disarm(running)
                progress.unbind(job_id)
        except JobInterrupted:
            # A raise that landed outside user code; the job is over already.
            log.debug("interrupt arrived after the handler returned")
        except BaseException:  # the worker must outlive any job
            log.exception("internal error while running a job")
        finally:
            if final is None:  # no result is due: the job is over now
                if running is not None:
                    self.registry.remove(running)
                on_exit()
            elif self.poster is None:
                final.post()
            else:
                self.poster.submit(final.post)
                # After the submit: if the post was done at once (on this
                # thread, no poster could start), the job is over, and this
                # does nothing. Not while a post waits to retry: a platform
                # refusing results gets no more jobs taken meanwhile.
                if on_posting is not None and not final.stops_worker and not self.poster.retrying:
                    try:
                        on_posting()
                    except BaseException:  # a bug of ours: logged, the post goes on
                        log.exception("internal error while giving a job's slot back")

    def _job_id(self, job: Any) -> Optional[str]:
        if not isinstance(job, dict) or job.get("id") in (None, ""):
            log.error("malformed job dropped: it has no id, so no result can be posted for it: %.200r", job)
            return None
        if not isinstance(job["id"], str):
            job["id"] = str(job["id"])
        return job["id"]

    def _run(self, job: Dict[str, Any], running: RunningJob,
             on_exit: Callable[[], None]) -> Optional[_Final]:
        """Call the handler; the job's final result, or None if none is due."""
        job_id = running.job_id
        if "input" not in job:
            log.error("job has no input; reporting an error", extra={"job_id": job_id})
            return self._final(job_id, results.plain_error("Job has missing field(s): input."), False, running,
                               on_exit)
        if self.job_timeout:
            self.watchdog.arm(running, self.job_timeout)
        log.info("Started.", extra={"job_id": job_id})
        started = time.perf_counter()
        try:
            if self.streams:
                body = self._run_generator(job, running)
            else:
                body = self._run_plain(job, running)
        except JobStopped:
            body = None
        except JobTimedOut:
            body = self._timed_out(job_id)
        # A stop that came in while the handler was finishing (or anywhere,
        # where no exception can be raised in a thread, as on PyPy) still
        # means no result; a timeout still means the timeout error.
        if running.stop_reason is JobStopped:
            body = None
        elif running.stop_reason is JobTimedOut and not (body or {}).get("error"):
            body = self._timed_out(job_id)
        if body is None:  # stopped: interrupted, or a generator at a yield
            log.info("Job stopped by the platform; no result is sent.", extra={"job_id": job_id})
            return None
        if self.refresh_every_job:
            body["stopPod"] = True
        checkpoints = _handler_checkpoints(keep=self.debugger)
        if self.debugger and isinstance(body.get("output"), dict):
            report = self._debugger_output(started)
            report["timestamps"].extend(checkpoints)
            body["output"]["rp_debugger"] = report
        return self._final(job_id, body, self.streams, running, on_exit)

    def _timed_out(self, job_id: str) -> Dict[str, Any]:
        log.error("Job timed out after %ss.", self.job_timeout, extra={"job_id": job_id})
        return results.plain_error(f"Job timed out: it ran longer than the job timeout of {self.job_timeout} s.")

    def _debugger_output(self, started: float) -> Dict[str, Any]:
        return results.debugger_output(started, time.perf_counter(), self.ready_at)

    # -- calling the handler ------------------------------------------------
    def _call(self, running: RunningJob, func: Callable[..., Any], *args: Any) -> Any:
        """Call user code with the thread marked interruptible."""
        running.enter_handler()
        try:
            return func(*args)
        finally:
            running.leave_handler()

    def _run_plain(self, job: Dict[str, Any], running: RunningJob) -> Dict[str, Any]:
        try:
            value = self._call(running, self.handler, job)
            if inspect.isawaitable(value):
                value = self._call(running, _thread_loop().run_until_complete, value)
        except JobInterrupted:
            if inspect.iscoroutinefunction(self.handler):
                _discard_thread_loop()
            raise
        except BaseException as exc:  # SystemExit, KeyboardInterrupt from a handler too
            log.error("Captured Handler Exception: %s: %s", type(exc).__name__, results.exception_text(exc),
                      extra={"job_id": running.job_id})
            return results.exception_result(exc, hostname=self.settings.hostname,
                                            worker_id=self.settings.worker_id)
        return results.shape_return(value)

    def _run_generator(self, job: Dict[str, Any], running: RunningJob) -> Optional[Dict[str, Any]]:
        job_id = running.job_id
        aggregate: List[Any] = []
        gen: Any = None
        is_async = inspect.isasyncgenfunction(self.handler)
        try:
            gen = self._call(running, self.handler, job)
            while True:
                if running.stop_reason is JobStopped:
                    return None
                if running.stop_reason is JobTimedOut:
                    raise JobTimedOut(job_id)
                try:
                    if is_async:
                        chunk = self._call(running, _thread_loop().run_until_complete, gen.__anext__())
                    else:
                        chunk = self._call(running, next, gen)
                except (StopIteration, StopAsyncIteration):
                    break
                error = results.chunk_error(chunk)
                if error is not None:
                    return {"error": error}
                if self.aggregate:
                    aggregate.append(chunk)
                self._stream(job_id, chunk)
        except JobInterrupted:
            if is_async:
                _discard_thread_loop()
            raise
        except BaseException as exc:
            log.error("Generator handler raised: %s: %s", type(exc).__name__, results.exception_text(exc), extra={"job_id": job_id})
            return results.generator_error_result(exc)
        finally:
            self._close_generator(gen, is_async)
        return {"output": aggregate}

    def _close_generator(self, gen: Any, is_async: bool) -> None:
        if gen is None:
            return
        try:
            if is_async:
                loop = getattr(_loops, "loop", None)
                if loop is not None and not loop.is_closed() and not loop.is_running():
                    loop.run_until_complete(gen.aclose())
            else:
                gen.close()
        except BaseException:
            log.debug("closing the generator raised; ignored")

    # -- reporting ------------------------------------------------------------
    def _stream(self, job_id: str, chunk: Any) -> None:
        try:
            body = encode({"output": chunk})
        except (TypeError, ValueError) as exc:
            log.error("stream chunk is not JSON-serialisable (%s); chunk skipped", exc, extra={"job_id": job_id})
            return
        try:
            deliver(lambda timeout: self.client.post_stream(job_id, body, timeout), job_id, "stream chunk",
                    self.lifecycle)
        except Rejected as exc:
            log.error("platform rejected a stream chunk: %s", exc, extra={"job_id": job_id})

    def _final(self, job_id: str, body: Dict[str, Any], is_stream: bool, running: RunningJob,
               on_exit: Callable[[], None]) -> _Final:
        """The final result, with the task that posts it once and then ends the job."""
        stop_pod = self.refresh_every_job or bool(body.get("stopPod"))
        try:
            data = encode(body)
        except Exception as exc:  # TypeError, ValueError, or whatever a custom object raises
            log.error("handler output is not JSON-serialisable: %s", results.exception_text(exc), extra={"job_id": job_id})
            body = results.plain_error(
                f"Handler output is not JSON-serialisable: {type(exc).__name__}: {results.exception_text(exc)}")
            if stop_pod:
                body["stopPod"] = True
            data = encode(body)

        def post() -> None:
            try:
                self._post_final(job_id, data, is_stream, stop_pod)
            except BaseException:  # a bug of ours: the poster must outlive any job
                log.exception("LOST: internal error while posting the result", extra={"job_id": job_id})
                self._count_lost()
            finally:
                if self.poster is not None:
                    self.poster.settle()
                self.registry.remove(running)
                on_exit()
        return _Final(post, stop_pod)

    def _post_final(self, job_id: str, data: bytes, is_stream: bool, stop_pod: bool) -> None:
        try:
            sent = deliver(lambda timeout: self.client.post_done(job_id, data, is_stream, timeout), job_id,
                           "result", self.lifecycle, self._retry_wait)
        except Rejected as exc:
            sent = False
            if exc.status == 413:
                log.error("platform refused the result as too large (%d bytes); reporting an error instead",
                          len(data), extra={"job_id": job_id})
                small = encode(results.plain_error(
                    f"Job output too large for the platform: {len(data)} bytes (HTTP 413)."))
                try:
                    sent = deliver(lambda timeout: self.client.post_done(job_id, small, is_stream, timeout),
                                   job_id, "error result", self.lifecycle, self._retry_wait)
                except Rejected as again:
                    log.error("LOST: platform rejected the error result too: %s", again, extra={"job_id": job_id})
            else:
                log.error("LOST: platform rejected the result: %s", exc, extra={"job_id": job_id})
        if sent:
            log.info("Finished.", extra={"job_id": job_id})
        else:
            self._count_lost()
        if stop_pod:
            self.on_refresh(job_id)

    def _count_lost(self) -> None:
        with self._lost_lock:
            self.lost_results += 1

    def post_progress(self, job_id: str, value: Any) -> None:
        """Send a progress update for a running job (one try; progress is best effort)."""
        try:
            self.client.post_done(job_id, encode({"status": "IN_PROGRESS", "output": value}), False)
        except Exception as exc:  # never fail the handler over a progress update
            log.warning("progress update not sent: %s", exc, extra={"job_id": job_id})
