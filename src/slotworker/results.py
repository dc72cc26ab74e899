"""What a handler returned, shaped into the bodies runpod 1.12.0 posts.

Pure functions, no I/O: the runner and local mode share them.
"""

from __future__ import annotations

import json
import os
import traceback
from typing import Any, Dict

from .settings import PROTOCOL_VERSION


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
        "hostname": hostname or os.environ.get("RUNPOD_POD_HOSTNAME", "unknown"),
        "worker_id": worker_id or os.environ.get("RUNPOD_POD_ID", "unknown"),
        "runpod_version": PROTOCOL_VERSION,
    }


def exception_result(exc: BaseException, **ids: Any) -> Dict[str, Any]:
    """``{"error": "<JSON string of error_info>"}`` for a handler exception."""
    return {"error": json.dumps(error_info(exc, **ids))}


def generator_error_result(exc: BaseException) -> Dict[str, Any]:
    """The final body when a generator handler raises, as runpod words it."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {"error": f"handler: {exc} \ntraceback: {tb}"}


def chunk_error(chunk: Any) -> "str | None":
    """A streamed chunk that is a dict with a truthy ``error`` ends the stream with it."""
    if isinstance(chunk, dict) and chunk.get("error"):
        return str(chunk["error"])
    return None


def plain_error(message: str) -> Dict[str, Any]:
    """An error result written by the worker itself (bad job, bad output, timeout)."""
    return {"error": message}
