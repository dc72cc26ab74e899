"""Result posts on each thread's own keep-alive connection, over real sockets."""

from __future__ import annotations

import gzip
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from slotworker.config import Settings
from slotworker.worker.platform_client import PlatformClient, PlatformError, Rejected
from slotworker.worker.thread_connections import ThreadConnections, Refused, SendFailed
from slotworker.worker import thread_connections
from support import TLS_CERT, TLS_KEY, wait_for

CERT, KEY = TLS_CERT, TLS_KEY
TIMEOUT = (5.0, 10.0)
HEADERS = {"Content-Type": "application/x-www-form-urlencoded", "Content-Length": "2"}


class Server:
    """A platform stand-in that records which connection each request came on."""

    def __init__(self, answer: Tuple[int, bytes, Optional[str]] = (200, b"{}", None),
                 close_after: bool = False, tls: bool = False,
                 hold: Optional[threading.Event] = None, host: str = "127.0.0.1",
                 early: bool = False, extra: Optional[Dict[str, str]] = None) -> None:
        self.requests: List[Tuple[Tuple[str, int], str, bytes]] = []
        self.arrived = threading.Event()  # a request came (answered once ``hold`` is set, if given)
        self.answered = threading.Semaphore(0)  # one release per request answered (and closed, if so)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the platform's servers do

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                if early:  # answers before reading the body, and closes (a 413 does)
                    self.close_connection = True
                    body = b""
                else:
                    body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.requests.append((self.client_address, self.path, body))
                owner.arrived.set()
                if hold is not None:
                    hold.wait(30)
                status, payload, encoding = answer
                self.send_response(status)
                if encoding:
                    self.send_header("Content-Encoding", encoding)
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()
                if close_after:  # closes without saying so (no "Connection: close")
                    self.close_connection = True
                    self.connection.shutdown(2)

            def finish(self) -> None:
                super().finish()
                owner.answered.release()

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(CERT, KEY)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://{host}:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def connections(self) -> int:
        return len({address for address, _, _ in self.requests})

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[Any]:
    started: List[Server] = []

    def start(**kwargs: Any) -> Server:
        started.append(Server(**kwargs))
        return started[-1]

    try:
        yield start
    finally:
        for server in started:
            server.close()


def test_one_thread_posts_on_one_kept_alive_connection(servers):
    server = servers()
    conns = ThreadConnections()
    try:
        for i in range(20):
            assert conns.post(f"{server.url}/done/j{i}?isStream=false", b"{}", HEADERS, TIMEOUT) == (200, "")
    finally:
        conns.close()
    assert [path for _, path, _ in server.requests] == [f"/done/j{i}?isStream=false" for i in range(20)]
    assert server.connections() == 1


def test_the_answer_time_is_how_long_the_platform_took_to_answer(servers):
    release = threading.Event()
    server = servers(hold=release)
    conns = ThreadConnections()
    assert conns.answer_seconds() is None
    poster = threading.Thread(target=conns.post, args=(f"{server.url}/done/j1", b"{}", HEADERS, TIMEOUT))
    began = time.monotonic()
    poster.start()
    try:
        assert server.arrived.wait(10)
        time.sleep(0.2)  # the platform's latency: the answer is held this long (the stimulus, not a wait for it)
    finally:
        release.set()
    poster.join(10)
    conns.close()
    answer = conns.answer_seconds()
    assert answer is not None and 0.15 <= answer <= time.monotonic() - began


def test_the_answer_time_is_the_quickest_recent_answer_and_old_ones_lapse(servers, monkeypatch):
    server = servers()
    conns = ThreadConnections()
    try:
        for i in range(40):  # more than the ring holds
            assert conns.post(f"{server.url}/done/j{i}", b"{}", HEADERS, TIMEOUT)[0] == 200
        answer = conns.answer_seconds()
        assert answer is not None and 0 < answer < 0.5
        monkeypatch.setattr(thread_connections, "ANSWER_FRESH_SECONDS", 0.05)
        assert wait_for(lambda: conns.answer_seconds() is None, 10)
    finally:
        conns.close()


