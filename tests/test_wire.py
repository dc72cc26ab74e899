"""The wire check: slotworker's requests against the capture of runpod 1.12.0's.

``tests/data/runpod-1.12.0.jsonl`` is every request the real runpod worker made
while running ``handlers_plain.py`` / ``handlers_gen.py`` against a platform
stand-in that recorded each request. ``tests/data/handlers_*.py`` are the same
handlers with the one-line change ``import slotworker as runpod``; here they run
as real worker processes against the local platform, with the capture's
environment shape (worker id ``w1``, endpoint ``ep``, a ``?gpu=SIM`` query), and
every request slotworker makes is compared with the capture.

Compared exactly: method, path with query, ``Content-Type``, ``charset``,
``X-Request-ID`` on posts, ``Authorization`` present, and every post body byte
for byte, in order. The error body of a raising handler is compared by its
keys and its ``error_type`` / ``error_message`` / ``hostname`` / ``worker_id``
/ ``runpod_version`` (the traceback names other files).

Deliberate differences, pinned here so that they stay deliberate:
- ``User-Agent`` names slotworker (runpod's names ``RunPod-Python-SDK``);
- runpod's shared session keeps the last job's ``X-Request-ID`` on later takes
  and stop polls; slotworker sends ``X-Request-ID`` on result posts only;
- the order of heartbeats, stop polls and takes relative to each other (and
  how many of each) depends on timing, in both workers: only their paths and
  headers are compared, not their positions in the sequence;
- a job gives its slot back once its result is queued to post, so the next
  job's progress or stream posts may reach the platform before that result:
  posts are compared in order job by job, and as a whole by their paths.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from slotworker.platform import Platform

from support import spawn_script

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
CAPTURE = os.path.join(DATA, "runpod-1.12.0.jsonl")
API_KEY = "wire-test-secret-key"

PLAIN = "plain handler: dict, scalar, bool, none, empty, error_key, raise, unicode, progress"
REFRESH = "plain handler: refresh_worker (worker exits after)"
GEN = "generator handler"
GEN_AGG = "generator handler, return_aggregate_stream"

#: scenario -> (script, extra env, job ids in submission order, worker exits by itself)
SCENARIOS: Dict[str, Tuple[str, Dict[str, str], List[str], bool]] = {
    PLAIN: ("handlers_plain.py", {},
            ["job-dict", "job-scalar", "job-bool", "job-none", "job-empty", "job-error_key",
             "job-raise", "job-unicode", "job-progress"], False),
    REFRESH: ("handlers_plain.py", {}, ["job-refresh"], True),
    GEN: ("handlers_gen.py", {}, ["job-gen"], False),
    GEN_AGG: ("handlers_gen.py", {"AGG": "1"}, ["job-gen"], False),
}

TAKE = "/v2/ep/job-take/w1?gpu=SIM&job_in_progress=0"
STOP = "/v2/ep/job-stop/w1?gpu=SIM"
PING_IDLE = "/v2/ep/ping/w1?gpu=SIM&runpod_version=1.12.0"
ERROR_FIELDS = ("error_type", "error_message", "hostname", "worker_id", "runpod_version")


def load_capture() -> Dict[str, List[Dict[str, Any]]]:
    """The capture, split by scenario."""
    scenarios: Dict[str, List[Dict[str, Any]]] = {}
    current: Optional[List[Dict[str, Any]]] = None
    with open(CAPTURE, encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            record = json.loads(line)
            if "scenario" in record:
                current = scenarios.setdefault(record["scenario"], [])
            else:
                assert current is not None
                current.append(record)
    return scenarios


def capture_env(platform: Platform) -> Dict[str, str]:
    """The environment of the capture: worker w1, endpoint ep, ``?gpu=SIM``."""
    assert platform.endpoint == "ep"
    env = platform.worker_env("w1", API_KEY, query="gpu=SIM")
    env["RUNPOD_ENDPOINT_ID"] = "ep"
    # Frequent heartbeats, so one lands while job-progress sleeps.
    env["RUNPOD_PING_INTERVAL"] = "100"
    return env


def run_scenario(name: str) -> Tuple[List[Dict[str, Any]], str]:
    """Run one scenario's handler as a worker process; its requests and its output."""
    script, extra, job_ids, exits = SCENARIOS[name]
    with Platform(endpoint="ep", api_key=API_KEY, long_poll=0.2) as platform:
        for job_id in job_ids:
            platform.submit({"kind": job_id[len("job-"):]}, job_id=job_id)
        env = dict(capture_env(platform), **extra)
        proc = spawn_script(os.path.join(DATA, script), env=env, cwd=DATA)
        try:
            assert platform.wait_final(job_ids, timeout=30), f"{name}: jobs did not finish"
            if not exits:
                platform.wait_until(lambda p: any(e.kind == "ping" and not e.job_ids for e in p.events), 5)
                proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, f"{name}: worker exited {proc.returncode}\n{out}"
        events = [{"method": e.method, "path": e.path, "headers": e.headers, "body": e.body}
                  for e in platform.events]
    return events, out


