"""The platform's HTTP client: take, done, stream, ping and stop requests.

One pooled :class:`requests.Session` per role (take, and heartbeat with the
stop channel); result posts, one or more per job, go out on each posting
thread's own keep-alive connection (:mod:`.thread_connections`). None retries
on its own: the fetch loop owns the takes' backoff and :func:`deliver` is
the one retry loop of result posts, so the grace deadline bounds every
attempt. Every call has a timeout.
Redirects are never followed, so the API key is sent only to the URLs the
platform gave us.
"""

from __future__ import annotations

import json
import logging
import platform as _platform
from typing import Any, Callable, Dict, List, Optional, Tuple

import requests
from requests.adapters import HTTPAdapter
from requests.utils import requote_uri

from .._version import __version__
from ..backoff import Backoff
from ..config import PROTOCOL_VERSION, Settings, add_query, job_url
from .lifecycle import Lifecycle
from .thread_connections import ThreadConnections, SendFailed

log = logging.getLogger("slotworker")

TAKE_TIMEOUT = (10.0, 90.0)  # (connect, read): the platform long-polls a take
POST_TIMEOUT = (10.0, 60.0)
PING_TIMEOUT = 5.0
THROTTLE_BACKOFF = 5.0  # what runpod waits after a 429
#: Waits between tries of a result post: the first, and the cap it doubles up to.
RESULT_BACKOFF = (0.2, 5.0)

Timeout = Tuple[float, float]


class PlatformError(Exception):
    """The platform answered with an error or could not be reached."""


class Throttled(PlatformError):
    """The platform answered 429: back off before asking again."""


class BadResponse(PlatformError):
    """The platform answered something that is not what the protocol says."""