def test_each_thread_has_its_own_connection(servers):
    server = servers()
    conns = ThreadConnections()
    barrier = threading.Barrier(4)
    failures: List[BaseException] = []

    def post_some() -> None:
        try:
            barrier.wait(10)
            for _ in range(10):
                assert conns.post(f"{server.url}/done/x", b"{}", HEADERS, TIMEOUT)[0] == 200
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=post_some) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    conns.close()
    assert not failures
    assert len(server.requests) == 40
    assert server.connections() == 4


def test_a_connection_the_platform_closed_is_replaced_before_the_next_post(servers):
    # The server closes after each answer without "Connection: close": the
    # next post must see that and open a new connection, not fail on the old.
    server = servers(close_after=True)
    conns = ThreadConnections()
    try:
        for i in range(5):
            assert conns.post(f"{server.url}/done/j{i}", b"{}", HEADERS, TIMEOUT) == (200, "")
            assert server.answered.acquire(timeout=10)  # the server side has closed
    finally:
        conns.close()
    assert len(server.requests) == 5
    assert server.connections() == 5


def test_an_answer_that_says_connection_close_is_followed_by_a_new_connection(servers):
    server = servers(extra={"Connection": "close"})
    conns = ThreadConnections()
    try:
        for i in range(3):
            assert conns.post(f"{server.url}/done/j{i}", b"{}", HEADERS, TIMEOUT) == (200, "")
    finally:
        conns.close()
    assert server.connections() == 3


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_an_answer_sent_before_the_body_was_read_is_the_answer(servers, tls):
    # As the platform answers a body over its limit: 413 at once, then close.
    # Sending the rest fails (over TLS as an SSL EOF); the answer is still
    # read and reported.
    server = servers(answer=(413, b'{"error": "body is over the limit"}', None), early=True, tls=tls)
    conns = ThreadConnections(ca_bundle=CERT) if tls else ThreadConnections()
    big = b"x" * (32 * 1024 * 1024)
    try:
        status, text = conns.post(f"{server.url}/done/j1", big, dict(HEADERS, **{"Content-Length": str(len(big))}),
                                  TIMEOUT)
        assert (status, text) == (413, '{"error": "body is over the limit"}')
        assert conns.post(f"{server.url}/done/j2", b"{}", HEADERS, TIMEOUT)[0] == 413  # on a new connection
    finally:
        conns.close()
    assert server.connections() == 2


def test_an_answer_that_never_comes_is_a_send_failure_after_the_read_timeout(servers):
    release = threading.Event()
    server = servers(hold=release)
    conns = ThreadConnections()
    try:
        with pytest.raises(SendFailed, match="timed out"):
            conns.post(f"{server.url}/done/j1", b"{}", HEADERS, (5.0, 0.3))
    finally:
        release.set()
        conns.close()
    assert [path for _, path, _ in server.requests] == ["/done/j1"]


def test_close_closes_the_connections_and_later_posts_fail(servers):
    server = servers()
    conns = ThreadConnections()
    assert conns.post(f"{server.url}/a", b"{}", HEADERS, TIMEOUT)[0] == 200
    conns.close()
    assert server.answered.acquire(timeout=10)  # the server saw the connection end
    with pytest.raises(SendFailed, match="closed"):
        conns.post(f"{server.url}/b", b"{}", HEADERS, TIMEOUT)
    assert [path for _, path, _ in server.requests] == ["/a"]


def test_close_during_a_post_lets_it_finish_and_then_closes_its_connection(servers):
    release = threading.Event()
    server = servers(hold=release)
    conns = ThreadConnections()
    results: List[Any] = []
    poster = threading.Thread(target=lambda: results.append(
        conns.post(f"{server.url}/a", b"{}", HEADERS, TIMEOUT)))
    poster.start()
    try:
        assert server.arrived.wait(10)  # the post is in flight, its answer held
        conns.close()  # its connection is in use: left to the post
    finally:
        release.set()
    poster.join(10)
    assert results == [(200, "")]
    assert server.answered.acquire(timeout=10)  # and closed once the post ended


def test_an_error_answer_is_read_as_text_even_when_gzipped(servers):
    server = servers(answer=(400, gzip.compress(b'{"error": "no such job"}'), "gzip"))
    conns = ThreadConnections()
    try:
        status, text = conns.post(f"{server.url}/done/j1", b"{}", HEADERS, TIMEOUT)
        # and the connection is still good for the next post
        assert conns.post(f"{server.url}/done/j2", b"{}", HEADERS, TIMEOUT)[0] == 400
    finally:
        conns.close()
    assert (status, text) == (400, '{"error": "no such job"}')
    assert server.connections() == 1