@pytest.fixture(scope="module")
def capture() -> Dict[str, List[Dict[str, Any]]]:
    return load_capture()


@pytest.fixture(scope="module", params=list(SCENARIOS))
def scenario(request: Any, capture: Dict[str, List[Dict[str, Any]]]) -> Iterator[Tuple[str, List[Dict[str, Any]], List[Dict[str, Any]]]]:
    events, _ = run_scenario(request.param)
    yield request.param, capture[request.param], events


def posts(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [r for r in records if r["method"] == "POST"]


def header(record: Dict[str, Any], name: str) -> Optional[str]:
    for key, value in record["headers"].items():
        if key.lower() == name.lower():
            return value
    return None


def test_the_capture_has_every_scenario(capture: Dict[str, List[Dict[str, Any]]]) -> None:
    assert set(capture) == set(SCENARIOS)


def by_job(records: List[Dict[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    """Each job's posts, in order (the job id is the path's last part)."""
    jobs: Dict[str, List[Dict[str, Any]]] = {}
    for p in posts(records):
        jobs.setdefault(p["path"].split("?")[0].rsplit("/", 1)[-1], []).append(p)
    return jobs


Record = Dict[str, Any]


def paired(expected: List[Record], actual: List[Record]) -> Iterator[Tuple[Record, Record]]:
    """runpod's posts and slotworker's, paired job by job in order."""
    want, got = by_job(expected), by_job(actual)
    for job, posted in want.items():
        yield from zip(posted, got.get(job, []))


def test_posts_go_to_the_same_paths_in_the_same_order(scenario: Any) -> None:
    name, expected, actual = scenario
    paths = {job: [p["path"] for p in posted] for job, posted in by_job(actual).items()}
    assert paths == {job: [p["path"] for p in posted] for job, posted in by_job(expected).items()}
    assert sorted(p["path"] for p in posts(actual)) == sorted(p["path"] for p in posts(expected))


def test_post_headers_match(scenario: Any) -> None:
    name, expected, actual = scenario
    for want, got in paired(expected, actual):
        for key in ("Content-Type", "charset", "X-Request-ID"):
            assert header(got, key) == header(want, key), (key, got["path"])
        assert header(got, "Authorization") == API_KEY


#: Headers of the connection, not of the request: http.client, urllib3 and
#: aiohttp each write them their own way.
TRANSPORT_HEADERS = {"host", "content-length", "connection"}


def test_posts_carry_the_same_headers_as_runpods(scenario: Any) -> None:
    name, expected, actual = scenario
    for want, got in paired(expected, actual):
        names = [{key.lower() for key in record["headers"]} - TRANSPORT_HEADERS for record in (want, got)]
        assert names[1] == names[0], got["path"]


def test_post_bodies_match_byte_for_byte(scenario: Any) -> None:
    name, expected, actual = scenario
    for want, got in paired(expected, actual):
        if "/job-raise" in want["path"]:
            continue  # compared field by field below
        assert got["body"] == want["body"], got["path"]


def test_an_exception_reports_the_same_error_fields() -> None:
    capture = load_capture()[PLAIN]
    events, _ = run_scenario(PLAIN)
    want = json.loads(next(p for p in posts(capture) if "/job-raise" in p["path"])["body"])
    got = json.loads(next(p for p in posts(events) if "/job-raise" in p["path"])["body"])
    assert set(got) == set(want) == {"error"}
    want_info, got_info = json.loads(want["error"]), json.loads(got["error"])
    assert set(got_info) == set(want_info)
    for key in ERROR_FIELDS:
        assert got_info[key] == want_info[key], key
    assert 'raise ValueError("boom")' in got_info["error_traceback"]
    assert got_info["error_traceback"].rstrip().endswith("ValueError: boom")


def test_takes_stop_polls_and_pings_use_the_captured_paths(scenario: Any) -> None:
    name, expected, actual = scenario
    gets = [r for r in actual if r["method"] == "GET"]
    allowed = {r["path"] for r in expected if r["method"] == "GET"}
    # Which jobs a heartbeat happens to land during is timing (a slow
    # interpreter catches short ones too), and it may land on up to three:
    # a job's slot is given back once its result is queued, so the next job
    # can run while that result posts, and one more may be taken ahead; all
    # are held (runpod joins the ids of the jobs it holds with commas too).
    # Its form for any of them is fixed.
    job_ids = {r["path"].split("?")[0].rsplit("/", 1)[1] for r in posts(expected)}
    prefix, suffix = "/v2/ep/ping/w1?gpu=SIM&job_id=", "&runpod_version=1.12.0"

    def known_ping(path: str) -> bool:
        if not (path.startswith(prefix) and path.endswith(suffix)):
            return False
        held = path[len(prefix):-len(suffix)].split(",")
        return len(set(held)) == len(held) <= 3 and set(held) <= job_ids
    # runpod never takes while its one slot is busy; the default policy may
    # take ahead as the job ends, in the form runpod uses for such a take.
    allowed.add("/v2/ep/job-take/w1?gpu=SIM&job_in_progress=1")
    unknown = {g["path"] for g in gets} - allowed - {PING_IDLE}
    assert not {path for path in unknown if not known_ping(path)}, unknown
    kinds = {g["path"].split("?")[0].split("/")[3] for g in gets}
    assert {"job-take", "ping"} <= kinds
    for get in gets:
        assert header(get, "Authorization") == API_KEY
        if "/job-take/" in get["path"] or "/job-stop/" in get["path"]:
            assert header(get, "Content-Type") == "application/json"


def test_a_heartbeat_carries_the_job_in_progress() -> None:
    events, _ = run_scenario(PLAIN)
    pings = [e["path"] for e in events if "/ping/" in e["path"]]
    assert "/v2/ep/ping/w1?gpu=SIM&job_id=job-progress&runpod_version=1.12.0" in pings
    assert PING_IDLE in pings


def test_deliberate_difference_user_agent_names_slotworker(scenario: Any) -> None:
    name, expected, actual = scenario
    assert all(header(r, "User-Agent").startswith("RunPod-Python-SDK/1.12.0") for r in posts(expected))
    assert all(header(r, "User-Agent").startswith("slotworker/") for r in actual)


def test_deliberate_difference_no_stale_request_id_on_takes(scenario: Any) -> None:
    name, expected, actual = scenario
    if name == PLAIN:  # runpod's takes after the first job carry the last job's id
        assert any(header(r, "X-Request-ID") for r in expected if r["method"] == "GET")
    assert all(header(r, "X-Request-ID") is None for r in actual if r["method"] == "GET")


def test_the_handlers_differ_from_runpods_by_the_import_line_only() -> None:
    for name in ("handlers_plain", "handlers_gen"):
        with open(os.path.join(DATA, f"{name}.py"), encoding="utf-8") as mine, \
                open(os.path.join(DATA, f"{name}_runpod.py"), encoding="utf-8") as theirs:
            a, b = mine.read().splitlines(), theirs.read().splitlines()
        assert [x for x, y in zip(a, b) if x != y] == ["import slotworker as runpod"]
        assert len(a) == len(b)
