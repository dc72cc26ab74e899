"""The worker's view of its environment, read once when the worker starts.

Nothing here runs at import time: :meth:`Settings.from_env` is called by the
worker at start-up, so tests and embedders can hand it any mapping.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Mapping, Optional
from urllib.parse import quote, urlencode

#: The runpod SDK release whose wire protocol slotworker speaks; sent where
#: runpod sends its own version (heartbeat query, error reports).
PROTOCOL_VERSION = "1.12.0"

DEFAULT_PING_INTERVAL_MS = 10000
#: A smaller (or zero, or negative) RUNPOD_PING_INTERVAL would ping in a
#: tight loop; it is raised to this.
MIN_PING_INTERVAL_MS = 50


def add_query(url: str, **params: object) -> str:
    """Append query parameters to ``url``, keeping the query it already has.

    ``None`` values are left out, as the platform expects for an empty
    ``job_id`` on the heartbeat.
    """
    pairs = {k: v for k, v in params.items() if v is not None}
    if not pairs:
        return url
    sep = "&" if "?" in url else "?"
    return url + sep + urlencode(pairs, safe=",$")


def _fill(template: Optional[str], worker_id: str, job_placeholder: bool) -> Optional[str]:
    """Replace the worker-id placeholders of a URL template.

    Both spellings stand for the worker id, except that in the result URLs
    ``$ID`` is the job id and is filled per job by :func:`job_url`.
    """
    if not template:
        return None
    url = template.replace("$RUNPOD_POD_ID", worker_id)
    if not job_placeholder:
        url = url.replace("$ID", worker_id)
    return url


def job_url(template: str, job_id: str) -> str:
    """The result URL for one job: ``$ID`` replaced by the (quoted) job id."""
    return template.replace("$ID", quote(str(job_id), safe=""))


@dataclass(frozen=True)
class Settings:
    """Platform URLs and identity of one worker process."""

    job_take_url: Optional[str]
    job_done_url: Optional[str]
    job_stream_url: Optional[str]
    ping_url: Optional[str]
    api_key: str
    worker_id: str
    ping_interval: float
    endpoint_id: Optional[str]
    hostname: Optional[str]
    log_level: Optional[str]

    @property
    def deployed(self) -> bool:
        """True when the platform gave us a job-take URL."""
        return self.job_take_url is not None

    @property
    def job_stop_url(self) -> Optional[str]:
        """The stop channel, derived from the take URL; None when it cannot be."""
        if not self.job_take_url or "/job-take/" not in self.job_take_url:
            return None
        return self.job_take_url.replace("/job-take/", "/job-stop/", 1)

    def take_url(self, batch_size: int, job_in_progress: bool) -> str:
        """The take URL for ``batch_size`` jobs (batch endpoint when > 1)."""
        assert self.job_take_url is not None
        url = self.job_take_url
        if batch_size > 1:
            url = url.replace("/job-take/", "/job-take-batch/", 1)
            url = add_query(url, batch_size=batch_size)
        return add_query(url, job_in_progress=1 if job_in_progress else 0)

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "Settings":
        """Read the RunPod environment (``os.environ`` by default)."""
        env = os.environ if env is None else env
        worker_id = env.get("RUNPOD_POD_ID") or str(uuid.uuid4())
        try:
            interval_ms = int(env.get("RUNPOD_PING_INTERVAL") or DEFAULT_PING_INTERVAL_MS)
        except ValueError:
            interval_ms = DEFAULT_PING_INTERVAL_MS
        return cls(
            job_take_url=_fill(env.get("RUNPOD_WEBHOOK_GET_JOB"), worker_id, False),
            job_done_url=_fill(env.get("RUNPOD_WEBHOOK_POST_OUTPUT"), worker_id, True),
            job_stream_url=_fill(env.get("RUNPOD_WEBHOOK_POST_STREAM"), worker_id, True),
            ping_url=_fill(env.get("RUNPOD_WEBHOOK_PING"), worker_id, False),
            api_key=env.get("RUNPOD_AI_API_KEY", ""),
            worker_id=worker_id,
            ping_interval=max(interval_ms, MIN_PING_INTERVAL_MS) / 1000.0,
            endpoint_id=env.get("RUNPOD_ENDPOINT_ID"),
            hostname=env.get("RUNPOD_POD_HOSTNAME"),
            log_level=env.get("RUNPOD_LOG_LEVEL") or env.get("RUNPOD_DEBUG_LEVEL"),
        )
