"""The worker's transport (each thread's own keep-alive connection, framed by h11), over real sockets.

The stand-in platform here is :mod:`http.server`'s, not ours, so that the
client is checked against a server this project did not write.
"""

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
from slotworker.worker import transport
from slotworker.worker.transport import BodyLost, Refused, SendFailed, TooLarge, Transport, Untrusted, encode_headers
from slotworker.worker.trust import trust_context
from support import TLS_CERT, TLS_KEY, Meter, wait_for

CERT, KEY = TLS_CERT, TLS_KEY
TIMEOUT = (5.0, 10.0)
HEADERS = {"Content-Type": "application/x-www-form-urlencoded"}


class ThreadConnections:
    """A :class:`Transport` posting as the result posters do: the status, and the text of an error."""

    def __init__(self, ca_bundle: Optional[str] = None) -> None:
        environ = {"SSL_CERT_FILE": ca_bundle} if ca_bundle else {}
        self.transport = Transport(lambda: trust_context(environ))

    def post(self, url: str, body: bytes, headers: Dict[str, str], timeout: Tuple[float, float]) -> Tuple[int, str]:
        answer = self.transport.request("POST", url, encode_headers(headers), body, timeout, 1 << 20)
        return answer.status, ("" if answer.status < 300 else answer.body.decode("utf-8", "replace"))

    def answer_seconds(self) -> Optional[float]:
        return self.transport.answer_seconds()

    def close(self) -> None:
        self.transport.close()


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
        self.httpd.handle_error = lambda request, address: None  # (a client closing early is part of some tests)
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
        monkeypatch.setattr(transport, "ANSWER_FRESH_SECONDS", 0.05)
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
        status, text = conns.post(f"{server.url}/done/j1", big, HEADERS, TIMEOUT)
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


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
def test_https_trusts_a_ca_named_by_any_one_of_the_variables_users_set(servers, variable, tmp_path):
    server = servers(tls=True)
    location = CERT
    if variable == "SSL_CERT_DIR":  # a directory of certificates named by their hash, as c_rehash makes it
        location = str(tmp_path)
        with open(CERT) as source, open(tmp_path / f"{_subject_hash(CERT)}.0", "w") as linked:
            linked.write(source.read())
    trusting = Transport(lambda: trust_context({variable: location}))
    try:
        answer = trusting.request("POST", f"{server.url}/done/j1", encode_headers(HEADERS), b"{}", TIMEOUT, 1024)
        assert answer.status == 200
    finally:
        trusting.close()
    assert [path for _, path, _ in server.requests] == ["/done/j1"]


def test_https_without_the_ca_is_refused_with_one_error_that_says_how_to_trust_it(servers, records, monkeypatch):
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    server = servers(tls=True)
    untrusting = Transport(lambda: trust_context({}))
    try:
        for i in range(3):
            with pytest.raises(Untrusted):
                untrusting.request("POST", f"{server.url}/done/j{i}", encode_headers(HEADERS), b"{}", TIMEOUT, 1024)
    finally:
        untrusting.close()
    errors = [line for line in records.lines if line.startswith("ERROR")]
    assert len(errors) == 1, errors
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        assert name in errors[0]
    assert server.requests == []


def _subject_hash(cert: str) -> str:
    import subprocess

    return subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", cert], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_an_https_post_to_a_host_the_certificate_does_not_name_is_refused(servers, records):
    # The certificate names 127.0.0.1 and localhost; this server answers on 127.0.0.2.
    server = servers(tls=True, host="127.0.0.2")
    trusting = ThreadConnections(ca_bundle=CERT)
    with pytest.raises(Untrusted):
        trusting.post(f"{server.url}/done/j1", b"{}", HEADERS, TIMEOUT)
    trusting.close()
    assert server.requests == []
    errors = [line for line in records.lines if line.startswith("ERROR")]
    assert len(errors) == 1 and "does not name 127.0.0.2" in errors[0], errors


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


