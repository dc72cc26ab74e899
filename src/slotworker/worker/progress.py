"""``progress_update(job, progress)``: report progress of a running job.

The job's runner is found by the job's id, so the call works from any
thread of the handler, in any worker of the process.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, Protocol

log = logging.getLogger("slotworker")


class _Reporter(Protocol):
    def post_progress(self, job_id: str, value: Any) -> None: ...


_lock = threading.Lock()
_runners: Dict[str, _Reporter] = {}


def bind(job_id: str, runner: _Reporter) -> None:
    """Route progress for ``job_id`` to ``runner`` while the job runs."""
    with _lock:
        _runners[job_id] = runner


def unbind(job_id: str) -> None:
    """The job is over: drop its route."""
    with _lock:
        _runners.pop(job_id, None)


def progress_update(job: Dict[str, Any], progress: Any) -> None:
    """Post ``{"status": "IN_PROGRESS", "output": progress}`` for a running job.

    Sent synchronously from the caller's thread, so an update always reaches
    the platform before the job's final result. A job that is not running
    (or local test mode) logs the update instead.
    """
    job_id = job.get("id") if isinstance(job, dict) else None
    with _lock:
        runner = _runners.get(job_id) if job_id is not None else None
    if runner is None:
        log.info("progress: %s", progress, extra={"job_id": job_id})
        return
    runner.post_progress(str(job_id), progress)
