"""Takes, pings and stop polls on each thread's own connection, over real sockets.

They go out as result posts do (``worker/transport.py``), where runpod
sends them through a :class:`requests.Session`. These tests pin what must
stay as the session had it: the request on the wire is the one it sent, and
an answer reads as the session read it (gzip, chunked bodies, charsets, a
byte that is not UTF-8), and what cannot be read is an error, not an empty
answer.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import requests

from slotworker.config import Settings
from slotworker.worker.platform_client import BadResponse, PlatformClient, PlatformError, Throttled, _headers

API_KEY = "gets-test-key"


class Answer:
    """What the stand-in answers a GET with."""

    def __init__(self, status: int = 200, body: bytes = b"", headers: Optional[Dict[str, str]] = None,
                 chunked: bool = False, cut: bool = False) -> None:
        self.status, self.body, self.headers = status, body, headers or {}
        self.chunked = chunked  # sent in two chunks, with Transfer-Encoding: chunked
        self.cut = cut  # says a longer Content-Length than it sends, then closes


class Server:
    """Records each GET's request line and headers, in order, and answers it."""

    def __init__(self) -> None:
        self.seen: List[Tuple[str, List[Tuple[str, str]], Tuple[str, int]]] = []
        self.answer = Answer()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                owner.seen.append((self.requestline, list(self.headers.items()), self.client_address))
                answer = owner.answer
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                if answer.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    half = len(answer.body) // 2
                    for part in (answer.body[:half], answer.body[half:], b""):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    return
                self.send_header("Content-Length", str(len(answer.body) + (10 if answer.cut else 0)))
                self.end_headers()
                self.wfile.write(answer.body)
                if answer.cut:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    try:
        yield running
    finally:
        running.close()


def settings_for(server: Server) -> Settings:
    return Settings.from_env({
        "RUNPOD_WEBHOOK_GET_JOB": f"{server.url}/v2/ep/job-take/$ID?gpu=A 100",
        "RUNPOD_WEBHOOK_POST_OUTPUT": f"{server.url}/v2/ep/job-done/$RUNPOD_POD_ID/$ID",
        "RUNPOD_WEBHOOK_PING": f"{server.url}/v2/ep/ping/$RUNPOD_POD_ID",
        "RUNPOD_POD_ID": "w1", "RUNPOD_AI_API_KEY": API_KEY,
    })


@pytest.fixture
def client(server: Server) -> Iterator[PlatformClient]:
    made = PlatformClient(settings_for(server))
    try:
        yield made
    finally:
        made.close()


def session_get(url: str) -> None:
    """A GET as the client sent it through requests before (the reference)."""
    with requests.Session() as session:
        session.headers.update(_headers(API_KEY))
        session.trust_env = False
        session.get(url, timeout=5, allow_redirects=False)


def test_each_get_sends_the_request_line_and_headers_requests_sent(server, client):
    settings = client.settings
    server.answer = Answer(204)
    calls = [
        (lambda: client.take(4, True), settings.take_url(4, True)),
        (lambda: client.ping(["job-1", "job 2"]),
         f"{settings.ping_url}?job_id=job-1,job+2&runpod_version=1.12.0"),
        (client.poll_stop, settings.job_stop_url),
    ]
    lines = []
    for ours, url in calls:
        server.seen.clear()
        ours()
        session_get(url)
        (line_ours, headers_ours, _), (line_theirs, headers_theirs, _) = server.seen
        assert line_ours == line_theirs  # quoting included
        assert headers_ours == headers_theirs  # names, values and order, Host first
        lines.append(line_ours)
    assert lines[0].startswith("GET /v2/ep/job-take-batch/w1?gpu=A%20100&")  # "A 100" quoted as requests quotes it


def test_the_gets_of_one_thread_share_one_kept_alive_connection(server, client):
    server.answer = Answer(204)
    for _ in range(5):
        client.take(1, False)
        client.ping([])
    assert len({address for _, _, address in server.seen}) == 1


