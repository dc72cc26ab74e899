"""The platform's HTTP client: take, done, stream, ping and stop requests.

Every request goes out on the calling thread's own keep-alive connection
(:mod:`.transport`, framed by h11), with the headers a
:class:`requests.Session` sends (its defaults and ours), URLs quoted as it
quotes them and answers decoded as it decodes them. Result posts have
connections of their own, apart from the takes, pings and stop polls, so
that the posts' answer times (which the posters read) are the posts'
alone. None retries on its own: the fetch loop owns the takes' backoff and
:func:`deliver` is the one retry loop of result posts, so the grace
deadline bounds every attempt. Every call has a timeout and every answer a
size cap. Redirects are never followed, so the API key is sent only to the
URLs the platform gave us.
"""

from __future__ import annotations

import json
import logging
import platform as _platform
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

import requests
from requests.utils import get_encoding_from_headers, guess_json_utf, requote_uri

from .._version import __version__
from ..backoff import Backoff
from ..config import PROTOCOL_VERSION, Settings, add_query, job_url, query_suffix
from .lifecycle import Lifecycle
from .transport import BodyLost, Refused, SendFailed, TooLarge, Transport, encode_headers
from .trust import trust_context

log = logging.getLogger("slotworker")

TAKE_TIMEOUT = (10.0, 90.0)  # (connect, read): the platform long-polls a take
POST_TIMEOUT = (10.0, 60.0)
PING_TIMEOUT = 5.0
THROTTLE_BACKOFF = 5.0  # what runpod waits after a 429
#: Waits between tries of a result post: the first, and the cap it doubles up to.
RESULT_BACKOFF = (0.2, 5.0)

MIB = 1 << 20
#: The most a take's answer may carry per job asked for (runpod documents
#: 10 MB for /run and 20 MB for /runsync inputs), and in all.
TAKE_CAP_PER_JOB = 20 * MIB + 64 * 1024
TAKE_CAP = 512 * MIB
#: The most a stop poll's, a ping's and a result post's answer may carry.
STOP_POLL_CAP = 1 * MIB
PING_CAP = 64 * 1024
POST_ANSWER_CAP = 1 * MIB


def take_cap(n: int) -> int:
    """How many bytes (decoded) a take's answer for ``n`` jobs may carry."""
    return min(TAKE_CAP, TAKE_CAP_PER_JOB * max(1, n))

Timeout = Tuple[float, float]
T = TypeVar("T")


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


