"""``progress_update(job, progress)``: report progress of a running job.

The job's runner is found by the job's id, so the call works from any
thread of the handler, in any worker of the process. The routes are a dict
read and changed without a lock: each access is one dict operation, atomic
under the GIL (and under a free-threaded build's per-dict locking), and
every job thread binds and unbinds once per job, so a shared lock here was
one more place for hundreds of threads ending a wave together to queue.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Protocol

log = logging.getLogger("slotworker")


class _Reporter(Protocol):
    def post_progress(self, job_id: str, value: Any) -> None: ...


_runners: Dict[str, _Reporter] = {}


def bind(job_id: str, runner: _Reporter) -> None:
    """Route progress for ``job_id`` to ``runner`` while the job runs."""
    _runners[job_id] = runner


def unbind(job_id: str) -> None:
    """The job is over: drop its route."""
    _runners.pop(job_id, None)


def progress_update(job: Dict[str, Any], progress: Any) -> None:
    """Post ``{"status": "IN_PROGRESS", "output": progress}`` for a running job.

    Sent synchronously from the caller's thread, so an update always reaches
    the platform before the job's final result. A job that is not running
    (or local test mode) logs the update instead.
    """
    job_id = job.get("id") if isinstance(job, dict) else None
    runner = _runners.get(job_id) if job_id is not None else None
    if runner is None:
        log.info("progress: %s", progress, extra={"job_id": job_id})
        return
    runner.post_progress(str(job_id), progress)
