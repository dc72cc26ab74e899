"""The HTTP/1.1 exchange under the worker's requests, against a server that
answers scripted bytes over real sockets."""

from __future__ import annotations

import http.client
import socket
import threading
from typing import Iterator, List, Optional

import pytest

from slotworker.worker.http_exchange import HeaderBlock, Refused, host_header, host_port, request_bytes
from slotworker.worker.thread_connections import BodyLost, SendFailed, ThreadConnections

TIMEOUT = (5.0, 5.0)
HEADERS = {"User-Agent": "t", "Accept-Encoding": "gzip, deflate", "Accept": "*/*", "Connection": "keep-alive"}


class Scripted:
    """Answers the n-th request with ``answers[n]``; records each request and its connection."""

    def __init__(self, answers: List[bytes], close_after: Optional[int] = None) -> None:
        self.answers = answers
        self.close_after = close_after  # close the connection after this many answers on it
        self.requests: List[tuple] = []  # (connection number, head bytes, body bytes)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        number = 0
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            number += 1
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        buffer, served = b"", 0
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                body, buffer = buffer[:length], buffer[length:]
                with self._lock:
                    self.requests.append((number, head, body))
                    answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
                conn.sendall(answer)
                served += 1
                if self.close_after is not None and served >= self.close_after:
                    return

    def connections(self) -> List[int]:
        return [number for number, _, _ in self.requests]

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def scripted() -> Iterator[object]:
    started: List[Scripted] = []

    def start(answers: List[bytes], **kwargs: object) -> Scripted:
        started.append(Scripted(answers, **kwargs))  # type: ignore[arg-type]
        return started[-1]

    yield start
    for server in started:
        server.close()


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


def exchange(url: str, answers_expected: int, method: str = "GET") -> List[tuple]:
    conns = ThreadConnections()
    try:
        if method == "GET":
            return [conns.get(f"{url}/r{i}", HEADERS, TIMEOUT) for i in range(answers_expected)]
        return [conns.post(f"{url}/r{i}", b"{}", dict(HEADERS, **{"Content-Length": "2"}), TIMEOUT)
                for i in range(answers_expected)]
    finally:
        conns.close()


@pytest.mark.parametrize("method, body", [("GET", None), ("POST", b'{"output": 1}'), ("POST", b"")])
def test_a_request_is_the_bytes_http_client_writes_for_it(method, body):
    headers = dict(HEADERS, **{"X-Request-ID": "job-1"})
    if body is not None:
        headers["Content-Length"] = str(len(body))
    ours, theirs = socket.socketpair()
    with ours, theirs:
        conn = http.client.HTTPConnection("127.0.0.1", 8765)
        conn.sock = ours
        conn.request(method, "/v2/x/job-done/w1/job-1?isStream=false", body, headers)
        ours.shutdown(socket.SHUT_WR)
        written = b""
        while chunk := theirs.recv(65536):
            written += chunk
    host = host_header("127.0.0.1", 8765, 80)
    assert request_bytes(method, "/v2/x/job-done/w1/job-1?isStream=false", host, headers, body) == written


@pytest.mark.parametrize("method, body", [("GET", None), ("POST", b'{"output": 1}')])
def test_a_header_block_writes_the_bytes_its_headers_would(method, body):
    # A post's fixed headers are checked and encoded once: with the job's
    # own after them, the request is the same as with all of them given.
    own = {"X-Request-ID": "job-1"}
    if body is not None:
        own["Content-Length"] = str(len(body))
    target, host = "/v2/x/job-done/w1/job-1?isStream=false", "127.0.0.1:8765"
    assert (request_bytes(method, target, host, own, body, HeaderBlock(HEADERS))
            == request_bytes(method, target, host, {**HEADERS, **own}, body))
    assert request_bytes("GET", target, host, {}, None, HeaderBlock(HEADERS)) == request_bytes(
        "GET", target, host, HEADERS, None)