def test_an_answer_longer_than_its_cap_is_too_large_and_its_connection_is_not_reused(servers):
    server = servers(answer=(200, b"x" * 5000, None))
    conns = ThreadConnections()
    try:
        with pytest.raises(TooLarge, match="1024"):
            conns.transport.request("POST", f"{server.url}/a", encode_headers(HEADERS), b"{}", TIMEOUT, 1024)
        answer = conns.transport.request("POST", f"{server.url}/b", encode_headers(HEADERS), b"{}", TIMEOUT, 5000)
        assert answer.body == b"x" * 5000
    finally:
        conns.close()
    assert server.connections() == 2


def test_a_gzip_bomb_is_too_large_once_decoded_past_the_cap_without_decoding_it_all(servers):
    bomb = gzip.compress(b"\0" * (200 * 1024 * 1024))  # 200 MiB decoded, about 200 KiB sent
    server = servers(answer=(200, bomb, "gzip"))
    conns = ThreadConnections()
    meter = Meter()
    try:
        with pytest.raises(TooLarge):
            conns.transport.request("POST", f"{server.url}/a", encode_headers(HEADERS), b"{}", TIMEOUT, 1 << 20)
        growth = meter.growth()
    finally:
        meter.stop()
        conns.close()
    assert growth < 64 * 1024 * 1024


def test_several_gzip_members_are_all_decoded(servers):
    server = servers(answer=(200, gzip.compress(b'{"a": ') + gzip.compress(b"1}"), "gzip"))
    conns = ThreadConnections()
    try:
        answer = conns.transport.request("POST", f"{server.url}/a", encode_headers(HEADERS), b"{}", TIMEOUT, 1024)
    finally:
        conns.close()
    assert answer.body == b'{"a": 1}'


class RawServer:
    """Answers each connection's first request with the given bytes, then closes: for answers http.server won't send."""

    def __init__(self, answer: bytes) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.answer = answer
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            with sock:
                data = b""
                while b"\r\n\r\n" not in data:
                    more = sock.recv(65536)
                    if not more:
                        break
                    data += more
                sock.sendall(self.answer)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def raw_server() -> Iterator[Any]:
    started: List[RawServer] = []

    def start(answer: bytes) -> RawServer:
        started.append(RawServer(answer))
        return started[-1]

    try:
        yield start
    finally:
        for server in started:
            server.close()


@pytest.fixture
def client() -> Iterator[Transport]:
    """A transport trusting nothing from the environment, closed after the test."""
    transport = Transport(lambda: trust_context({}))
    try:
        yield transport
    finally:
        transport.close()


def test_a_chunked_answer_and_one_read_to_the_close_are_read_whole(raw_server, client):
    chunked = raw_server(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n")
    to_close = raw_server(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
    assert client.request("GET", f"{chunked.url}/a", [], None, TIMEOUT, 1024).body == b"abcde"
    answer = client.request("GET", f"{to_close.url}/a", [], None, TIMEOUT, 1024)
    assert (answer.status, answer.body, answer.header(b"content-type")) == (200, b"until the end", "text/plain")


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
], ids=["cut-short", "bad-chunk-size"])
def test_a_body_that_cannot_be_read_whole_is_lost_with_its_status(raw_server, client, answer):
    server = raw_server(answer)
    with pytest.raises(BodyLost) as lost:
        client.request("GET", f"{server.url}/a", [], None, TIMEOUT, 1024)
    assert lost.value.status == 200


@pytest.mark.parametrize("answer", [b"garbage\r\n\r\n", b"HTTP/1.1 2000 OK\r\n\r\n", b""],
                         ids=["not-http", "bad-status", "closed"])
def test_an_answer_that_is_not_http_is_a_send_failure(raw_server, client, answer):
    server = raw_server(answer)
    with pytest.raises(SendFailed) as failed:
        client.request("GET", f"{server.url}/a", [], None, TIMEOUT, 1024)
    assert not isinstance(failed.value, BodyLost)
