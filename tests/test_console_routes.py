"""The console's pages and JSON routes over real sockets (no browser): headers,
shapes, size caps, and 400 for unknown or out-of-range parameters."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from importlib import resources
from typing import Any, Dict, List, Optional

import pytest
import requests

from slotworker.platform import Platform, RequestRecord
from slotworker.platform.console import jobs as console_jobs
from slotworker.platform.console import timeline as console_timeline
from slotworker.platform.console.activity import Activity
from slotworker.platform.console.routes import STATIC
from slotworker.platform.state import ACTIVITY_KEPT

from support import WorkerThread, script_env, spawn_script, write_script

WAIT = 10.0


def get(p: Platform, path: str) -> requests.Response:
    return requests.get(p.url + path, timeout=WAIT)


def get_json(p: Platform, path: str) -> Dict[str, Any]:
    r = get(p, path)
    assert r.status_code == 200, (path, r.status_code, r.text)
    assert r.headers["Content-Type"] == "application/json"
    return r.json()


def take_all(p: Platform, worker: str = "w1") -> List[str]:
    """Take every queued job for `worker` through the store; their ids."""
    return [job.id for _, job in p.store.take(worker, 1_000_000, time.monotonic())]


# ---------------------------------------------------------------- pages
@pytest.mark.parametrize("path", ["/", "/docs", "/v2/local/"])
def test_pages_are_html_with_a_strict_content_security_policy(platform: Platform, path: str) -> None:
    r = get(platform, path)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/html; charset=utf-8"
    csp = r.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe" not in csp
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["X-Frame-Options"] == "DENY"
    # Every script is a file of this origin: nothing inline for the CSP to refuse.
    scripts = re.findall(r"<script\b[^>]*>", r.text)
    assert scripts and all('src="/console/static/' in tag for tag in scripts)


def test_the_pages_and_their_files_load_nothing_from_a_network() -> None:
    static = resources.files("slotworker.platform.console").joinpath("static")
    names = [entry.name for entry in static.iterdir()]
    assert sorted(set(STATIC) | {"console.html", "docs.html"}) == sorted(names)
    for name in names:
        text = static.joinpath(name).read_text(encoding="utf-8")
        # The SVG namespace is a name, not a fetch; no other absolute URL.
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg\")", text), name
        assert not re.search(r"(src|href)=\"(?!/)", text), name
        assert "url(" not in text and "@import" not in text and "@font-face" not in text, name
        # Inline style and script would be refused by the CSP (and logged as errors).
        assert "style=" not in text and ".style." not in text and "<style" not in text, name
        assert not re.search(r"<script(?![^>]*\bsrc=)", text) and not re.search(r"\son[a-z]+=\"", text), name


@pytest.mark.parametrize("name", sorted(STATIC))
def test_static_files_are_served_with_their_type(platform: Platform, name: str) -> None:
    r = get(platform, "/console/static/" + name)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == STATIC[name]
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.content


@pytest.mark.parametrize("path", ["/console/static/nope.js", "/console/static/..%2Froutes.py",
                                  "/console/static/../routes.py", "/console/static", "/console", "/console/x/y"])
def test_anything_else_under_console_is_a_json_404(platform: Platform, path: str) -> None:
    r = get(platform, path)
    assert r.status_code == 404 and "error" in r.json()


@pytest.mark.parametrize("path", ["/", "/docs", "/console/jobs", "/console/workers"])
def test_console_routes_refuse_other_methods(platform: Platform, path: str) -> None:
    r = requests.post(platform.url + path, json={}, timeout=WAIT)
    assert r.status_code == 405 and "GET" in r.json()["error"]


def test_the_openapi_document_lists_the_console_routes(platform: Platform) -> None:
    doc = get_json(platform, "/openapi.json")
    for path in ("/", "/docs", "/console/jobs", "/console/jobs/{job_id}", "/console/workers", "/console/timeline"):
        assert "get" in doc["paths"][path], path
    for name in ("ConsoleJobs", "ConsoleJob", "ConsoleWorkers", "ConsoleTimeline"):
        assert name in doc["components"]["schemas"]


# ---------------------------------------------------------------- jobs
def test_jobs_page_shape_newest_first(platform: Platform) -> None:
    ids = [platform.submit({"n": i}) for i in range(3)]
    taken = take_all(platform)
    assert taken == ids
    platform.store.post_result("w1", ids[0], {"output": {"ok": True}})
    platform.store.post_result("w1", ids[1], {"error": "<b>boom</b>"})
    platform.store.post_stream(ids[2], {"output": "chunk"})
    page = get_json(platform, "/console/jobs")
    assert page["total"] == 3 and page["limit"] == console_jobs.PAGE_DEFAULT and page["older"] is None
    assert [j["id"] for j in page["jobs"]] == ids[::-1]
    assert [j["index"] for j in page["jobs"]] == [2, 1, 0]
    running, failed, completed = page["jobs"]
    assert completed["status"] == "COMPLETED" and completed["output"] == '{"ok": true}'
    assert completed["workerId"] == "w1" and completed["delayMs"] >= 0 and completed["executionMs"] >= 0
    assert failed["status"] == "FAILED" and failed["error"] == "<b>boom</b>" and failed["output"] is None
    assert running["status"] == "IN_PROGRESS" and running["streamCount"] == 1 and running["streamTail"] == ["chunk"]
    assert running["executionMs"] >= 0 and running["output"] is None
    assert failed["errorSummary"] is None
    assert set(completed) == {"index", "id", "status", "workerId", "retried", "ageS", "delayMs", "executionMs",
                              "output", "outputTruncated", "error", "errorTruncated", "errorSummary",
                              "streamCount", "streamTail"}


@pytest.mark.parametrize("error, summary", [
    (json.dumps({"error_type": "<class 'ValueError'>", "error_message": "bad <b>", "error_traceback": "T" * 5000}),
     "ValueError: bad <b>"),
    ({"error_type": "<class 'pkg.mod.Oops'>", "error_message": "m"}, "Oops: m"),
    ({"error_message": "only a message"}, "only a message"),
    ("{not json", None),
    ("plain", None),
    ({"error_message": 5}, None),
])
def test_a_workers_error_report_is_summed_up_as_type_and_message(platform: Platform, error: Any,
                                                                  summary: Optional[str]) -> None:
    job_id = platform.submit(1)
    take_all(platform)
    platform.store.post_result("w1", job_id, {"error": error})
    job = get_json(platform, "/console/jobs")["jobs"][0]
    assert job["status"] == "FAILED" and job["errorSummary"] == summary


def test_a_queued_job_shows_its_wait_so_far_and_a_progress_update_shows_as_output(platform: Platform) -> None:
    queued = platform.submit({})
    page = get_json(platform, "/console/jobs")
    assert page["jobs"][0]["status"] == "IN_QUEUE" and page["jobs"][0]["delayMs"] >= 0
    assert page["jobs"][0]["executionMs"] is None and page["jobs"][0]["workerId"] is None
    take_all(platform)
    platform.store.post_result("w1", queued, {"status": "IN_PROGRESS", "output": "half way"})
    assert get_json(platform, "/console/jobs")["jobs"][0]["output"] == "half way"


def test_jobs_are_paged_by_submission_index(platform: Platform) -> None:
    ids = [platform.submit(i) for i in range(7)]
    first = get_json(platform, "/console/jobs?limit=3")
    assert [j["id"] for j in first["jobs"]] == ids[6:3:-1] and first["older"] == 4
    second = get_json(platform, f"/console/jobs?limit=3&before={first['older']}")
    assert [j["id"] for j in second["jobs"]] == ids[3:0:-1] and second["older"] == 1
    last = get_json(platform, f"/console/jobs?limit=3&before={second['older']}")
    assert [j["id"] for j in last["jobs"]] == ids[:1] and last["older"] is None
    # New jobs do not shift an older page: its cursor is an index, not an offset.
    platform.submit("new")
    assert [j["id"] for j in get_json(platform, "/console/jobs?limit=3&before=4")["jobs"]] == ids[3:0:-1]
    assert get_json(platform, "/console/jobs?before=0")["jobs"] == []


def test_a_page_of_large_outputs_stays_small(platform: Platform) -> None:
    big = "x" * 200_000
    ids = [platform.submit({"i": i}) for i in range(80)]
    take_all(platform)
    for job_id in ids:
        platform.store.post_stream(job_id, {"output": big})
        platform.store.post_result("w1", job_id, {"output": {"image": big, "list": list(range(50_000))}})
    r = get(platform, f"/console/jobs?limit={console_jobs.PAGE_MAX}")
    page = r.json()
    assert len(page["jobs"]) == 80
    # 80 jobs of 400 KB each: each value is cut, the page is a few tens of KB.
    assert len(r.content) < 80 * (console_jobs.LIST_TEXT + 3 * console_jobs.LIST_CHUNK_TEXT + 500)
    job = page["jobs"][0]
    assert job["outputTruncated"] is True and len(job["output"]) == console_jobs.LIST_TEXT
    assert job["output"].startswith('{"image": "xxx')
    assert all(len(chunk) <= console_jobs.LIST_CHUNK_TEXT for chunk in job["streamTail"])
    detail = get(platform, f"/console/jobs/{ids[0]}")
    assert len(detail.content) < 2 * console_jobs.DETAIL_TEXT + console_jobs.DETAIL_CHUNK_TEXT + 2000
    assert detail.json()["outputTruncated"] is True


def test_job_detail_has_the_input_and_longer_excerpts(platform: Platform) -> None:
    job_id = platform.submit({"prompt": "<script>alert(1)</script>"})
    take_all(platform)
    for n in range(console_jobs.DETAIL_CHUNKS + 5):
        platform.store.post_stream(job_id, {"output": n})
    platform.store.post_result("w1", job_id, {"output": "y" * 5000})
    detail = get_json(platform, f"/console/jobs/{job_id}")
    assert detail["input"] == '{"prompt": "<script>alert(1)</script>"}' and detail["inputTruncated"] is False
    assert detail["output"] == "y" * 5000 and detail["outputTruncated"] is False
    assert detail["streamCount"] == console_jobs.DETAIL_CHUNKS + 5
    assert detail["streamTail"] == [str(n) for n in range(5, console_jobs.DETAIL_CHUNKS + 5)]


def test_job_detail_of_an_unknown_job_is_404(platform: Platform) -> None:
    r = get(platform, "/console/jobs/nope")
    assert r.status_code == 404 and "nope" in r.json()["error"]


@pytest.mark.parametrize("query", ["limit=0", "limit=201", "limit=abc", "before=-1", "before=x", "page=2",
                                   "limit=10&x=1", "since=5"])
def test_jobs_refuse_bad_or_unknown_parameters(platform: Platform, query: str) -> None:
    r = get(platform, "/console/jobs?" + query)
    assert r.status_code == 400 and r.json()["status"] == 400


@pytest.mark.parametrize("path", ["/console/workers?x=1", "/console/jobs/abc?limit=1",
                                  "/console/timeline?window=0", "/console/timeline?window=901",
                                  "/console/timeline?window=nan", "/console/timeline?window=inf",
                                  "/console/timeline?window=abc", "/console/timeline?since=1"])
def test_other_routes_refuse_bad_or_unknown_parameters(platform: Platform, path: str) -> None:
    if "/jobs/abc" in path:
        platform.submit(1, job_id="abc")
    r = get(platform, path)
    assert r.status_code == 400 and "error" in r.json()


# ---------------------------------------------------------------- worker side
def test_workers_and_timeline_with_a_real_worker(platform: Platform) -> None:
    def handler(job: Dict[str, Any]) -> Any:
        time.sleep(0.03)
        return job["input"]

    # Asks for its free slots, and holds each until its result is in: its
    # slot estimate is exact (see console.timeline).
    with WorkerThread(platform, handler, concurrency=3, take_policy="drain", post_backlog=0):
        ids = [platform.submit(i) for i in range(12)]
        assert platform.wait_final(ids, timeout=WAIT)
        workers = get_json(platform, "/console/workers")
        timeline = get_json(platform, "/console/timeline?window=30")
    assert workers["queue"] == {"jobs": 0, "raw": 0, "waitingTakes": workers["queue"]["waitingTakes"]}
    assert workers["counts"]["completed"] == 12 and workers["counts"]["takes"] >= 1
    assert workers["platform"]["endpoint"] == "local" and workers["platform"]["takeCost"] == 0.0
    (w1,) = workers["workers"]
    assert w1["id"] == "w1" and w1["inProgress"] == 0 and w1["slotsEstimate"] == 3
    assert w1["lastSeenS"] >= 0 and w1["lastTakeS"] >= 0

    assert timeline["window"] == 30 and timeline["knownFrom"] is None and timeline["takesTruncated"] is False
    (series,) = timeline["workers"]
    assert series["id"] == "w1" and series["points"][0] == [pytest.approx(-30, abs=0.1), 0]
    assert max(n for _, n in series["points"]) == 3
    assert all(-30.1 <= t <= 0 for t, _ in series["points"])
    takes = timeline["takes"]
    assert sum(t["given"] for t in takes) == 12
    assert all(t["worker"] == "w1" and t["asked"] >= 1 and t["startT"] <= t["t"] <= 0 for t in takes)
    # The worker asks for its free slots: held + asked is at most its slot
    # count (less when a result landed before its slot was freed).
    assert max(t["held"] + t["asked"] for t in takes) == 3
    assert all(t["held"] + t["asked"] <= 3 for t in takes)
    assert series["slotsEstimate"] == 3


def test_timeline_and_workers_stay_small_after_thousands_of_jobs(platform: Platform) -> None:
    store = platform.store
    for batch in range(6):
        ids = [platform.submit(i) for i in range(2000)]
        worker = f"w{batch % 20}"
        take_all(platform, worker)
        for job_id in ids:
            store.post_result(worker, job_id, {"output": job_id})
    # 12,000 jobs: more in-progress changes than are kept; and 30 workers.
    for i in range(30):
        store.seen_worker(f"w{i}")
    now = time.monotonic()
    for i in range(console_timeline.TAKES_MAX + 500):
        store.record(store.begin_event(), RequestRecord(kind="take_batch", t_start=now, t_end=now,
                                                        worker_id=f"w{i % 30}", requested=4, given=1))
    r = get(platform, f"/console/timeline?window={console_timeline.WINDOW_MAX:g}")
    timeline = r.json()
    assert len(r.content) < 250_000
    assert timeline["knownFrom"] is not None and timeline["takesTruncated"] is True
    assert len(timeline["takes"]) <= console_timeline.TAKES_MAX
    assert len(timeline["workers"]) <= console_timeline.WORKERS_MAX
    assert sum(len(w["points"]) for w in timeline["workers"]) <= 2 * console_timeline.POINTS_MAX + 2 * len(
        timeline["workers"])
    workers = get(platform, "/console/workers")
    assert len(workers.content) < 20_000 and len(workers.json()["workers"]) <= console_timeline.WORKERS_MAX
    assert workers.json()["workersTotal"] == 30
    page = get(platform, "/console/jobs")
    assert len(page.content) < 50_000 and page.json()["total"] == 12_000


# ---------------------------------------------------------------- Activity
def test_activity_held_at_is_the_count_before_the_next_change() -> None:
    changes = [(1.0, "a", 0, 1), (2.0, "a", 1, 2), (3.0, "b", 0, 1), (4.0, "a", 2, 1)]
    activity = Activity(changes, {"a": 1, "b": 1}, since=0.0)
    assert [activity.held_at("a", t) for t in (0.5, 1.0, 1.5, 2.5, 4.0, 9.0)] == [0, 1, 1, 2, 1, 1]
    assert activity.held_at("b", 2.0) == 0 and activity.held_at("c", 2.0) == 0
    assert activity.series("a", 0.0, 5.0, points=100) == [(0.0, 0), (1.0, 1), (2.0, 2), (4.0, 1)]
    assert sorted(activity.workers()) == ["a", "b"]


def test_activity_series_reduced_keeps_the_peaks() -> None:
    changes = []
    count = 0
    for i in range(10_000):
        # Up and down by one, with a single spike to 50 in the middle.
        after = 50 if i == 5_001 else (1 if count == 0 else 0)
        changes.append((i / 1000, "w", count, after))
        count = after
    activity = Activity(changes, {"w": count}, since=0.0)
    series = activity.series("w", 0.0, 10.0, points=100)
    assert len(series) <= 200
    assert max(n for _, n in series) == 50
    assert [t for t, _ in series] == sorted(t for t, _ in series)


def test_activity_counts_before_the_kept_changes_are_unknown() -> None:
    changes = [(float(i), "w", i % 2, (i + 1) % 2) for i in range(ACTIVITY_KEPT)]
    activity = Activity(changes, {}, since=0.0)
    assert activity.held_at("w", -1.0) is None and activity.held_at("w", 5.5) == 0


def test_store_page_counts_indexes_from_the_oldest() -> None:
    p = Platform()  # the store alone: never started
    ids = [p.submit(i) for i in range(5)]
    total, page = p.store.page(None, 2)
    assert total == 5 and [(i, j.id) for i, j in page] == [(4, ids[4]), (3, ids[3])]
    assert [i for i, _ in p.store.page(2, 10)[1]] == [1, 0]
    assert [i for i, _ in p.store.page(99, 2)[1]] == [4, 3]


# ---------------------------------------------------------------- both ways of serving
def wait_for_page(base: str, proc: subprocess.Popen) -> requests.Response:
    """GET `base`/ until it answers (the process may still be starting)."""
    deadline = time.monotonic() + 20
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.communicate()[0]}")
        try:
            return requests.get(base + "/", timeout=2)
        except requests.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def test_the_console_is_served_under_rp_serve_api(tmp_path: Any) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = write_script(str(tmp_path), "handler.py", """
        import slotworker
        slotworker.start({"handler": lambda job: job["input"]})
    """)
    proc = spawn_script(path, "--rp_serve_api", "--rp_api_port", str(port), cwd=str(tmp_path))
    base = f"http://localhost:{port}"
    try:
        page = wait_for_page(base, proc)
        assert page.status_code == 200 and "slotworker" in page.text
        assert requests.get(base + "/docs", timeout=WAIT).status_code == 200
        answer = requests.post(base + "/runsync", json={"input": "<i>hi</i>"}, timeout=WAIT).json()
        assert answer["status"] == "COMPLETED"
        jobs = requests.get(base + "/console/jobs", timeout=WAIT).json()
        assert jobs["jobs"][0]["output"] == "<i>hi</i>" and jobs["jobs"][0]["workerId"] == "local-worker"
        workers = requests.get(base + "/console/workers", timeout=WAIT).json()
        assert [w["id"] for w in workers["workers"]] == ["local-worker"]
    finally:
        stop(proc)


def test_the_console_is_served_by_slotworker_platform_on_loopback(tmp_path: Any) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "slotworker.cli", "platform", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=script_env())
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.match(r"# slotworker platform serving on (http://127\.0\.0\.1:\d+)$", first.strip())
        assert match, first  # loopback only, unless --host says otherwise
        line = proc.stdout.readline()
        while line.startswith("export "):  # the worker's environment, then where the console is
            line = proc.stdout.readline()
        assert line.strip() == f"# console: {match.group(1)}/ (API reference: {match.group(1)}/docs)"
        page = wait_for_page(match.group(1), proc)
        assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
        assert requests.get(match.group(1) + "/console/timeline", timeout=WAIT).json()["workers"] == []
    finally:
        stop(proc)