def test_a_header_block_that_cannot_be_written_refuses_every_request_and_sends_nothing(scripted):
    server = scripted([OK])
    block = HeaderBlock({"Authorization": "key\r\nX-Injected: 1"})
    conns = ThreadConnections()
    try:
        for _ in range(2):
            with pytest.raises(Refused, match="line break"):
                conns.get(f"{server.url}/r", {}, TIMEOUT, block)
        assert conns.get(f"{server.url}/r", {}, TIMEOUT, HeaderBlock(HEADERS)) == (200, b"{}", "")
    finally:
        conns.close()
    assert len(server.requests) == 1 and b"X-Injected" not in server.requests[0][1]


def test_each_request_a_broken_block_refuses_gets_its_own_exception():
    # One stored exception raised again would gather every raise's frames
    # (and their locals: a post's body) in one traceback for as long as the
    # block lives.
    block = HeaderBlock({"Authorization": "key\n"})
    raised = []
    for _ in range(3):
        try:
            request_bytes("POST", "/a", "h", {}, b"x" * 1000, block)
        except Refused as exc:
            raised.append(exc)
    assert len({id(exc) for exc in raised}) == 3
    assert all("line break" in str(exc) for exc in raised)


def test_a_header_both_fixed_and_given_is_refused_not_sent_twice():
    with pytest.raises(Refused, match="given twice"):
        request_bytes("POST", "/a", "h", {"content-length": "2"}, b"{}", HeaderBlock({"Content-Length": "2"}))


def test_the_host_is_split_and_named_as_http_client_names_it():
    assert host_port("example.com", 443) == ("example.com", 443)
    assert host_port("example.com:8443", 443) == ("example.com", 8443)
    assert host_port("example.com:", 80) == ("example.com", 80)
    assert host_port("[::1]:9000", 80) == ("::1", 9000)
    assert host_header("::1", 9000, 80) == "[::1]:9000"
    assert host_header("fe80::1%eth0", 80, 80) == "[fe80::1]"
    assert host_header("bücher.example", 443, 443) == "xn--bcher-kva.example"
    with pytest.raises(Refused, match="not a number"):
        host_port("example.com:http", 80)


@pytest.mark.parametrize("target, headers", [
    ("/a b", {}),
    ("/a\r\nX-Injected: 1", {}),
    ("/caf\u00e9", {}),
    ("/a", {"X-Request-ID": "a\r\nX-Injected: 1"}),
    ("/a", {"X-Request-ID": "a\nb"}),
    ("/a", {"Bad:Name": "x"}),
    ("/a", {" Lead": "x"}),
    ("/a", {"X-Name": "\u2603"}),
])
def test_a_request_that_cannot_be_written_as_given_is_refused(target, headers):
    with pytest.raises(Refused):
        request_bytes("GET", target, "h", headers, None)


def test_interim_answers_before_the_answer_are_skipped(scripted):
    server = scripted([b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK])
    assert exchange(server.url, 2) == [(200, b"{}", ""), (200, b"{}", "")]
    assert server.connections() == [1, 1]


def test_a_chunked_answer_with_extensions_and_trailers_is_read_and_the_connection_kept(scripted):
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
               b"3;ext=1\r\n[{\"\r\n4\r\nid\":\r\n0\r\nX-Trailer: t\r\n\r\n")
    server = scripted([chunked])
    got = exchange(server.url, 2)
    assert got == [(200, b'[{"id":', "application/json")] * 2
    assert server.connections() == [1, 1]


def test_an_answer_without_a_length_is_read_to_the_close_and_the_next_request_opens_another(scripted):
    server = scripted([b"HTTP/1.1 200 OK\r\n\r\n[]"], close_after=1)
    assert exchange(server.url, 2) == [(200, b"[]", "")] * 2
    assert server.connections() == [1, 2]


