"""The console's job views: a page of the job list, and one job in detail.

Both are built from snapshots of the platform's `JobStore` records; every
value a handler produced is sent as bounded text (see `preview`), so a page
of jobs stays small however large their outputs are.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Dict, List, Optional

from ..state import FINAL_STATES, IN_PROGRESS, JobRecord, JobStore
from .preview import optional_preview, preview

#: Jobs in one page of the list: default and most.
PAGE_DEFAULT = 50
PAGE_MAX = 200

#: Characters of text per value in the list, and in the detail view.
LIST_TEXT = 600
DETAIL_TEXT = 64 * 1024
#: Stream chunks shown: the last few in the list, more in the detail view.
LIST_CHUNKS = 3
DETAIL_CHUNKS = 100
LIST_CHUNK_TEXT = 200
DETAIL_CHUNK_TEXT = 4 * 1024
#: An error text longer than this is not parsed for its message.
ERROR_PARSED_MAX = 256 * 1024


def _ms(seconds: Optional[float]) -> Optional[int]:
    return None if seconds is None else int(round(seconds * 1000))


def _timing(job: JobRecord, now: float) -> Dict[str, Any]:
    """Delay and execution time in ms; while a job waits or runs, so far."""
    final = job.status in FINAL_STATES
    if job.taken_at is not None:
        delay: Optional[float] = job.taken_at - job.submitted_at
    else:
        delay = None if final else now - job.submitted_at
    if job.taken_at is None:
        execution: Optional[float] = None
    elif job.finished_at is not None and job.finished_at >= job.taken_at:
        execution = job.finished_at - job.taken_at
    else:
        execution = None if final else now - job.taken_at
    return {"ageS": round(now - job.submitted_at, 3), "delayMs": _ms(delay), "executionMs": _ms(execution)}


_CLASS_NAME = re.compile(r"^<class '(?:[\w.]*\.)?(\w+)'>$")


def error_summary(error: Any) -> Optional[str]:
    """The "Type: message" of a worker's error report, or None when it is not one.

    A worker reports a failure as JSON text of {"error_type": "<class
    'RuntimeError'>", "error_message": ..., "error_traceback": ...}; its
    message is what a list of jobs should show, not the start of that text.
    """
    report = error
    if isinstance(error, str) and error.startswith("{") and len(error) <= ERROR_PARSED_MAX:
        try:
            report = json.loads(error)
        except ValueError:
            return None
    if not isinstance(report, dict) or not isinstance(report.get("error_message"), str):
        return None
    kind = report.get("error_type")
    if isinstance(kind, str):
        match = _CLASS_NAME.match(kind)
        return f"{match.group(1) if match else kind}: {report['error_message']}"
    return report["error_message"]


def job_view(job: JobRecord, index: Optional[int], now: float, detail: bool) -> Dict[str, Any]:
    """One job as the console shows it (`detail`: the larger limits, and the input)."""
    text = DETAIL_TEXT if detail else LIST_TEXT
    final = job.status in FINAL_STATES
    # As /status: the output once final; while running, the last progress update.
    if final:
        output, output_cut = optional_preview(job.output, job.has_output(), text)
    else:
        output, output_cut = optional_preview(job.progress, job.status == IN_PROGRESS and job.has_progress(), text)
    error, error_cut = optional_preview(job.error, final and job.has_error(), text)
    n_chunks = DETAIL_CHUNKS if detail else LIST_CHUNKS
    chunk_text = DETAIL_CHUNK_TEXT if detail else LIST_CHUNK_TEXT
    view: Dict[str, Any] = {
        "index": index,
        "id": job.id,
        "status": job.status,
        "workerId": job.worker_id,
        "retried": job.retried,
        **_timing(job, now),
        "output": output,
        "outputTruncated": output_cut,
        "error": error,
        "errorTruncated": error_cut,
        "errorSummary": None,
        "streamCount": len(job.stream),
        "streamTail": [preview(chunk, chunk_text)[0] for chunk in job.stream[-n_chunks:]],
    }
    if error is not None:
        summary = error_summary(job.error)
        view["errorSummary"] = None if summary is None else summary[:text]
    if detail:
        view["input"], view["inputTruncated"] = preview(job.input, text)
    return view


def jobs_page(store: JobStore, before: Optional[int], limit: int) -> Dict[str, Any]:
    """The newest `limit` jobs (or those submitted before index `before`), newest first."""
    total, page = store.page(before, limit)
    now = time.monotonic()
    jobs: List[Dict[str, Any]] = [job_view(job, index, now, detail=False) for index, job in page]
    older = page[-1][0] if page and page[-1][0] > 0 else None
    return {"total": total, "limit": limit, "jobs": jobs, "older": older}


def job_detail(store: JobStore, job_id: str) -> Optional[Dict[str, Any]]:
    """One job with the detail limits, or None when the id is unknown."""
    try:
        job = store.snapshot(job_id)
    except KeyError:
        return None
    return job_view(job, None, time.monotonic(), detail=True)
