"""What a handler returned, shaped into the bodies runpod 1.12.0 posts.

Pure functions, no I/O and no environment: the runner and local mode share them.
"""

from __future__ import annotations

import datetime
import functools
import json
import platform
import time
import traceback
from typing import Any, Dict, Optional

from .._version import __version__
from ..config import PROTOCOL_VERSION


def shape_return(value: Any) -> Dict[str, Any]:
    """The job-done body for a plain handler's return value.

    A dict's ``error`` key moves beside ``output`` and ``refresh_worker``
    becomes ``stopPod``; an output that is left an empty dict is dropped.
    """
    if isinstance(value, dict):
        output = dict(value)
        error = output.pop("error", None)
        refresh = output.pop("refresh_worker", None)
        result: Dict[str, Any] = {"output": output}
        if error:
            result["error"] = error
        if refresh:
            result["stopPod"] = True
        if result["output"] == {}:
            del result["output"]
        return result
    return {"output": value}


def error_info(exc: BaseException, hostname: "str | None" = None, worker_id: "str | None" = None) -> Dict[str, Any]:
    """The error report runpod builds for a handler exception."""
    return {
        "error_type": str(type(exc)),
        "error_message": str(exc),
        "error_traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "hostname": hostname or "unknown",
        "worker_id": worker_id or "unknown",
        "runpod_version": PROTOCOL_VERSION,
    }


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, or a placeholder when the exception cannot render itself."""
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"


def exception_result(exc: BaseException, **ids: Any) -> Dict[str, Any]:
    """``{"error": "<JSON string of error_info>"}`` for a handler exception.

    An exception whose ``__str__`` raises still gives an error result, with
    its type and a placeholder for the message.
    """
    try:
        return {"error": json.dumps(error_info(exc, **ids))}
    except Exception:
        return plain_error(f"{type(exc).__name__}: {exception_text(exc)}")


def generator_error_result(exc: BaseException) -> Dict[str, Any]:
    """The final body when a generator handler raises, as runpod words it."""
    try:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return {"error": f"handler: {exc} \ntraceback: {tb}"}
    except Exception:
        return plain_error(f"handler: {type(exc).__name__}: {exception_text(exc)}")


def chunk_error(chunk: Any) -> "str | None":
    """A streamed chunk that is a dict with a truthy ``error`` ends the stream with it."""
    if isinstance(chunk, dict) and chunk.get("error"):
        return str(chunk["error"])
    return None


def plain_error(message: str) -> Dict[str, Any]:
    """An error result written by the worker itself (bad job, bad output, timeout)."""
    return {"error": message}


@functools.lru_cache(maxsize=1)
def processor_name() -> str:
    """The CPU's model name, as runpod's debugger reports it (without py-cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "Unable to get processor info."


def _utc(perf: float, now_perf: float, now_wall: float) -> str:
    """A ``perf_counter`` reading as runpod's ``start_utc`` / ``stop_utc`` text."""
    wall = now_wall - (now_perf - perf)
    return datetime.datetime.fromtimestamp(wall, datetime.timezone.utc).isoformat() + "Z"


def debugger_output(started: float, ended: float, ready_at: Optional[float]) -> Dict[str, Any]:
    """The ``rp_debugger`` entry that ``--rp_debugger`` adds to a dict output.

    The shape of runpod's ``get_debugger_output()``: ``system_info``,
    ``timestamps`` (here one checkpoint, ``run_job``, the handler call) and
    ``ready_delay_ms`` (here: from ``start()`` to this job's start).
    ``started`` / ``ended`` / ``ready_at`` are ``time.perf_counter()`` readings.
    """
    now_perf, now_wall = time.perf_counter(), time.time()
    out: Dict[str, Any] = {
        "system_info": {
            "os": f"{platform.system()} {platform.release()}",
            "processor": processor_name(),
            "python_version": platform.python_version(),
            "runpod": PROTOCOL_VERSION,
            "slotworker": __version__,
        },
        "timestamps": [{
            "name": "run_job",
            "start_utc": _utc(started, now_perf, now_wall),
            "stop_utc": _utc(ended, now_perf, now_wall),
            "duration_ms": (ended - started) * 1000,
        }],
    }
    if ready_at is not None:
        out["ready_delay_ms"] = (started - ready_at) * 1000
    return out