def test_a_take_reads_gzip_and_chunked_answers(server, client):
    jobs = [{"id": f"j{i}", "input": {"n": i}} for i in range(50)]
    server.answer = Answer(200, gzip.compress(json.dumps(jobs).encode()), {"Content-Encoding": "gzip",
                                                                            "Content-Type": "application/json"})
    assert client.take(50, False) == jobs
    server.answer = Answer(200, json.dumps(jobs).encode(), {"Content-Type": "application/json"}, chunked=True)
    assert client.take(50, False) == jobs
    text = json.dumps(jobs).encode()  # two gzip members, as a proxy may join them: both are read
    server.answer = Answer(200, gzip.compress(text[:100]) + gzip.compress(text[100:]), {"Content-Encoding": "gzip"})
    assert client.take(50, False) == jobs
    server.answer = Answer(200, zlib.compress(text), {"Content-Encoding": "deflate"})
    assert client.take(50, False) == jobs


def test_a_byte_that_is_not_utf8_does_not_lose_the_take(server, client):
    body = b'[{"id": "j1", "input": {"text": "caf\xe9"}}, {"id": "j2", "input": {}}]'
    server.answer = Answer(200, body, {"Content-Type": "application/json"})
    jobs = client.take(2, False)
    assert [job["id"] for job in jobs] == ["j1", "j2"]
    assert jobs[0]["input"]["text"] == "caf\ufffd"  # as requests' Response.json() reads it


def test_a_take_honours_the_charset_the_answer_names(server, client):
    jobs = [{"id": "j1", "input": {"text": "déjà vu"}}]
    server.answer = Answer(200, json.dumps(jobs, ensure_ascii=False).encode("latin-1"),
                           {"Content-Type": "application/json; charset=iso-8859-1"})
    assert client.take(1, False) == jobs
    server.answer = Answer(200, json.dumps(jobs, ensure_ascii=False).encode("utf-16"),
                           {"Content-Type": "application/json; charset=utf-16"})
    assert client.take(1, False) == jobs
    server.answer = Answer(200, json.dumps(jobs, ensure_ascii=False).encode("utf-16-le"))  # no type: guessed
    assert client.take(1, False) == jobs


@pytest.mark.parametrize("answer, result", [
    (Answer(204), []),
    (Answer(400, b"no job"), []),  # FlashBoot's way of saying none
    (Answer(200, b"  \n"), []),
    (Answer(200, b"null"), []),
    (Answer(200, b'{"id": "j1", "input": {}}'), [{"id": "j1", "input": {}}]),
])
def test_a_take_reads_every_form_of_answer_the_protocol_allows(server, client, answer, result):
    server.answer = answer
    assert client.take(1, False) == result


def test_a_take_that_is_not_json_or_not_read_in_full_is_an_error(server, client):
    server.answer = Answer(200, b"<html>gateway</html>", {"Content-Type": "text/html"})
    with pytest.raises(BadResponse, match="not JSON"):
        client.take(1, False)
    server.answer = Answer(500, b"down for maintenance")
    with pytest.raises(PlatformError, match="500.*down for maintenance"):
        client.take(1, False)
    server.answer = Answer(200, b'[{"id": "j1", "input": {}}]', cut=True)
    with pytest.raises(BadResponse, match="LOST\\?: the take's answer was cut short.*could not be read"):
        client.take(1, False)  # logged as an error: the jobs in it are the platform's to requeue
    server.answer = Answer(200, b'[{"id": "j2", "input": {}}]')  # and the next take is fine
    assert client.take(1, False) == [{"id": "j2", "input": {}}]


def test_a_stop_poll_reads_a_gzipped_answer_and_a_ping_returns_its_status(server, client):
    server.answer = Answer(200, gzip.compress(b'{"jobsToStop": ["j1", "j2", 3]}'), {"Content-Encoding": "gzip"})
    assert client.poll_stop() == ["j1", "j2"]
    server.answer = Answer(414, b"URI too long")
    assert client.ping(["j1"]) == 414
    server.close()  # (its handler threads, on connections kept alive, still answer)
    nobody = PlatformClient(settings_for(server))
    try:
        with pytest.raises(PlatformError, match="ConnectionRefused"):
            nobody.ping([])
        with pytest.raises(PlatformError, match="ConnectionRefused"):
            nobody.poll_stop()
    finally:
        nobody.close()


def test_a_throttled_take_or_stop_poll_says_so_and_a_stop_poll_that_is_not_json_is_an_error(server, client):
    server.answer = Answer(429, b"slow down")
    with pytest.raises(Throttled):
        client.take(1, False)
    with pytest.raises(Throttled):
        client.poll_stop()
    server.answer = Answer(200, b"<html></html>", {"Content-Type": "text/html"})
    with pytest.raises(BadResponse):
        client.poll_stop()