class Rejected(PlatformError):
    """The platform refused a result with a 4xx that a retry will not fix."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"platform answered {status}: {text[:200]}")
        self.status = status


class Unsendable(Rejected):
    """The request cannot be sent at all (a header http.client refuses): no retry fixes it."""

    def __init__(self, reason: str) -> None:
        PlatformError.__init__(self, f"request not sendable: {reason}")
        self.status = 0


def user_agent() -> str:
    """``slotworker/<version> (<os> <release>; <arch>) Language/Python <version>``."""
    return (f"slotworker/{__version__} ({_platform.system()} {_platform.release()}; "
            f"{_platform.machine()}) Language/Python {_platform.python_version()}"
            f" (runpod-protocol {PROTOCOL_VERSION})")


def _headers(api_key: str) -> Dict[str, str]:
    """The headers every request carries."""
    return {
        "Content-Type": "application/json",
        "Authorization": api_key,
        "User-Agent": user_agent(),
        "Accept-Encoding": "gzip, deflate",
    }


def _session(api_key: str, pool_size: int) -> requests.Session:
    session = requests.Session()
    session.headers.update(_headers(api_key))
    # Never pick up credentials or proxies from the environment/.netrc: the
    # platform URLs are the only place our Authorization goes.
    session.trust_env = False
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=pool_size, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class PlatformClient:
    """The worker-side requests of the protocol (docs/protocol.md) for one worker."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._take = _session(settings.api_key, 4)
        self._connections = ThreadConnections()
        # What session.post() sent: requests' own defaults (Accept, Connection),
        # ours, and the form type and charset runpod sends.
        self._post_headers = {**requests.utils.default_headers(), **_headers(settings.api_key),
                              "Content-Type": "application/x-www-form-urlencoded", "charset": "utf-8"}
        self._ping = _session(settings.api_key, 2)
        # Quoted once here as requests would quote them on every call ($ID survives).
        self._done_url = requote_uri(settings.job_done_url or "")
        self._stream_url = requote_uri(settings.job_stream_url or "")

    def close(self) -> None:
        """Close every pooled connection."""
        for session in (self._take, self._ping):
            session.close()
        self._connections.close()

    # -- take ---------------------------------------------------------------
    def take(self, n: int, job_in_progress: bool) -> List[Any]:
        """Ask for up to ``n`` jobs; returns what came, maybe nothing.

        The jobs are returned as the platform sent them: checking each one
        is the caller's job, so one malformed job cannot hide the others.
        """
        url = self.settings.take_url(n, job_in_progress)
        try:
            response = self._take.get(url, timeout=TAKE_TIMEOUT, allow_redirects=False)
        except requests.RequestException as exc:
            raise PlatformError(f"take failed: {type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if status == 204 or status == 400:  # 400: FlashBoot, no job
            return []
        if status == 429:
            raise Throttled("take throttled (429)")
        if status >= 300:
            raise PlatformError(f"take answered {status}: {response.text[:200]!r}")
        if not response.content or not response.content.strip():
            return []
        try:
            jobs = response.json()
        except ValueError as exc:
            raise BadResponse(f"take answered a body that is not JSON: {response.text[:200]!r}") from exc
        if isinstance(jobs, dict):
            return [jobs]
        if isinstance(jobs, list):
            return jobs
        if jobs is None:
            return []
        raise BadResponse(f"take answered {type(jobs).__name__}, not a job or a list of jobs")

    # -- results ------------------------------------------------------------
    def _post_json(self, url: str, job_id: str, body: bytes, timeout: Timeout) -> None:
        # Sent on the calling thread's own keep-alive connection
        # (thread_connections): the headers and bytes of session.post() on the
        # wire, without a pool, PreparedRequest or Response around them. The
        # templates were quoted once, as requests would quote every URL; job
        # ids and queries are quoted when built.
        headers = dict(self._post_headers)
        headers["X-Request-ID"] = str(job_id)
        headers["Content-Length"] = str(len(body))
        try:
            status, text = self._connections.post(url, body, headers, timeout)
        except SendFailed as exc:
            raise PlatformError(str(exc)) from exc
        except ValueError as exc:  # a header http.client refuses: a job id with a line break
            raise Unsendable(str(exc)) from exc
        if status < 300:
            return
        if status >= 500 or status in (408, 425, 429):  # worth another try
            raise PlatformError(f"platform answered {status}")
        raise Rejected(status, text)

    def answer_seconds(self) -> Optional[float]:
        """How long the platform takes to answer a result post (the least of the last few; None before one)."""
        return self._connections.answer_seconds()

    def post_done(self, job_id: str, body: bytes, is_stream: bool, timeout: Timeout = POST_TIMEOUT) -> None:
        """POST a job's final result (or a progress update) once; raises on failure."""
        assert self.settings.job_done_url is not None
        url = add_query(job_url(self._done_url, job_id),
                        isStream="true" if is_stream else "false")
        self._post_json(url, job_id, body, timeout)

    def post_stream(self, job_id: str, body: bytes, timeout: Timeout = POST_TIMEOUT) -> None:
        """POST one stream chunk (``isStream=false``, as runpod sends it)."""
        assert self.settings.job_stream_url is not None
        url = add_query(job_url(self._stream_url, job_id), isStream="false")
        self._post_json(url, job_id, body, timeout)

    # -- heartbeat and stop channel -----------------------------------------
    def ping(self, job_ids: List[str]) -> int:
        """Send one heartbeat; returns the HTTP status."""
        assert self.settings.ping_url is not None
        url = add_query(self.settings.ping_url, job_id=",".join(job_ids) or None,
                        runpod_version=PROTOCOL_VERSION)
        try:
            response = self._ping.get(url, timeout=PING_TIMEOUT, allow_redirects=False)
        except requests.RequestException as exc:
            raise PlatformError(f"ping failed: {type(exc).__name__}: {exc}") from exc
        return response.status_code

    def poll_stop(self) -> List[str]:
        """Long-poll the stop channel; the ids of jobs to stop, maybe none."""
        url = self.settings.job_stop_url
        assert url is not None
        try:
            response = self._ping.get(url, timeout=TAKE_TIMEOUT, allow_redirects=False)
        except requests.RequestException as exc:
            raise PlatformError(f"stop poll failed: {type(exc).__name__}: {exc}") from exc
        if response.status_code == 204:
            return []
        if response.status_code == 429:
            raise Throttled("stop poll throttled (429)")
        if response.status_code >= 300:
            raise PlatformError(f"stop poll answered {response.status_code}")
        try:
            payload = response.json()
        except ValueError as exc:
            raise BadResponse("stop poll answered a body that is not JSON") from exc
        ids = payload.get("jobsToStop", []) if isinstance(payload, dict) else []
        if not isinstance(ids, list):
            raise BadResponse("stop poll: jobsToStop is not a list")
        return [i for i in ids if isinstance(i, str)]


def encode(body: Any) -> bytes:
    """A result body as the platform reads it: JSON text, UTF-8, no ASCII escapes."""
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def deliver(send: Callable[[Timeout], None], job_id: str, what: str, lifecycle: Lifecycle,
            wait: Optional[Callable[[Callable[[], None]], None]] = None) -> bool:
    """Call ``send(timeout)`` until it succeeds, backing off between tries.

    The one retry loop of result posts (the session under it does not
    retry). Once shutdown starts, each try's timeout and each wait are cut
    to the grace left, and a failure past the grace period gives up.
    :class:`Rejected` (the platform refuses the body outright) is raised at
    once. Returns whether it was delivered. ``wait``, if given, runs each
    wait between tries (a poster thread steps aside for it).
    """
    backoff = Backoff(*RESULT_BACKOFF)
    attempt = 0
    while True:
        attempt += 1
        try:
            send(lifecycle.bound(POST_TIMEOUT))
            if attempt > 1:
                log.info("%s delivered after %d attempts", what, attempt, extra={"job_id": job_id})
            return True
        except Rejected:
            raise
        except PlatformError as exc:
            if lifecycle.past_grace():
                log.error("LOST: %s could not be delivered before shutdown (%s)", what, exc,
                          extra={"job_id": job_id})
                return False
            delay = backoff.next()
            log.warning("%s not delivered (attempt %d): %s; retrying in %.1fs",
                        what, attempt, exc, delay, extra={"job_id": job_id})
            if wait is None:
                lifecycle.pause(delay)
            else:
                wait(lambda: lifecycle.pause(delay))


__all__ = ["PlatformClient", "PlatformError", "Throttled", "BadResponse", "Rejected", "Unsendable",
           "encode", "deliver", "user_agent", "THROTTLE_BACKOFF"]
