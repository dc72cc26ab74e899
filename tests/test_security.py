"""The API key stays secret and goes only to the platform; the local
platform binds to loopback and refuses bad bodies with 4xx."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List

import pytest

from slotworker.worker.platform_client import PlatformClient, PlatformError, Rejected
from slotworker.platform import Faults, Platform
from slotworker.config import Settings

from support import TLS_CERT, TLS_KEY, WorkerThread

DEADLINE = 20.0
KEY = "sk-test-SECRET-4f9c1e"




def test_api_key_never_appears_in_logs_or_error_results(make_platform, records):
    platform = make_platform(api_key=KEY, faults=Faults(error_rate=1.0, routes={"take", "take_batch"}))

    def handler(job: Dict[str, Any]) -> Any:
        if job["input"].get("fail"):
            raise RuntimeError("handler failed on purpose")
        return "ok"

    with WorkerThread(platform, handler, concurrency=2):
        assert platform.wait_until(lambda p: len(p.takes()) >= 2, DEADLINE)  # failing takes
        platform.faults = None
        ids = [platform.submit({"fail": True}), platform.submit({})]
        assert platform.wait_final(ids, DEADLINE)
    assert platform.status(ids[0])["status"] == "FAILED"
    assert platform.status(ids[1])["status"] == "COMPLETED"
    text = records.text()
    assert "handler failed on purpose" in text and "take failed" in text
    assert KEY not in text
    for job_id in ids:
        assert KEY not in json.dumps(platform.status(job_id))
    # ...while the platform did get it on every worker request.
    assert all(e.headers.get("Authorization") == KEY for e in platform.events)


def test_wrong_key_is_refused_and_not_logged(make_platform, records):
    platform = make_platform(api_key="the-right-key")
    env = platform.worker_env("w1", api_key=KEY)

    class Wrong:
        def worker_env(self, worker_id: str = "w1") -> Dict[str, str]:
            return env

    with WorkerThread(Wrong(), lambda job: "ok", concurrency=1):
        assert platform.wait_until(lambda p: any(e.kind == "rejected" for e in p.events), DEADLINE)
    assert KEY not in records.text()


class _Recorder(BaseHTTPRequestHandler):
    """Records the headers of every request; answers 200."""

    seen: List[Dict[str, str]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        type(self).seen.append(dict(self.headers.items()))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = _answer


def _redirector(target: str) -> type:
    class Redirect(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(302)
            self.send_header("Location", target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _answer
    return Redirect


@pytest.fixture
def servers() -> Iterator[Any]:
    started: List[ThreadingHTTPServer] = []

    def serve(handler: type, tls: bool = False) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        if tls:  # the self-signed certificate for 127.0.0.1 in tests/data
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(TLS_CERT, TLS_KEY)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append(server)
        return f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"

    try:
        yield serve
    finally:
        for server in started:
            server.shutdown()
            server.server_close()


def test_a_redirect_to_another_host_never_carries_the_key(servers):
    _Recorder.seen = []
    elsewhere = servers(_Recorder)
    platform_url = servers(_redirector(elsewhere))
    base = f"{platform_url}/v2/ep"
    settings = Settings.from_env({
        "RUNPOD_WEBHOOK_GET_JOB": f"{base}/job-take/$ID?gpu=x",
        "RUNPOD_WEBHOOK_POST_OUTPUT": f"{base}/job-done/$RUNPOD_POD_ID/$ID",
        "RUNPOD_WEBHOOK_POST_STREAM": f"{base}/job-stream/$RUNPOD_POD_ID/$ID",
        "RUNPOD_WEBHOOK_PING": f"{base}/ping/$RUNPOD_POD_ID",
        "RUNPOD_AI_API_KEY": KEY,
        "RUNPOD_POD_ID": "w1",
    })
    client = PlatformClient(settings)
    try:
        with pytest.raises(PlatformError):
            client.take(1, False)
        with pytest.raises(PlatformError):
            client.take(4, False)
        with pytest.raises(Rejected):
            client.post_done("job-1", b'{"output": 1}', False)
        with pytest.raises(Rejected):
            client.post_stream("job-1", b'{"output": 1}')
        assert client.ping([]) == 302
        with pytest.raises(PlatformError):
            client.poll_stop()
    finally:
        client.close()
    assert _Recorder.seen == [], "a redirect was followed"


def test_the_recorder_does_record(servers):
    # The redirect test's "nothing arrived" means something: direct requests do arrive.
    _Recorder.seen = []
    url = servers(_Recorder)
    conn = http.client.HTTPConnection(url[len("http://"):], timeout=5)
    conn.request("GET", "/x", headers={"Authorization": "k"})
    conn.getresponse().read()
    conn.close()
    assert _Recorder.seen and _Recorder.seen[0]["Authorization"] == "k"


def test_the_local_platform_binds_to_loopback_by_default():
    with Platform() as platform:
        assert platform._server is not None
        assert platform._server.server_address[0] == "127.0.0.1"
        assert platform.url.startswith("http://127.0.0.1:")


def _request(platform: Platform, method: str, path: str, body: bytes = b"",
             headers: Any = None) -> "tuple[int, bytes]":
    host = platform.url[len("http://"):]
    conn = http.client.HTTPConnection(host, timeout=20)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("path", ["/v2/local/run", "/v2/local/job-done/w1/some-job", "/run"])
def test_the_local_platform_refuses_oversized_bodies_with_413(make_platform, records, path):
    platform = make_platform(max_body=1000)
    status, body = _request(platform, "POST", path, b"x" * 5000)
    assert status == 413
    assert "Traceback" not in body.decode()
    assert "Traceback" not in records.text()


@pytest.mark.parametrize("path", ["/v2/local/run", "/v2/local/runsync", "/v2/local/job-done/w1/some-job",
                                  "/v2/local/job-stream/w1/some-job"])
@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe", b"[1, 2", b'{"input": }'])
def test_the_local_platform_refuses_malformed_json_with_400(platform, records, path, body):
    status, answer = _request(platform, "POST", path, body)
    assert status == 400, answer
    assert "error" in json.loads(answer)
    assert "Traceback" not in answer.decode("utf-8", "replace")
    assert "internal error" not in records.text()
    assert _request(platform, "GET", "/health")[0] == 200


def test_result_posts_to_a_server_whose_certificate_is_not_trusted_carry_no_key(servers, monkeypatch):
    # A certificate that neither certifi, the system store nor a CA the
    # environment names vouches for is refused before any header is sent.
    _Recorder.seen = []
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    base = servers(_Recorder, tls=True) + "/v2/ep"
    settings = Settings.from_env({
        "RUNPOD_WEBHOOK_GET_JOB": f"{base}/job-take/$ID",
        "RUNPOD_WEBHOOK_POST_OUTPUT": f"{base}/job-done/w1/$ID",
        "RUNPOD_POD_ID": "w1", "RUNPOD_AI_API_KEY": KEY,
    })
    client = PlatformClient(settings)
    try:
        with pytest.raises(PlatformError, match="did not verify") as refused:
            client.post_done("j1", b'{"output": 1}', False, timeout=(5.0, 5.0))
        assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value.__cause__.__cause__)
    finally:
        client.close()
    assert _Recorder.seen == []
