"""The console's HTTP routes, answered for the platform's server.

    GET /                       the console page
    GET /docs                   the interactive API reference
    GET /console/static/{name}  the page's script, style and icon
    GET /console/jobs           a page of the job list (?limit=, ?before=)
    GET /console/jobs/{id}      one job in detail
    GET /console/workers        queue depth, counters, workers now
    GET /console/timeline       in progress per worker and takes (?window=s)

`route` returns None for any other path, so the server answers its 404.
The pages are served with a Content-Security-Policy that allows only this
origin's script and style (no inline script), and read from package data
when requested.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Dict, List, Optional

from ..state import JobStore
from . import jobs, timeline

#: Pages by path, and the files they may load, with their content types.
PAGES = {"": "console.html", "docs": "docs.html"}
STATIC = {
    "console.js": "text/javascript; charset=utf-8",
    "docs.js": "text/javascript; charset=utf-8",
    "common.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
HTML = "text/html; charset=utf-8"
JSON = "application/json"

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
#: Sent with every console answer; the CSP only matters on the pages.
COMMON_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
PAGE_HEADERS = dict(COMMON_HEADERS, **{
    "Content-Security-Policy": CSP,
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
})


@dataclass
class Answer:
    """A complete HTTP answer for the server to write."""

    status: int
    body: bytes
    content_type: str = JSON
    headers: Dict[str, str] = field(default_factory=lambda: dict(COMMON_HEADERS))


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _json(obj: Any, status: int = 200) -> Answer:
    return Answer(status, json.dumps(obj).encode("utf-8"))


def _static(name: str, content_type: str, headers: Dict[str, str]) -> Answer:
    data = resources.files(__package__).joinpath("static").joinpath(name).read_bytes()
    return Answer(200, data, content_type, dict(headers))


def _only(query: Dict[str, str], allowed: List[str]) -> None:
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        raise _Refused(400, f"unknown query parameter(s): {', '.join(unknown)}"
                            f" (allowed: {', '.join(allowed) or 'none'})")


def _integer(query: Dict[str, str], name: str, default: Optional[int], low: int, high: int) -> Optional[int]:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _Refused(400, f"{name} must be an integer") from None
    if not low <= value <= high:
        raise _Refused(400, f"{name} must be from {low} to {high}")
    return value


def _seconds(query: Dict[str, str], name: str, default: float, low: float, high: float) -> float:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise _Refused(400, f"{name} must be a number of seconds") from None
    if not (math.isfinite(value) and low <= value <= high):
        raise _Refused(400, f"{name} must be from {low:g} to {high:g} seconds")
    return value


def _platform_info(platform: Any) -> Dict[str, Any]:
    return {
        "endpoint": getattr(platform, "endpoint", None),
        "takeCost": getattr(platform, "take_cost", None),
        "longPoll": getattr(platform, "long_poll", None),
        "jobTimeout": getattr(platform, "job_timeout", None),
    }


def route(platform: Any, method: str, parts: List[str], query: Dict[str, str]) -> Optional[Answer]:
    """The answer to a console request, or None when the path is not the console's.

    `platform` is the served `Platform` (its `store` and settings are read);
    `parts` are the decoded path segments, `query` the query parameters.
    """
    path = "/".join(parts)
    if path not in PAGES and not (parts and parts[0] == "console"):
        return None
    if method != "GET":
        return _json({"error": f"use GET for /{path}", "status": 405}, 405)
    try:
        return _answer(platform, path, parts, query)
    except _Refused as exc:
        return _json({"error": exc.message, "status": exc.status}, exc.status)


def _answer(platform: Any, path: str, parts: List[str], query: Dict[str, str]) -> Answer:
    store: JobStore = platform.store
    if path in PAGES:
        return _static(PAGES[path], HTML, PAGE_HEADERS)
    rest = parts[1:]
    if len(rest) == 2 and rest[0] == "static" and rest[1] in STATIC:
        return _static(rest[1], STATIC[rest[1]], COMMON_HEADERS)
    if rest == ["jobs"]:
        _only(query, ["limit", "before"])
        limit = _integer(query, "limit", jobs.PAGE_DEFAULT, 1, jobs.PAGE_MAX)
        before = _integer(query, "before", None, 0, 2 ** 62)
        return _json(jobs.jobs_page(store, before, limit or jobs.PAGE_DEFAULT))
    if len(rest) == 2 and rest[0] == "jobs":
        _only(query, [])
        detail = jobs.job_detail(store, rest[1])
        if detail is None:
            raise _Refused(404, f"unknown job id: {rest[1]}")
        return _json(detail)
    if rest == ["workers"]:
        _only(query, [])
        return _json(timeline.workers_view(store, _platform_info(platform)))
    if rest == ["timeline"]:
        _only(query, ["window"])
        window = _seconds(query, "window", timeline.WINDOW_DEFAULT, 1.0, timeline.WINDOW_MAX)
        return _json(timeline.timeline_view(store, window))
    raise _Refused(404, f"no such console route: GET /{path}")
