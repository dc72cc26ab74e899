"""Fuzzing the local platform's HTTP API: random methods, paths, queries,
headers and bodies on the client routes, the console's routes and the worker
routes. It must never answer 5xx (no faults are configured here) and must
stay up."""

from __future__ import annotations

import http.client
import json
from typing import Any, Dict, Iterator, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slotworker.platform import Platform

EXAMPLES = 300

# A thread of the platform dying (a webhook sender, a request handler) is a
# failure here, not a warning.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

segment = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="/?#%"),
                  min_size=0, max_size=12)
job_id = st.one_of(st.just("known-job"), st.uuids().map(str), segment)
worker = st.one_of(st.just("w1"), segment)
small_ms = st.integers(min_value=-5, max_value=150).map(str)
query_value = st.one_of(small_ms, segment, st.just(""), st.just("1"), st.just("true"))
query = st.dictionaries(st.sampled_from(["wait", "batch_size", "job_in_progress", "job_id", "all",
                                         "runpod_version", "isStream", "gpu", "x",
                                         "limit", "before", "window"]),
                        query_value, max_size=4)

CLIENT = ["run", "runsync", "status/{job}", "stream/{job}", "cancel/{job}", "health", "openapi.json",
          "purge-queue", "{seg}", "{seg}/{seg}",
          # The console: its pages, files and JSON routes.
          "", "docs", "console/static/console.js", "console/static/{seg}", "console/jobs",
          "console/jobs/{job}", "console/workers", "console/timeline", "console/{seg}"]
#: The only answers that are not JSON: the console's pages and files.
NOT_JSON = {"text/html; charset=utf-8", "text/javascript; charset=utf-8", "text/css; charset=utf-8",
            "image/svg+xml"}
WORKER = ["job-take/{worker}", "job-take-batch/{worker}", "job-done/{worker}/{job}",
          "job-stream/{worker}/{job}", "ping/{worker}", "job-stop/{worker}", "job-done/{worker}",
          "job-take/{worker}/{seg}", "ping"]


@st.composite
def paths(draw: Any) -> str:
    if draw(st.booleans()):
        template = draw(st.sampled_from(CLIENT))
        prefix = draw(st.sampled_from(["", "/v2/local", "/v2/{seg}"]))
    else:
        template = draw(st.sampled_from(WORKER))
        prefix = draw(st.sampled_from(["/v2/local", "/v2/{seg}"]))
    path = f"{prefix}/{template}".format(job=draw(job_id), worker=draw(worker), seg=draw(segment))
    from urllib.parse import quote, urlencode
    path = quote(path, safe="/")
    q = draw(query)
    if "runsync" in path or "stream" in path:
        q["wait"] = draw(small_ms)  # long polls kept short
    if q:
        path += "?" + urlencode(q)
    return path


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                           | st.text(max_size=20),
                           lambda children: st.lists(children, max_size=4)
                           | st.dictionaries(st.text(max_size=8), children, max_size=4),
                           max_leaves=10)
job_like = st.fixed_dictionaries({"input": json_values},
                                 optional={"id": st.one_of(st.text(max_size=10), st.integers()),
                                           "webhook": st.one_of(st.none(), st.integers(), st.text(max_size=10)),
                                           "output": json_values, "error": json_values,
                                           "status": st.sampled_from(["IN_PROGRESS", "COMPLETED", "x"])})
bodies = st.one_of(st.just(b""), st.binary(max_size=200),
                   json_values.map(lambda v: json.dumps(v).encode()),
                   job_like.map(lambda v: json.dumps(v).encode()))
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30)
headers = st.dictionaries(st.sampled_from(["Content-Type", "Authorization", "X-Request-ID", "Accept",
                                           "Accept-Encoding", "User-Agent", "X-Junk"]),
                          header_text, max_size=4)
methods = st.sampled_from(["GET", "POST", "PUT", "DELETE"])


@pytest.fixture(scope="module")
def fuzzed() -> Iterator[Platform]:
    with Platform(take_cost=0.0, long_poll=0.05, max_body=4096) as platform:
        platform.submit({"x": 1}, job_id="known-job")
        yield platform


def send_full(platform: Platform, method: str, path: str, body: bytes,
              hdrs: Dict[str, str]) -> Tuple[int, str, bytes]:
    """Status, Content-Type and body of one request on a new connection."""
    conn = http.client.HTTPConnection(platform.host, platform.port, timeout=10)
    try:
        conn.request(method, path, body=body if method in ("POST", "PUT") or body else None, headers=hdrs)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        conn.close()


def send(platform: Platform, method: str, path: str, body: bytes,
         hdrs: Dict[str, str]) -> Tuple[int, bytes]:
    status, _, answer = send_full(platform, method, path, body, hdrs)
    return status, answer


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(method=methods, path=paths(), body=bodies, hdrs=headers)
def test_random_requests_never_get_a_5xx(fuzzed, method, path, body, hdrs):
    status, content_type, answer = send_full(fuzzed, method, path, body, hdrs)
    assert status < 500, (method, path, body, hdrs, status, answer)
    if content_type in NOT_JSON:
        assert status == 200 and method == "GET", (method, path, status, content_type)
    elif answer:
        json.loads(answer)  # every other answer with a body is JSON, never a traceback page


@pytest.mark.parametrize("method", ["PATCH", "OPTIONS", "TRACE", "HEAD"])
def test_unsupported_methods_are_refused_with_405(fuzzed, method):
    status, _ = send(fuzzed, method, "/v2/local/job-take/w1", b"", {})
    assert status == 405, (method, status)


@pytest.mark.parametrize("webhook", ["G\U00038859", "ftp://x/y", "", "file:///etc/passwd"])
def test_a_webhook_that_is_not_an_http_url_is_refused(fuzzed, webhook):
    status, _ = send(fuzzed, "POST", "/run", json.dumps({"input": 1, "webhook": webhook}).encode(), {})
    assert status == 400


def test_the_platform_is_still_up_and_consistent_after_fuzzing(fuzzed):
    assert send(fuzzed, "GET", "/health", b"", {})[0] == 200
    status, answer = send(fuzzed, "POST", "/run", json.dumps({"input": {"after": True}}).encode(), {})
    assert status == 200
    job = json.loads(answer)["id"]
    assert send(fuzzed, "GET", f"/status/{job}", b"", {})[0] == 200
    counts = fuzzed.counts()
    assert counts["duplicates"] >= 0 and counts["submitted"] >= 2
