"""runpod's ``serverless.modules.rp_http``, for handler code that imports it.

In runpod this module posts job results to the platform; slotworker's worker
does that itself (``slotworker.worker.platform_client``), so handlers never
need it. What runpod's module has at module level is here:

- ``JOB_DONE_URL_TEMPLATE``, ``JOB_STREAM_URL_TEMPLATE``: the result URL
  templates from ``RUNPOD_WEBHOOK_POST_OUTPUT`` / ``RUNPOD_WEBHOOK_POST_STREAM``
  (runpod's placeholders ``"JOB_DONE_URL"`` / ``"JOB_STREAM_URL"`` when
  unset), and ``JOB_DONE_URL``, ``JOB_STREAM_URL``: the same with
  ``$RUNPOD_POD_ID`` filled in. Read from the environment when first
  looked up, not at import.
- ``WORKER_ID``: ``RUNPOD_POD_ID``, or a random id fixed for the process.
- ``log``: a :class:`RunPodLogger`.
- ``send_result(session, job_data, job, is_stream=False)`` and
  ``stream_result(session, job_data, job)``: coroutines that post a body for
  a job, as runpod's do. ``session`` (runpod's aiohttp session) is not
  used: the post goes through slotworker's platform client, with the
  worker's API key. Failures are logged, never raised.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any, Dict

from ...config import Settings
from ...logs import RunPodLogger
from ...worker.platform_client import PlatformClient, PlatformError, encode

log = RunPodLogger()

_TEMPLATES = {
    "JOB_DONE_URL_TEMPLATE": ("RUNPOD_WEBHOOK_POST_OUTPUT", "JOB_DONE_URL"),
    "JOB_STREAM_URL_TEMPLATE": ("RUNPOD_WEBHOOK_POST_STREAM", "JOB_STREAM_URL"),
}
_FILLED = {"JOB_DONE_URL": "JOB_DONE_URL_TEMPLATE", "JOB_STREAM_URL": "JOB_STREAM_URL_TEMPLATE"}
_cache: Dict[str, str] = {}

__all__ = ["send_result", "stream_result", "log", "JOB_DONE_URL", "JOB_STREAM_URL",
           "JOB_DONE_URL_TEMPLATE", "JOB_STREAM_URL_TEMPLATE", "WORKER_ID"]


def __getattr__(name: str) -> Any:
    # runpod computes these at import; here the first lookup does, and the
    # value then stays fixed for the process, as runpod's would.
    if name == "WORKER_ID":
        return _cache.setdefault(name, os.environ.get("RUNPOD_POD_ID") or str(uuid.uuid4()))
    if name in _TEMPLATES:
        variable, placeholder = _TEMPLATES[name]
        return _cache.setdefault(name, str(os.environ.get(variable, placeholder)))
    if name in _FILLED:
        return _cache.setdefault(name, __getattr__(_FILLED[name]).replace("$RUNPOD_POD_ID", __getattr__("WORKER_ID")))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _post(job_data: Dict[str, Any], job: Dict[str, Any], stream_url: bool, is_stream: bool) -> None:
    job_id = str(job["id"])
    settings = Settings.from_env()
    client = None
    try:
        if (settings.job_stream_url if stream_url else settings.job_done_url) is None:
            variable = "RUNPOD_WEBHOOK_POST_STREAM" if stream_url else "RUNPOD_WEBHOOK_POST_OUTPUT"
            raise PlatformError(f"{variable} is not set")
        client = PlatformClient(settings)
        body = encode(job_data)
        if stream_url:
            client.post_stream(job_id, body)
        else:
            client.post_done(job_id, body, is_stream)
        log.debug("Intermediate results sent." if stream_url else "Results sent.", job_id)
    except PlatformError as exc:
        log.error(f"Failed to return job results. | {exc}", job_id)
    except (TypeError, ValueError) as exc:  # a body that is not JSON
        log.error(f"Error while returning job result. | {exc}", job_id)
    finally:
        if client is not None:
            client.close()
        # As in runpod: the final result (not a progress update) ends the job's log.
        if not stream_url and job_data.get("status") != "IN_PROGRESS":
            log.info("Finished.", job_id)


async def send_result(session: Any, job_data: Dict[str, Any], job: Dict[str, Any], is_stream: bool = False) -> None:
    """Post ``job_data`` to the job-done URL for ``job`` (``isStream`` as given)."""
    await asyncio.get_running_loop().run_in_executor(None, _post, job_data, job, False, is_stream)


async def stream_result(session: Any, job_data: Dict[str, Any], job: Dict[str, Any]) -> None:
    """Post ``job_data`` to the job-stream URL for ``job``."""
    await asyncio.get_running_loop().run_in_executor(None, _post, job_data, job, True, False)
