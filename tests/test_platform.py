"""The local platform, over real sockets: worker side, client side, faults."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional

import pytest
import requests

from slotworker.platform import Faults, Platform

from support import raw_exchange

WAIT = 10.0  # generous deadline for anything that should happen "soon"


# ---------------------------------------------------------------- helpers
def take_url(p: Platform, worker: str = "w1", batch: Optional[int] = None, jip: int = 0) -> str:
    if batch is None:
        return f"{p.url}/v2/{p.endpoint}/job-take/{worker}?gpu=local&job_in_progress={jip}"
    return f"{p.url}/v2/{p.endpoint}/job-take-batch/{worker}?gpu=local&batch_size={batch}&job_in_progress={jip}"


def take(p: Platform, worker: str = "w1", batch: Optional[int] = None, **kw: Any) -> requests.Response:
    return requests.get(take_url(p, worker, batch), timeout=WAIT, **kw)


def done(p: Platform, job_id: str, body: Any, worker: str = "w1", stream: bool = False, **kw: Any) -> requests.Response:
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return requests.post(
        f"{p.url}/v2/{p.endpoint}/job-done/{worker}/{job_id}?gpu=local&isStream={'true' if stream else 'false'}",
        data=data,
        headers={"Content-Type": "application/x-www-form-urlencoded", "X-Request-ID": job_id},
        timeout=WAIT,
        **kw,
    )


def stream(p: Platform, job_id: str, chunk: Any, worker: str = "w1") -> requests.Response:
    return requests.post(
        f"{p.url}/v2/{p.endpoint}/job-stream/{worker}/{job_id}?gpu=local&isStream=false",
        data=json.dumps({"output": chunk}),
        timeout=WAIT,
    )


def ping(p: Platform, worker: str = "w1", job_ids: Optional[List[str]] = None) -> requests.Response:
    q = "gpu=local"
    if job_ids:
        q += "&job_id=" + ",".join(job_ids)
    return requests.get(f"{p.url}/v2/{p.endpoint}/ping/{worker}?{q}&runpod_version=1.12.0", timeout=WAIT)


def stop_poll(p: Platform, worker: str = "w1") -> requests.Response:
    return requests.get(f"{p.url}/v2/{p.endpoint}/job-stop/{worker}?gpu=local", timeout=WAIT)


def in_thread(fn: Any, *args: Any) -> "tuple[threading.Thread, Dict[str, Any]]":
    box: Dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn(*args)
        except Exception as exc:  # surfaced by the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


# ---------------------------------------------------------------- lifecycle
def test_context_manager_starts_and_closes() -> None:
    with Platform(long_poll=0.1) as p:
        assert p.start() is p  # idempotent
        assert take(p).status_code == 204
    with pytest.raises(requests.ConnectionError):
        requests.get(take_url(p), timeout=WAIT)
    Platform().close()  # closing an unstarted platform is fine


# ---------------------------------------------------------------- environment
def test_worker_env_follows_the_protocol_templates(platform: Platform) -> None:
    env = platform.worker_env("w7")
    base = f"{platform.url}/v2/local"
    assert env == {
        "RUNPOD_WEBHOOK_GET_JOB": f"{base}/job-take/$ID?gpu=local",
        "RUNPOD_WEBHOOK_POST_OUTPUT": f"{base}/job-done/$RUNPOD_POD_ID/$ID?gpu=local",
        "RUNPOD_WEBHOOK_POST_STREAM": f"{base}/job-stream/$RUNPOD_POD_ID/$ID?gpu=local",
        "RUNPOD_WEBHOOK_PING": f"{base}/ping/$RUNPOD_POD_ID?gpu=local",
        "RUNPOD_POD_ID": "w7",
        "RUNPOD_AI_API_KEY": "local-key",
        "RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true",
        "RUNPOD_SKIP_GPU_CHECK": "true",
    }
    assert "RUNPOD_ENDPOINT_ID" not in env


# ---------------------------------------------------------------- takes
def test_single_take_hands_out_one_job_object(platform: Platform) -> None:
    job_id = platform.submit({"x": 1}, priority=3)
    platform.submit({"x": 2})
    r = take(platform)
    assert r.status_code == 200
    assert r.json() == {"id": job_id, "input": {"x": 1}, "priority": 3}
    (ev,) = platform.takes()
    assert (ev.kind, ev.status, ev.requested, ev.given, ev.job_ids) == ("take", 200, 1, 1, [job_id])
    assert ev.job_in_progress is False and ev.worker_id == "w1"
    assert ev.t_start <= ev.t_end
    assert platform.status(job_id)["status"] == "IN_PROGRESS"
    assert platform.counts()["queued"] == 1


def test_batch_take_hands_out_a_list_of_what_is_queued(platform: Platform) -> None:
    ids = [platform.submit(i) for i in range(3)]
    r = take(platform, batch=8)
    assert r.status_code == 200
    assert [j["id"] for j in r.json()] == ids
    (ev,) = platform.takes()
    assert (ev.kind, ev.requested, ev.given) == ("take_batch", 8, 3)


def test_empty_queue_take_answers_204_after_the_long_poll(platform: Platform) -> None:
    r = take(platform)
    assert r.status_code == 204 and r.content == b""
    (ev,) = platform.takes()
    assert ev.status == 204 and ev.given == 0
    assert ev.t_end - ev.t_start >= platform.long_poll * 0.9


def test_held_take_returns_as_soon_as_a_job_arrives(make_platform: Any) -> None:
    p = make_platform(long_poll=30.0)
    t, box = in_thread(take, p)
    assert p.wait_until(lambda q: q.counts()["waiting_takes"] == 1, WAIT)
    job_id = p.submit("late")
    t.join(WAIT)
    assert box["result"].json()["id"] == job_id
    (ev,) = p.takes()
    assert ev.t_end - ev.t_start < 15.0  # well before the 30 s long poll


def test_events_are_listed_in_arrival_order_and_carry_job_in_progress(make_platform: Any) -> None:
    p = make_platform(long_poll=30.0)
    t, _ = in_thread(lambda: requests.get(take_url(p, jip=1), timeout=WAIT))
    assert p.wait_until(lambda q: q.counts()["waiting_takes"] == 1, WAIT)
    ping(p)
    p.submit(1)
    t.join(WAIT)
    held, later = p.events
    assert (held.kind, later.kind) == ("take", "ping")
    assert held.t_end >= later.t_end and held.job_in_progress is True


def test_take_cost_is_paid_once_per_take_not_per_job(make_platform: Any) -> None:
    p = make_platform(take_cost=0.1)
    for i in range(8):
        p.submit(i)
    assert len(take(p, batch=8).json()) == 8
    for i in range(8):
        p.submit(i)
    for _ in range(8):
        assert take(p).status_code == 200
    batch, *singles = p.takes()
    assert batch.given == 8 and all(e.given == 1 for e in singles) and len(singles) == 8
    assert batch.t_end - batch.t_start >= 0.1
    assert all(e.t_end - e.t_start >= 0.1 for e in singles)
    assert sum(e.t_end - e.t_start for e in singles) > batch.t_end - batch.t_start
    assert p.counts()["takes"] == 9


def test_concurrent_takes_pay_the_take_cost_in_parallel(make_platform: Any) -> None:
    p = make_platform(take_cost=0.3)
    for i in range(4):
        p.submit(i)
    threads = [in_thread(take, p)[0] for _ in range(4)]
    for t in threads:
        t.join(WAIT)
    evs = p.takes()
    assert sorted(e.given for e in evs) == [1, 1, 1, 1]
    span = max(e.t_end for e in evs) - min(e.t_start for e in evs)
    assert span < sum(e.t_end - e.t_start for e in evs)


def test_raw_items_are_handed_out_as_is_and_not_tracked(platform: Platform) -> None:
    platform.submit_raw({"input": "no id"})
    platform.submit_raw(42)
    assert take(platform, batch=4).json() == [{"input": "no id"}, 42]
    assert platform.counts()["submitted"] == 0


# ---------------------------------------------------------------- results
def test_done_progress_and_stream_are_recorded_in_order(platform: Platform) -> None:
    job_id = platform.submit("gen")
    take(platform)
    assert done(platform, job_id, {"status": "IN_PROGRESS", "output": "half"}).status_code == 200
    st = platform.status(job_id)
    assert st["status"] == "IN_PROGRESS" and st["output"] == "half"
    for c in ("a", "b", "c"):
        assert stream(platform, job_id, c).status_code == 200
    r = done(platform, job_id, {"output": ["a", "b", "c"]}, stream=True)
    assert (r.status_code, r.json()) == (200, {})
    st = platform.status(job_id)
    assert st["status"] == "COMPLETED" and st["output"] == ["a", "b", "c"]
    assert st["stream"] == ["a", "b", "c"] and st["workerId"] == "w1"
    assert st["delayTime"] >= 0 and st["executionTime"] >= 0
    kinds = [e.kind for e in platform.events]
    assert kinds == ["take", "progress", "stream", "stream", "stream", "done"]
    assert platform.events[-1].query["isStream"] == "true"
    rec = platform.job(job_id)
    assert rec.submitted_at <= rec.taken_at <= rec.finished_at


def test_error_key_fails_the_job_and_stop_pod_is_kept(platform: Platform) -> None:
    job_id = platform.submit(1)
    take(platform)
    done(platform, job_id, {"error": "boom", "stopPod": True})
    st = platform.status(job_id)
    assert st["status"] == "FAILED" and st["error"] == "boom" and st["stopPod"] is True
    assert "output" not in st


def test_second_final_result_is_a_duplicate_and_does_not_overwrite(platform: Platform) -> None:
    job_id = platform.submit(1)
    take(platform)
    done(platform, job_id, {"output": "first"})
    assert done(platform, job_id, {"output": "second"}).status_code == 200
    assert platform.status(job_id)["output"] == "first"
    assert platform.counts()["duplicates"] == 1


def test_malformed_done_body_is_a_400_json_error(platform: Platform) -> None:
    job_id = platform.submit(1)
    take(platform)
    r = done(platform, job_id, "{not json")
    assert r.status_code == 400 and "error" in r.json()
    assert platform.status(job_id)["status"] == "IN_PROGRESS"


def test_result_for_an_unknown_job_is_a_404_and_counted(platform: Platform) -> None:
    r = done(platform, "nope", {"output": 1})
    assert r.status_code == 404 and "error" in r.json()
    assert platform.counts()["unknown"] == 1
    assert platform.events[-1].status == 404


def test_keep_alive_connection_serves_many_requests(platform: Platform) -> None:
    with requests.Session() as s:
        for i in range(20):
            job_id = platform.submit(i)
            assert s.get(take_url(platform), timeout=WAIT).json()["id"] == job_id
    assert platform.counts()["takes"] == 20


# ---------------------------------------------------------------- auth
def test_wrong_or_missing_api_key_is_401_and_recorded_as_rejected(make_platform: Any) -> None:
    p = make_platform(api_key="sekret")
    p.submit(1)
    assert take(p).status_code == 401
    assert take(p, headers={"Authorization": "wrong"}).status_code == 401
    assert [e.kind for e in p.events] == ["rejected", "rejected"]
    assert p.counts()["queued"] == 1
    assert take(p, headers={"Authorization": "sekret"}).status_code == 200


# ---------------------------------------------------------------- job timeout
def test_silent_job_is_requeued_at_the_front(make_platform: Any) -> None:
    p = make_platform(job_timeout=0.3)
    first = p.submit("a")
    p.submit("b")
    assert take(p).json()["id"] == first
    assert p.wait_until(lambda q: q.counts()["requeued"] == 1, WAIT)
    assert p.status(first)["status"] == "IN_QUEUE"
    assert take(p, worker="w2").json()["id"] == first
    assert p.job(first).retried == 1 and p.job(first).worker_id == "w2"


def test_ping_with_the_job_id_keeps_it_from_timing_out(make_platform: Any) -> None:
    p = make_platform(job_timeout=1.0)
    job_id = p.submit("a")
    take(p)
    before = p.job(job_id).last_seen
    ping(p, job_ids=[job_id])
    assert p.job(job_id).last_seen > before
    assert p.events[-1].kind == "ping" and p.events[-1].job_ids == [job_id]


# ---------------------------------------------------------------- stop channel
def test_cancel_of_running_job_is_delivered_once_on_the_stop_channel(platform: Platform) -> None:
    job_id = platform.submit(1)
    take(platform)
    assert platform.cancel(job_id)["status"] == "CANCELLED"
    r = stop_poll(platform)
    assert (r.status_code, r.json()) == (200, {"jobsToStop": [job_id]})
    assert stop_poll(platform).status_code == 204
    done(platform, job_id, {"output": "too late"})
    assert platform.status(job_id)["status"] == "CANCELLED"
    assert platform.counts()["late"] == 1


def test_held_stop_poll_returns_when_a_job_is_stopped(make_platform: Any) -> None:
    p = make_platform(long_poll=30.0)
    job_id = p.submit(1)
    take(p)
    t, box = in_thread(stop_poll, p)
    assert p.wait_until(lambda q: q.counts()["waiting_stops"] == 1, WAIT)
    p.stop_jobs([job_id])
    t.join(WAIT)
    assert box["result"].json() == {"jobsToStop": [job_id]}
    assert p.status(job_id)["status"] == "IN_PROGRESS"  # stop_jobs changes no state


def test_stop_of_another_workers_job_is_not_delivered(platform: Platform) -> None:
    job_id = platform.submit(1)
    take(platform, worker="w1")
    platform.stop_jobs([job_id])
    assert stop_poll(platform, worker="w2").status_code == 204
    assert stop_poll(platform, worker="w1").json() == {"jobsToStop": [job_id]}


def test_cancel_of_queued_job_means_it_is_never_taken(platform: Platform) -> None:
    job_id = platform.submit(1)
    platform.cancel(job_id)
    assert take(platform).status_code == 204
    assert platform.counts()["cancelled"] == 1


def test_close_wakes_held_long_polls(make_platform: Any) -> None:
    p = make_platform(long_poll=30.0)
    t, box = in_thread(take, p)
    assert p.wait_until(lambda q: q.counts()["waiting_takes"] == 1, WAIT)
    p.close()
    t.join(WAIT)
    assert not t.is_alive()
    p.close()  # idempotent


# ---------------------------------------------------------------- client API
def _worker_loop(p: Platform, n: int) -> None:
    """A minimal worker: take n jobs, answer each with its input doubled."""
    for _ in range(n):
        r = requests.get(take_url(p), timeout=WAIT)
        while r.status_code == 204:
            r = requests.get(take_url(p), timeout=WAIT)
        job = r.json()
        done(p, job["id"], {"output": job["input"] * 2})


def test_run_then_status(platform: Platform) -> None:
    r = requests.post(f"{platform.url}/run", json={"input": 21}, timeout=WAIT)
    body = r.json()
    assert r.status_code == 200 and body["status"] == "IN_QUEUE"
    assert requests.get(f"{platform.url}/status/{body['id']}", timeout=WAIT).json()["status"] == "IN_QUEUE"
    _worker_loop(platform, 1)
    st = requests.post(f"{platform.url}/v2/any/status/{body['id']}", timeout=WAIT).json()
    assert st["status"] == "COMPLETED" and st["output"] == 42


def test_runsync_waits_for_the_result(platform: Platform) -> None:
    t, _ = in_thread(_worker_loop, platform, 1)
    r = requests.post(f"{platform.url}/v2/local/runsync", json={"input": 5, "id": "mine"}, timeout=WAIT)
    t.join(WAIT)
    assert r.json()["id"] == "mine" and r.json()["status"] == "COMPLETED" and r.json()["output"] == 10


def test_runsync_answers_the_current_state_when_the_wait_runs_out(platform: Platform) -> None:
    r = requests.post(f"{platform.url}/runsync?wait=100", json={"input": 5}, timeout=WAIT)
    assert r.json()["status"] == "IN_QUEUE"


def test_stream_returns_chunks_not_yet_returned(platform: Platform) -> None:
    job_id = platform.submit("gen")
    take(platform)
    stream(platform, job_id, 1)
    stream(platform, job_id, 2)
    url = f"{platform.url}/stream/{job_id}"
    first = requests.get(url, timeout=WAIT).json()
    assert first == {"id": job_id, "status": "IN_PROGRESS", "stream": [{"output": 1}, {"output": 2}]}
    stream(platform, job_id, 3)
    assert requests.post(url, timeout=WAIT).json()["stream"] == [{"output": 3}]
    done(platform, job_id, {"output": [1, 2, 3]}, stream=True)
    last = requests.get(url, timeout=WAIT).json()
    assert last["status"] == "COMPLETED" and last["stream"] == []
    assert len(requests.get(url + "?all=1", timeout=WAIT).json()["stream"]) == 3


def test_cancel_and_health(platform: Platform) -> None:
    a = platform.submit(1)
    platform.submit(2)
    r = requests.post(f"{platform.url}/cancel/{a}", timeout=WAIT)
    assert r.json()["status"] == "CANCELLED"
    ping(platform, worker="w9")
    h = requests.get(f"{platform.url}/health", timeout=WAIT).json()
    assert h == {
        "jobs": {"completed": 0, "failed": 0, "inProgress": 0, "inQueue": 1, "retried": 0},
        "workers": {"idle": 1, "running": 0},
    }


def test_openapi_document_describes_the_client_api(platform: Platform) -> None:
    doc = requests.get(f"{platform.url}/openapi.json", timeout=WAIT).json()
    assert doc["openapi"].startswith("3.")
    for path in ("/run", "/runsync", "/status/{job_id}", "/stream/{job_id}", "/cancel/{job_id}", "/health"):
        assert path in doc["paths"]


@pytest.mark.parametrize(
    "body, status",
    [
        (b'{"webhook": "http://x"}', 400),  # no input
        (b"{not json", 400),
        (b"[1, 2]", 400),
        (b'{"input": 1, "webhook": 5}', 400),
    ],
)
def test_bad_run_bodies_are_400_json(platform: Platform, body: bytes, status: int) -> None:
    r = requests.post(f"{platform.url}/run", data=body, timeout=WAIT)
    assert r.status_code == status and "error" in r.json()
    assert platform.counts()["submitted"] == 0


def test_unknown_paths_and_ids_are_404_json(platform: Platform) -> None:
    for url in (f"{platform.url}/nope", f"{platform.url}/status/unknown", f"{platform.url}/v2/x/job-take"):
        r = requests.get(url, timeout=WAIT)
        assert r.status_code == 404 and "error" in r.json(), url


def test_chunked_bodies_are_read(platform: Platform) -> None:
    r = requests.post(f"{platform.url}/run", data=iter([b'{"input"', b": 7}"]), timeout=WAIT)
    assert r.status_code == 200 and platform.counts()["submitted"] == 1


def test_garbage_request_line_gets_a_json_error_not_a_traceback(platform: Platform) -> None:
    status, _, body = raw_exchange(platform, b"NONSENSE\r\n\r\n")
    assert status == 400 and "error" in json.loads(body)


def test_body_over_max_body_is_413_without_reading_it(make_platform: Any) -> None:
    p = make_platform(max_body=1000)
    r = requests.post(f"{p.url}/run", data=b'{"input": "' + b"x" * 5000 + b'"}', timeout=WAIT)
    assert r.status_code == 413 and "error" in r.json()
    assert requests.post(f"{p.url}/run", json={"input": "small"}, timeout=WAIT).status_code == 200


def test_webhook_receives_the_final_status(platform: Platform) -> None:
    got: List[Any] = []
    arrived = threading.Event()

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            arrived.set()

        def log_message(self, *args: Any) -> None:
            pass

    hook = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{hook.server_address[1]}/hook"
        job_id = requests.post(f"{platform.url}/run", json={"input": 4, "webhook": url}, timeout=WAIT).json()["id"]
        _worker_loop(platform, 1)
        assert arrived.wait(WAIT)
        assert got[0]["id"] == job_id and got[0]["status"] == "COMPLETED" and got[0]["output"] == 8
    finally:
        hook.shutdown()
        hook.server_close()


# ---------------------------------------------------------------- faults
def test_error_fault_answers_500(make_platform: Any) -> None:
    p = make_platform(faults=Faults(error_rate=1.0))
    p.submit(1)
    assert take(p).status_code == 500
    assert p.counts()["queued"] == 1 and p.events[-1].fault == "error"


def test_throttle_fault_answers_429(make_platform: Any) -> None:
    p = make_platform(faults=Faults(throttle_rate=1.0))
    assert ping(p).status_code == 429


def test_garbage_fault_answers_200_with_a_non_json_body(make_platform: Any) -> None:
    p = make_platform(faults=Faults(garbage_rate=1.0))
    p.submit(1)
    r = take(p)
    assert r.status_code == 200
    with pytest.raises(ValueError):
        r.json()
    assert p.counts()["queued"] == 1


def test_garbage_fault_on_done_records_the_result_but_answers_garbage(make_platform: Any) -> None:
    p = make_platform(faults=Faults(garbage_rate=1.0, routes={"done"}))
    job_id = p.submit(1)
    take(p)
    r = done(p, job_id, {"output": 1})
    assert r.status_code == 200 and r.content == b"<html>oops</html>"
    assert p.status(job_id)["status"] == "COMPLETED" and p.events[-1].fault == "garbage"


def test_drop_fault_closes_the_connection_and_loses_nothing(make_platform: Any) -> None:
    p = make_platform(faults=Faults(drop_rate=1.0, routes={"take", "done"}))
    job_id = p.submit(1)
    with pytest.raises(requests.ConnectionError):
        take(p)
    assert p.status(job_id)["status"] == "IN_QUEUE"
    p.faults = Faults(drop_rate=1.0, routes={"done"})
    assert take(p).status_code == 200
    with pytest.raises(requests.ConnectionError):
        done(p, job_id, {"output": 1})
    assert p.status(job_id)["status"] == "IN_PROGRESS"
    assert [e.status for e in p.events] == [0, 200, 0]


def test_slow_fault_delays_the_answer(make_platform: Any) -> None:
    p = make_platform(faults=Faults(slow_rate=1.0, slow_seconds=0.3))
    assert ping(p).status_code == 200
    ev = p.events[-1]
    assert ev.fault == "slow" and ev.t_end - ev.t_start >= 0.3


def test_drop_after_assign_loses_jobs_until_the_job_timeout(make_platform: Any) -> None:
    p = make_platform(faults=Faults(drop_after_assign_rate=1.0), job_timeout=0.3)
    job_id = p.submit(1)
    with pytest.raises(requests.ConnectionError):
        take(p)
    assert p.takes()[-1].given == 1 and p.takes()[-1].fault == "drop_after_assign"
    assert p.wait_until(lambda q: q.counts()["requeued"] == 1, WAIT)
    p.faults = None
    assert take(p).json()["id"] == job_id


def test_faults_are_reproducible_with_a_seed(make_platform: Any) -> None:
    def run() -> List[int]:
        p = make_platform(faults=Faults(error_rate=0.5, seed=7))
        return [ping(p).status_code for _ in range(20)]

    first = run()
    assert first == run() and set(first) == {200, 500}


def test_client_routes_are_never_faulted(make_platform: Any) -> None:
    p = make_platform(faults=Faults(error_rate=1.0))
    assert requests.post(f"{p.url}/run", json={"input": 1}, timeout=WAIT).status_code == 200


def test_set_down_answers_503_until_it_ends(platform: Platform) -> None:
    platform.set_down(60)
    assert take(platform).status_code == 503
    assert platform.events[-1].fault == "down"
    platform.set_down(0)
    assert take(platform).status_code == 204


# ---------------------------------------------------------------- CLI
def test_cli_prints_the_worker_environment_and_stops_on_sigterm() -> None:
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "slotworker.platform", "--port", "0", "--long-poll", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        lines = [proc.stdout.readline() for _ in range(7)]  # type: ignore[union-attr]
        exports = dict(l[len("export "):].strip().split("=", 1) for l in lines if l.startswith("export "))
        assert exports["RUNPOD_POD_ID"] == "w1"
        get_job = exports["RUNPOD_WEBHOOK_GET_JOB"].strip("'")
        r = requests.get(get_job.replace("$ID", "w1") + "&job_in_progress=0", timeout=WAIT)
        assert r.status_code == 204
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