def test_nothing_listening_is_a_send_failure(servers):
    server = servers()
    url = server.url
    server.close()
    conns = ThreadConnections()
    with pytest.raises(SendFailed):
        conns.post(f"{url}/done/j1", b"{}", HEADERS, (2.0, 2.0))


def test_a_header_http_client_refuses_is_refused_before_anything_is_sent(servers):
    server = servers()
    conns = ThreadConnections()
    try:
        with pytest.raises(Refused):
            conns.post(f"{server.url}/done/j1", b"{}", dict(HEADERS, **{"X-Request-ID": "a\nb"}), TIMEOUT)
        assert conns.post(f"{server.url}/done/j2", b"{}", HEADERS, TIMEOUT)[0] == 200  # still usable
    finally:
        conns.close()
    assert [path for _, path, _ in server.requests] == ["/done/j2"]


def test_https_posts_trust_requests_ca_bundle_and_nothing_else(servers, monkeypatch):
    server = servers(tls=True)
    # The system's way would trust this certificate (OpenSSL reads SSL_CERT_FILE) ...
    monkeypatch.setenv("SSL_CERT_FILE", CERT)
    system = ssl.create_default_context()
    with system.wrap_socket(socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1]))),
                            server_hostname="127.0.0.1"):
        pass
    # ... a result post does not: it checks against requests' bundle (certifi's) only.
    conns = ThreadConnections()
    with pytest.raises(SendFailed, match="CERTIFICATE_VERIFY_FAILED"):
        conns.post(f"{server.url}/done/j1", b"{}", HEADERS, TIMEOUT)
    # Given a bundle with it, the same post goes through, on a verified connection.
    trusting = ThreadConnections(ca_bundle=CERT)
    try:
        assert trusting.post(f"{server.url}/done/j2", b"{}", HEADERS, TIMEOUT) == (200, "")
    finally:
        trusting.close()
    assert [path for _, path, _ in server.requests] == ["/done/j2"]


def test_an_https_post_to_a_host_the_certificate_does_not_name_is_refused(servers):
    # The certificate names 127.0.0.1 and localhost; this server answers on 127.0.0.2.
    server = servers(tls=True, host="127.0.0.2")
    trusting = ThreadConnections(ca_bundle=CERT)
    with pytest.raises(SendFailed, match="CERTIFICATE_VERIFY_FAILED"):
        trusting.post(f"{server.url}/done/j1", b"{}", HEADERS, TIMEOUT)
    trusting.close()
    assert server.requests == []


def test_the_client_reports_a_refused_result_with_the_platforms_words(servers):
    server = servers(answer=(404, b'{"error": "job j1 is not yours"}', None))
    settings = Settings.from_env({
        "RUNPOD_WEBHOOK_GET_JOB": f"{server.url}/v2/ep/job-take/$ID",
        "RUNPOD_WEBHOOK_POST_OUTPUT": f"{server.url}/v2/ep/job-done/w1/$ID",
        "RUNPOD_POD_ID": "w1", "RUNPOD_AI_API_KEY": "key",
    })
    client = PlatformClient(settings)
    try:
        with pytest.raises(Rejected, match="job j1 is not yours") as refused:
            client.post_done("j1", b'{"output": 1}', False)
        assert refused.value.status == 404
    finally:
        client.close()
    server.close()
    client = PlatformClient(settings)
    try:
        with pytest.raises(PlatformError) as failed:  # nobody answers: worth another try
            client.post_done("j2", b'{"output": 2}', False, timeout=(2.0, 2.0))
        assert not isinstance(failed.value, Rejected)
    finally:
        client.close()


def test_a_query_with_no_path_and_a_fragment_are_sent_as_requests_sends_them(servers):
    server = servers()
    conns = ThreadConnections()
    try:
        assert conns.post(f"{server.url}?isStream=false", b"{}", HEADERS, TIMEOUT)[0] == 200
        assert conns.post(f"{server.url}/done/j1?isStream=false#part", b"{}", HEADERS, TIMEOUT)[0] == 200
    finally:
        conns.close()
    assert [path for _, path, _ in server.requests] == ["/?isStream=false", "/done/j1?isStream=false"]