def test_an_http_1_0_answer_or_one_that_says_close_is_not_reused(scripted):
    server = scripted([b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}",
                       b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", OK, OK])
    assert [status for status, _, _ in exchange(server.url, 4)] == [200] * 4
    assert server.connections() == [1, 2, 3, 3]


def test_bytes_after_the_body_leave_the_connection_unused(scripted):
    server = scripted([OK + b"HTTP/1.1 200 OK\r\n", OK])
    assert exchange(server.url, 2, "POST") == [(200, ""), (200, "")]
    assert server.connections() == [1, 2]


def test_answers_without_a_body_keep_the_connection(scripted):
    server = scripted([b"HTTP/1.1 204 No Content\r\n\r\n", b"HTTP/1.1 304 Not Modified\r\n\r\n", OK])
    assert exchange(server.url, 3) == [(204, b"", ""), (304, b"", ""), (200, b"{}", "")]
    assert server.connections() == [1, 1, 1]


@pytest.mark.parametrize("answer, message", [
    (b"<html>oops</html>\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 2000 OK\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 099 Low\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/2 200\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "switches protocols"),
    (b"HTTP/1.1 200 OK\r\nX-Long: " + b"x" * 70000 + b"\r\n\r\n", "longer than"),
])
def test_an_answer_whose_head_is_not_http_is_a_send_failure(scripted, answer, message):
    server = scripted([answer, OK])
    conns = ThreadConnections()
    try:
        with pytest.raises(SendFailed, match=message):
            conns.post(f"{server.url}/r", b"{}", dict(HEADERS, **{"Content-Length": "2"}), TIMEOUT)
        assert conns.post(f"{server.url}/r", b"{}", dict(HEADERS, **{"Content-Length": "2"}), TIMEOUT) == (200, "")
    finally:
        conns.close()
    assert server.connections() == [1, 2]  # the bad one was dropped


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
])
def test_a_body_that_cannot_be_read_loses_a_get_but_not_a_posts_status(scripted, answer):
    server = scripted([answer], close_after=1)
    conns = ThreadConnections()
    try:
        with pytest.raises(BodyLost):
            conns.get(f"{server.url}/take", HEADERS, TIMEOUT)
        # A post's 2xx status is its answer: the platform has the result.
        assert conns.post(f"{server.url}/done", b"{}", dict(HEADERS, **{"Content-Length": "2"}), TIMEOUT) == (200, "")
    finally:
        conns.close()
    assert server.connections() == [1, 2]


@pytest.mark.parametrize("length", [b"twelve", b"-2", b"", b"\xb2", b"9" * 5000])
def test_a_content_length_that_is_not_a_number_is_ignored_and_the_body_read_to_the_close(scripted, length):
    # As http.client reads it: the header does not count, the close ends the body.
    server = scripted([b"HTTP/1.1 503 Busy\r\nContent-Length: " + length + b"\r\n\r\nbusy"], close_after=1)
    assert exchange(server.url, 1, "POST") == [(503, "busy")]


def test_lines_that_end_in_a_bare_lf_and_a_status_line_with_two_spaces_are_read(scripted):
    server = scripted([b"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}",
                       b"HTTP/1.1  201 Created\r\nContent-Length: 2\r\n\n{}",
                       b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\n{}\n0\n\n"])
    assert exchange(server.url, 3) == [(200, b"{}", ""), (201, b"{}", ""), (200, b"{}", "")]
    assert server.connections() == [1, 1, 1]


def test_a_transfer_coding_other_than_chunked_is_read_by_its_content_length(scripted):
    server = scripted([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nContent-Length: 2\r\n\r\n{}"])
    assert exchange(server.url, 2) == [(200, b"{}", "")] * 2
    assert server.connections() == [1, 1]


def test_a_long_body_in_many_small_chunks_is_read_whole(scripted):
    payload = bytes(range(256)) * 4096  # 1 MiB
    chunks = b"".join(b"%x\r\n" % 64 + payload[i:i + 64] + b"\r\n" for i in range(0, len(payload), 64))
    server = scripted([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n",
                       b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload])
    assert [body for _, body, _ in exchange(server.url, 2)] == [payload, payload]
    assert server.connections() == [1, 1]