class PlatformClient:
    """The worker-side requests of the protocol (docs/protocol.md) for one worker."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        trust = _shared(trust_context)  # one TLS context for both, made on the first HTTPS request
        self._posts = Transport(trust)
        # What session.post() sent: requests' own defaults (Accept, Connection),
        # ours, and the form type and charset runpod sends; a post adds its job id.
        # Encoded once (a job id is added to each); Refused, when one cannot be
        # sent at all, is kept and raised by each request.
        self._post_headers, self._headers_refused = _encoded({
            **requests.utils.default_headers(), **_headers(settings.api_key),
            "Content-Type": "application/x-www-form-urlencoded", "charset": "utf-8"})
        # Takes, pings and stop polls: what session.get() sent: requests'
        # default headers, then ours.
        self._gets = Transport(trust)
        self._get_headers, self._get_refused = _encoded({**requests.utils.default_headers(), **_headers(settings.api_key)})
        # Quoted once here as requests would quote them on every call ($ID
        # survives), with the query each post adds, worked out once too.
        self._done_url = requote_uri(settings.job_done_url or "")
        self._stream_url = requote_uri(settings.job_stream_url or "")
        self._done_query = {is_stream: query_suffix(self._done_url, isStream="true" if is_stream else "false")
                            for is_stream in (False, True)}
        self._stream_query = query_suffix(self._stream_url, isStream="false")
        self._ping_url = requote_uri(settings.ping_url) if settings.ping_url is not None else None
        self._stop_url = requote_uri(settings.job_stop_url) if settings.job_stop_url is not None else None

    def close(self) -> None:
        """Close every connection."""
        self._posts.close()
        self._gets.close()

    # -- take ---------------------------------------------------------------
    def take(self, n: int, job_in_progress: bool) -> List[Any]:
        """Ask for up to ``n`` jobs; returns what came, maybe nothing.

        The jobs are returned as the platform sent them: checking each one
        is the caller's job, so one malformed job cannot hide the others.
        """
        try:
            status, body, content_type = self._get(requote_uri(self.settings.take_url(n, job_in_progress)),
                                                   TAKE_TIMEOUT, take_cap(n))
        except PlatformError as exc:
            if isinstance(exc.__cause__, BodyLost):
                # The platform answered, so it may have handed out jobs in the
                # body that never arrived: said as loudly as a body it sent wrong.
                what = "too large" if isinstance(exc.__cause__, TooLarge) else "cut short"
                raise BadResponse(f"LOST?: the take's answer was {what} ({exc.__cause__}); jobs in it "
                                  "will not run here (the platform requeues them on its job timeout)") from exc
            raise
        if status == 204 or status == 400:  # 400: FlashBoot, no job
            return []
        if status == 429:
            raise Throttled("take throttled (429)")
        text = _text(body, content_type)
        if status >= 300:
            raise PlatformError(f"take answered {status}: {text[:200]!r}")
        if not body.strip():
            return []
        try:
            jobs = json.loads(text)
        except ValueError as exc:
            raise BadResponse(f"take answered a body that is not JSON: {text[:200]!r}") from exc
        if isinstance(jobs, dict):
            return [jobs]
        if isinstance(jobs, list):
            return jobs
        if jobs is None:
            return []
        raise BadResponse(f"take answered {type(jobs).__name__}, not a job or a list of jobs")

    # -- results ------------------------------------------------------------
    def _post_json(self, url: str, job_id: str, body: bytes, timeout: Timeout) -> None:
        # The templates were quoted once, as requests would quote every URL;
        # job ids and queries are quoted when built.
        try:
            if self._headers_refused is not None:
                raise Refused(self._headers_refused)
            headers = self._post_headers + encode_headers({"X-Request-ID": str(job_id)})
            answer = self._posts.request("POST", url, headers, body, timeout, POST_ANSWER_CAP)
            status, text = answer.status, answer.body
        except BodyLost as exc:  # the status came: it is the post's answer
            status, text = exc.status, b""
        except SendFailed as exc:
            raise PlatformError(str(exc)) from exc
        except Refused as exc:  # a header requests refuses: a job id with a line break
            raise Unsendable(str(exc)) from exc
        if status < 300:
            return
        if status >= 500 or status in (408, 425, 429):  # worth another try
            raise PlatformError(f"platform answered {status}")
        raise Rejected(status, text.decode("utf-8", "replace"))

    def answer_seconds(self) -> Optional[float]:
        """How long the platform takes to answer a result post (the least of the last few; None before one)."""
        return self._posts.answer_seconds()

    def post_done(self, job_id: str, body: bytes, is_stream: bool, timeout: Timeout = POST_TIMEOUT) -> None:
        """POST a job's final result (or a progress update) once; raises on failure."""
        assert self.settings.job_done_url is not None
        url = job_url(self._done_url, job_id) + self._done_query[bool(is_stream)]
        self._post_json(url, job_id, body, timeout)

    def post_stream(self, job_id: str, body: bytes, timeout: Timeout = POST_TIMEOUT) -> None:
        """POST one stream chunk (``isStream=false``, as runpod sends it)."""
        assert self.settings.job_stream_url is not None
        url = job_url(self._stream_url, job_id) + self._stream_query
        self._post_json(url, job_id, body, timeout)

    # -- heartbeat and stop channel -----------------------------------------
    def ping(self, job_ids: List[str]) -> int:
        """Send one heartbeat; returns the HTTP status."""
        assert self._ping_url is not None
        url = add_query(self._ping_url, job_id=",".join(job_ids) or None, runpod_version=PROTOCOL_VERSION)
        status, _, _ = self._get(url, (PING_TIMEOUT, PING_TIMEOUT), PING_CAP)
        return status

    def poll_stop(self) -> List[str]:
        """Long-poll the stop channel; the ids of jobs to stop, maybe none."""
        assert self._stop_url is not None
        status, body, content_type = self._get(self._stop_url, TAKE_TIMEOUT, STOP_POLL_CAP)
        if status == 204:
            return []
        if status == 429:
            raise Throttled("stop poll throttled (429)")
        if status >= 300:
            raise PlatformError(f"stop poll answered {status}")
        try:
            payload = json.loads(_text(body, content_type))
        except ValueError as exc:
            raise BadResponse("stop poll answered a body that is not JSON") from exc
        ids = payload.get("jobsToStop", []) if isinstance(payload, dict) else []
        if not isinstance(ids, list):
            raise BadResponse("stop poll: jobsToStop is not a list")
        return [i for i in ids if isinstance(i, str)]

    def _get(self, url: str, timeout: Timeout, cap: int) -> Tuple[int, bytes, str]:
        """GET: status, body (decoded, at most ``cap`` bytes), Content-Type."""
        try:
            if self._get_refused is not None:
                raise Refused(self._get_refused)
            answer = self._gets.request("GET", url, self._get_headers, None, timeout, cap)
        except (SendFailed, Refused) as exc:
            raise PlatformError(str(exc)) from exc
        return answer.status, answer.body, answer.header(b"content-type")


def _encoded(headers: Dict[str, str]) -> Tuple[List[Tuple[bytes, bytes]], Optional[str]]:
    """``headers`` encoded for the transport, or ``([], why)`` when they cannot be sent."""
    try:
        return encode_headers(headers), None
    except Refused as exc:
        return [], str(exc)


def _shared(factory: Callable[[], T]) -> Callable[[], T]:
    """``factory``, called at most once: later calls return what the first made."""
    made: List[T] = []
    lock = threading.Lock()

    def once() -> T:
        with lock:
            if not made:
                made.append(factory())
            return made[0]
    return once


def _text(body: bytes, content_type: str) -> str:
    """An answer's body as text, decoded by the rules of requests' ``Response.json()``.

    The charset the answer names, or the one requests assumes for its
    type (UTF-8 for JSON); else the UTF encoding that JSON text's first
    bytes show. Bytes that do not decode become U+FFFD, as in
    ``Response.text``, so one bad byte in a job's input does not make a
    whole take unreadable. (Where the answer names no type at all and its
    bytes are not UTF-8, requests guessed a charset from them; this does
    not guess.)
    """
    encoding = get_encoding_from_headers({"content-type": content_type}) or guess_json_utf(body) or "utf-8"
    try:
        return body.decode(encoding, "replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", "replace")


#: What ``json.dumps(body, ensure_ascii=False)`` builds on every call; it keeps no state between encodes.
_ENCODER = json.JSONEncoder(ensure_ascii=False)


def encode(body: Any) -> bytes:
    """A result body as the platform reads it: JSON text, UTF-8, no ASCII escapes."""
    return _ENCODER.encode(body).encode("utf-8")


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
