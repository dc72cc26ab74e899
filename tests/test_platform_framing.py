"""The local platform's request framing (h11, strict), over real sockets.

Every hostile request gets an error answer and a closed connection, and
the request hidden behind it is never processed; bodies stay under
``max_body`` whatever their framing; what clients rely on (keep-alive,
pipelining, ``100-continue``, HTTP/1.0) keeps working; and seeded random
bytes never hang the server or get a traceback.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import threading
import time
from typing import Any, Dict, Iterator, List, Tuple

import pytest
import requests

from slotworker.platform import Platform
from slotworker.platform.framing import MAX_HEAD

from support import Meter, wait_for

WAIT = 10.0  # generous deadline for anything that should happen "soon"

Answer = Tuple[int, Dict[str, str], bytes]

#: A request that would submit a job, hidden where a lenient parser would read it.
HIDDEN_BODY = b'{"input": "smuggled"}'
HIDDEN = (b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(HIDDEN_BODY)) + HIDDEN_BODY


# ---------------------------------------------------------------- helpers
class Incomplete(Exception):
    """The bytes end inside an answer."""


def parse_answers(data: bytes) -> List[Answer]:
    """Every answer in ``data``, in order; raises Incomplete or ValueError for anything malformed."""
    answers: List[Answer] = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            raise Incomplete(data[:200])
        lines = head.decode("latin-1").split("\r\n")
        version, status_text, _ = (lines[0] + " ").split(" ", 2)
        if version != "HTTP/1.1" or not (status_text.isdigit() and len(status_text) == 3):
            raise ValueError(f"bad status line {lines[0]!r}")
        headers: Dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(": ")
            if not colon:
                raise ValueError(f"bad header line {line!r}")
            headers[name] = value
        status = int(status_text)
        length = int(headers.get("Content-Length", "0")) if status >= 200 and status != 204 else 0
        if len(rest) < length:
            raise Incomplete(data[:200])
        answers.append((status, headers, rest[:length]))
        data = rest[length:]
    return answers


def read_until_closed(s: socket.socket, timeout: float = WAIT) -> Tuple[bytes, bool]:
    """Everything the server sends until it closes (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    data = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return data, False
        s.settimeout(remaining)
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            return data, False
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk


def read_answers(s: socket.socket, count: int, timeout: float = WAIT) -> List[Answer]:
    """The next ``count`` answers (interim ones included) on a connection the server keeps open."""
    deadline = time.monotonic() + timeout
    data = b""
    while True:
        try:
            answers = parse_answers(data)
            if len(answers) >= count:
                return answers
        except Incomplete:
            pass
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no complete answer in time: {data[:300]!r}"
        s.settimeout(remaining)
        chunk = s.recv(65536)
        assert chunk, f"the server closed after {data[:300]!r}"
        data += chunk


def exchange(platform: Platform, raw: bytes) -> Tuple[List[Answer], bool]:
    """Send ``raw`` on a new connection; every answer until the server closes, and whether it did."""
    with socket.create_connection(("127.0.0.1", platform.port), timeout=WAIT) as s:
        s.sendall(raw)
        data, closed = read_until_closed(s)
    return parse_answers(data), closed


def assert_refused(platform: Platform, raw: bytes, statuses: Tuple[int, ...], submitted: int = 0) -> Answer:
    """``raw`` then the hidden request: one error answer, a closed connection, no job submitted
    (beyond the ``submitted`` the test made)."""
    answers, closed = exchange(platform, raw + HIDDEN)
    assert closed, "the connection stayed open"
    assert len(answers) == 1, [a[0] for a in answers]
    status, headers, body = answers[0]
    assert status in statuses, (status, body)
    assert headers["Connection"] == "close"
    assert json.loads(body) == {"error": json.loads(body)["error"], "status": status}
    assert platform.counts()["submitted"] == submitted, "the hidden request was processed"
    return answers[0]


def post_head(extra: bytes, path: bytes = b"/run") -> bytes:
    return b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n"


# ---------------------------------------------------------------- hostile framing
@pytest.mark.parametrize("raw", [
    post_head(b"Content-Length: 0\r\nContent-Length: 21\r\n"),
    post_head(b"Content-Length: 21\r\nContent-Length: 0\r\n"),
    post_head(b"Content-Length: 0, 21\r\n"),
], ids=["first-short", "first-long", "comma-list"])
def test_two_different_content_lengths_are_refused(platform: Platform, raw: bytes) -> None:
    assert_refused(platform, raw, (400,))


@pytest.mark.parametrize("raw", [
    post_head(b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") + b"0\r\n\r\n",
    post_head(b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n") + b"0\r\n\r\n",
    post_head(b"Transfer-Encoding: chunked\r\nContent-Length: 0\r\n") + b"0\r\n\r\n",
], ids=["cl-first", "te-first", "cl-zero"])
def test_transfer_encoding_beside_content_length_is_refused(platform: Platform, raw: bytes) -> None:
    assert_refused(platform, raw, (400,))


@pytest.mark.parametrize("value", [b"+5", b"1_0", b"-1", b" 5 5", b"0x5", b"5.0", b"five", b"1" * 25, b""],
                         ids=["plus", "underscore", "negative", "two-numbers", "hex", "decimal", "word",
                              "too-long", "empty"])
def test_a_malformed_content_length_is_refused(platform: Platform, value: bytes) -> None:
    assert_refused(platform, post_head(b"Content-Length: " + value + b"\r\n") + b"12345", (400,))


@pytest.mark.parametrize("codings", [
    [b"gzip"], [b"identity"], [b"gzip, chunked"], [b"chunked, chunked"], [b"chunked", b"chunked"],
    [b"chunked", b"gzip"],
], ids=["gzip", "identity", "gzip-chunked", "chunked-twice-in-one", "chunked-twice", "chunked-then-gzip"])
def test_an_unknown_or_repeated_transfer_coding_is_refused(platform: Platform, codings: List[bytes]) -> None:
    lines = b"".join(b"Transfer-Encoding: " + c + b"\r\n" for c in codings)
    assert_refused(platform, post_head(lines) + b"0\r\n\r\n", (400, 501))


@pytest.mark.parametrize("chunks", [
    b"0x10\r\n" + b"a" * 16 + b"\r\n0\r\n\r\n",
    b"-1\r\n" + b"a" * 16 + b"\r\n0\r\n\r\n",
    b"zz\r\nabc\r\n0\r\n\r\n",
    b"1" * 21 + b"\r\nabc\r\n0\r\n\r\n",
    b" 5\r\nabcde\r\n0\r\n\r\n",
    b"5 ;x=1\r\nabcde\r\n0\r\n\r\n",
    b"5;a\nb\r\nabcde\r\n0\r\n\r\n",
    b"5\r\nabcdeXX0\r\n\r\n",
    b"5\nabcde\r\n0\r\n\r\n" + b"\n" * 70000,
], ids=["hex-prefix", "negative", "not-hex", "too-long", "leading-space", "space-before-ext",
        "lf-in-ext", "no-crlf-after-data", "lf-only-size-line"])
def test_a_bad_chunk_is_refused(platform: Platform, chunks: bytes) -> None:
    assert_refused(platform, post_head(b"Transfer-Encoding: chunked\r\n") + chunks, (400, 431))


@pytest.mark.parametrize("raw, status", [
    (b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * MAX_HEAD + b"\r\n\r\n", 431),
    (b"GET /health HTTP/1.1\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 100) for i in range(700)) + b"\r\n", 431),
    (b"NONSENSE\r\n\r\n", 400),
    (b"GET /health\r\n\r\n", 400),
    (b"GET /health HTTP/1.1 extra\r\n\r\n", 400),
    (b"GET  /health HTTP/1.1\r\n\r\n", 400),
    (b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"GET /health HTTP/0.9\r\nHost: x\r\n\r\n", 505),
    (b"GET /health HTTX/1.1\r\n\r\n", 400),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400),  # a TLS client hello
    (b"\r\n\r\nGET /health HTTP/1.1\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nContent-Length : 0\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\n folded: x\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nX: a\rb\r\n\r\n", 400),
    (b"GET /he\x00alth HTTP/1.1\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nAccept: */*\r\n\r\n", 400),
], ids=["header-line-too-large", "headers-too-large", "garbage-line", "no-version", "extra-word",
        "double-space", "http-2", "http-0.9", "bad-protocol", "tls", "blank-lines-first",
        "space-before-colon", "space-in-name", "fold-at-start", "bare-cr", "nul-in-target",
        "http-1.1-without-host"])
def test_a_bad_head_is_refused(platform: Platform, raw: bytes, status: int) -> None:
    # The hidden request follows the head; for the first ones the head never
    # ends, so the whole stream is the head.
    assert_refused(platform, raw, (status,))


def test_a_request_cut_short_is_refused_and_nothing_after_it_is_read(platform: Platform) -> None:
    with socket.create_connection(("127.0.0.1", platform.port), timeout=WAIT) as s:
        s.sendall(post_head(b"Content-Length: 100\r\n") + b'{"input": 1}')
        s.shutdown(socket.SHUT_WR)
        data, closed = read_until_closed(s)
    answers = parse_answers(data)
    assert closed and [a[0] for a in answers] == [400]
    assert platform.counts()["submitted"] == 0


def test_a_bad_chunk_on_a_worker_route_is_recorded_with_its_answer(platform: Platform) -> None:
    job_id = platform.submit(1)
    path = f"/v2/{platform.endpoint}/job-done/w1/{job_id}?gpu=local".encode()
    assert_refused(platform, post_head(b"Transfer-Encoding: chunked\r\n", path) + b"-1\r\nxx\r\n", (400,),
                   submitted=1)
    [event] = platform.events
    assert (event.kind, event.status) == ("done", 400)
    assert platform.status(job_id)["status"] == "IN_QUEUE"


# ---------------------------------------------------------------- the body cap
def test_a_declared_length_over_the_cap_is_refused_before_the_body_is_sent(make_platform: Any) -> None:
    p = make_platform(max_body=1000)
    with socket.create_connection(("127.0.0.1", p.port), timeout=WAIT) as s:
        s.sendall(post_head(b"Content-Length: 1001\r\n"))  # and no body
        data, closed = read_until_closed(s)
    [(status, headers, body)] = parse_answers(data)
    assert closed and status == 413 and headers["Connection"] == "close" and json.loads(body)["status"] == 413


def test_a_declared_length_over_the_cap_gets_413_not_100_continue(make_platform: Any) -> None:
    p = make_platform(max_body=1000)
    with socket.create_connection(("127.0.0.1", p.port), timeout=WAIT) as s:
        s.sendall(post_head(b"Content-Length: 5000\r\nExpect: 100-continue\r\n"))
        data, closed = read_until_closed(s)
    assert closed and [a[0] for a in parse_answers(data)] == [413]


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_cap(make_platform: Any) -> None:
    p = make_platform(max_body=1000)
    with socket.create_connection(("127.0.0.1", p.port), timeout=WAIT) as s:
        # 1,200 bytes in two chunks and no last chunk: the answer cannot wait for the end.
        s.sendall(post_head(b"Transfer-Encoding: chunked\r\n") + (b"258\r\n" + b"a" * 600 + b"\r\n") * 2)
        data, closed = read_until_closed(s)
    assert closed and [a[0] for a in parse_answers(data)] == [413]
    assert p.counts()["submitted"] == 0


def test_a_chunked_body_at_the_cap_is_read(make_platform: Any) -> None:
    body = json.dumps({"input": "x" * 900}).encode()
    p = make_platform(max_body=len(body))
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:100], body[100:]))
    answers, closed = exchange(p, post_head(b"Transfer-Encoding: chunked\r\nConnection: close\r\n")
                               + chunks + b"0\r\n\r\n")
    assert closed and [a[0] for a in answers] == [200] and p.counts()["submitted"] == 1


class _Sender(threading.Thread):
    """Streams ``total`` bytes after ``head`` from one reused buffer, so the test itself holds little."""

    def __init__(self, s: socket.socket, head: bytes, total: int, block: bytes) -> None:
        super().__init__(daemon=True)
        self.s, self.head, self.total, self.block = s, head, total, block
        self.sent = 0

    def run(self) -> None:
        try:
            self.s.sendall(self.head)
            while self.sent < self.total:
                self.s.sendall(self.block)
                self.sent += len(self.block)
        except OSError:
            pass  # the server closed the connection: what the test waits for


@pytest.fixture
def meter() -> Iterator[Meter]:
    m = Meter()
    try:
        yield m
    finally:
        m.stop()


def _stream(p: Platform, head: bytes, total: int, block: bytes) -> Tuple[List[Answer], bool]:
    """Stream ``total`` bytes of ``block`` after ``head``; the answers, and whether the server closed."""
    with socket.create_connection(("127.0.0.1", p.port), timeout=WAIT) as s:
        sender = _Sender(s, head, total, block)
        sender.start()
        data, closed = read_until_closed(s, timeout=30)
        sender.join(30)
    return parse_answers(data), closed


MB = 1024 * 1024


def test_the_memory_of_the_measure_is_real(make_platform: Any, meter: Meter) -> None:
    # A body under the cap is held whole: the measure must see it, or the
    # tests below would pass whatever the server did.
    if not meter.exact:
        pytest.skip("resident pages may be reused ones: only a ceiling")
    p = make_platform(max_body=16 * MB)
    block = b"x" * MB
    answers, closed = _stream(p, post_head(b"Content-Length: %d\r\nConnection: close\r\n" % (8 * MB)),
                              8 * MB, block)
    assert [a[0] for a in answers] == [400]  # not JSON
    assert meter.growth() > 8 * MB


def test_a_negative_chunk_size_does_not_read_the_stream_into_memory(make_platform: Any, meter: Meter) -> None:
    p = make_platform(max_body=MB)
    block = b"y" * MB
    answers, closed = _stream(p, post_head(b"Transfer-Encoding: chunked\r\n") + b"-1\r\n", 200 * MB, block)
    assert closed and [a[0] for a in answers] == [400]
    assert meter.growth() < 100 * MB, meter.growth()
    assert p.counts()["submitted"] == 0


def test_valid_chunks_past_the_cap_are_refused_without_holding_them(make_platform: Any, meter: Meter) -> None:
    p = make_platform(max_body=MB)
    chunk = b"%x\r\n%s\r\n" % (64 * 1024, b"z" * 64 * 1024)
    answers, closed = _stream(p, post_head(b"Transfer-Encoding: chunked\r\n"), 50 * MB, chunk)
    assert closed and [a[0] for a in answers] == [413]
    assert meter.growth() < 100 * MB, meter.growth()


def test_a_length_past_the_cap_streamed_anyway_is_not_held(make_platform: Any, meter: Meter) -> None:
    p = make_platform(max_body=MB)
    block = b"w" * MB
    answers, closed = _stream(p, post_head(b"Content-Length: %d\r\n" % (50 * MB)), 50 * MB, block)
    assert closed and [a[0] for a in answers] == [413]
    assert meter.growth() < 100 * MB, meter.growth()


# ---------------------------------------------------------------- what clients rely on
def test_pipelined_requests_are_answered_in_order(platform: Platform) -> None:
    run = json.dumps({"input": 1}).encode()
    raw = (post_head(b"Content-Length: %d\r\n" % len(run)) + run
           + post_head(b"Transfer-Encoding: chunked\r\n") + b"%x\r\n%s\r\n0\r\n\r\n" % (len(run), run)
           + b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
           + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answers, closed = exchange(platform, raw)
    assert closed and [a[0] for a in answers] == [200, 200, 404, 200]
    assert [a[1]["Connection"] for a in answers] == ["keep-alive"] * 3 + ["close"]
    assert "jobs" in json.loads(answers[3][2]) and platform.counts()["submitted"] == 2


def test_hundreds_of_requests_share_one_connection(platform: Platform) -> None:
    job_ids = [platform.submit(i) for i in range(300)]
    with socket.create_connection(("127.0.0.1", platform.port), timeout=WAIT) as s:
        take = f"GET /v2/{platform.endpoint}/job-take-batch/w1?gpu=local&batch_size=300 HTTP/1.1\r\nHost: x\r\n\r\n"
        s.sendall(take.encode())
        [(status, _, body)] = read_answers(s, 1)
        assert status == 200 and len(json.loads(body)) == 300
        for job_id in job_ids:
            result = json.dumps({"output": job_id}).encode()
            path = f"/v2/{platform.endpoint}/job-done/w1/{job_id}?gpu=local&isStream=false".encode()
            s.sendall(post_head(b"Content-Length: %d\r\n" % len(result), path) + result)
            [(status, headers, _)] = read_answers(s, 1)
            assert status == 200 and headers["Connection"] == "keep-alive"
    assert platform.counts()["completed"] == 300


def test_expect_100_continue_is_answered_before_the_body_is_sent(platform: Platform) -> None:
    body = json.dumps({"input": {"n": 1}}).encode()
    with socket.create_connection(("127.0.0.1", platform.port), timeout=WAIT) as s:
        s.sendall(post_head(b"Expect: 100-continue\r\nContent-Length: %d\r\n" % len(body)))
        assert [a[0] for a in read_answers(s, 1)] == [100]
        s.sendall(body)
        answers = read_answers(s, 1)
    assert [a[0] for a in answers] == [200] and b"IN_QUEUE" in answers[0][2]


def test_expect_100_continue_with_a_chunked_body(platform: Platform) -> None:
    body = json.dumps({"input": {"n": 2}}).encode()
    with socket.create_connection(("127.0.0.1", platform.port), timeout=WAIT) as s:
        s.sendall(post_head(b"Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n"))
        assert [a[0] for a in read_answers(s, 1)] == [100]
        s.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        assert [a[0] for a in read_answers(s, 1)] == [200]
    assert platform.counts()["submitted"] == 1


def test_http_1_0_and_connection_close_end_the_connection_after_the_answer(platform: Platform) -> None:
    for raw in (b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                b"GET /health HTTP/1.0\r\n\r\n",
                b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                b"POST /run HTTP/1.0\r\nContent-Length: 12\r\n\r\n{\"input\": 1}"):
        answers, closed = exchange(platform, raw + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert closed and [a[0] for a in answers] == [200], raw
        assert answers[0][1]["Connection"] == "close"
    assert platform.counts()["submitted"] == 1


@pytest.mark.parametrize("method", [b"HEAD", b"PATCH", b"OPTIONS", b"TRACE", b"CONNECT", b"FOO"])
def test_methods_without_a_route_answer_405_and_close(platform: Platform, method: bytes) -> None:
    answers, closed = exchange(platform, method + b" /health HTTP/1.1\r\nHost: x\r\n\r\n" + HIDDEN)
    assert closed and [a[0] for a in answers] == [405]
    assert platform.counts()["submitted"] == 0


def test_a_get_with_a_body_reads_the_body_as_a_body(platform: Platform) -> None:
    # A body no route reads is read and dropped, never taken for a request.
    raw = b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(HIDDEN) + HIDDEN
    chunked = (b"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"%x\r\n%s\r\n0\r\n\r\n" % (len(HIDDEN), HIDDEN))
    last = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answers, closed = exchange(platform, raw + chunked + last)
    assert closed and [a[0] for a in answers] == [200, 200, 200]
    assert platform.counts()["submitted"] == 0


def test_headers_are_recorded_as_sent_and_the_first_authorization_counts(make_platform: Any) -> None:
    p = make_platform(api_key="secret-key")
    url = f"{p.url}/v2/{p.endpoint}/ping/w1?gpu=local"
    assert requests.get(url, headers={"authorization": "secret-key", "X-Extra": "1"}, timeout=WAIT).status_code == 200
    assert requests.get(url, headers={"Authorization": "wrong"}, timeout=WAIT).status_code == 401
    target = f"/v2/{p.endpoint}/ping/w1?gpu=local".encode()
    raw = (b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nAuthorization: secret-key\r\n"
           b"AUTHORIZATION: wrong\r\nConnection: close\r\n\r\n")
    answers, _ = exchange(p, raw)
    assert [a[0] for a in answers] == [200]
    pings = [e for e in p.events if e.kind in ("ping", "rejected")]
    assert [e.kind for e in pings] == ["ping", "rejected", "ping"]
    assert pings[0].headers["authorization"] == "secret-key" and pings[0].headers["X-Extra"] == "1"
    assert pings[2].headers["Authorization"] == "secret-key" and pings[2].headers["AUTHORIZATION"] == "wrong"


def test_a_double_slash_target_is_a_path_not_a_host(platform: Platform) -> None:
    answers, _ = exchange(platform, b"GET //health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert [a[0] for a in answers] == [200]


def test_idle_and_half_sent_connections_end_when_the_platform_closes(make_platform: Any) -> None:
    p = make_platform()
    idle = socket.create_connection(("127.0.0.1", p.port), timeout=WAIT)
    kept = socket.create_connection(("127.0.0.1", p.port), timeout=WAIT)
    half = socket.create_connection(("127.0.0.1", p.port), timeout=WAIT)
    try:
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert [a[0] for a in read_answers(kept, 1)] == [200]
        half.sendall(b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"in")
        assert wait_for(lambda: len(p._server._conns) == 3, WAIT)  # type: ignore[union-attr]
        p.close()
        for s in (idle, kept, half):
            _, closed = read_until_closed(s)
            assert closed
    finally:
        for s in (idle, kept, half):
            s.close()


def test_a_client_vanishing_mid_answer_is_routine(make_platform: Any, records: Any) -> None:
    p = make_platform(long_poll=0.5)
    clients = [socket.create_connection(("127.0.0.1", p.port), timeout=WAIT) for _ in range(5)]
    for s in clients:
        s.sendall(f"GET /v2/{p.endpoint}/job-take/w1?gpu=local HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    # Every take held, then every client resets: the answers go to closed connections.
    assert wait_for(lambda: p.counts()["waiting_takes"] == 5, WAIT)
    for s in clients:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    assert p.wait_until(lambda _: len(p.takes()) == 5, WAIT)
    assert wait_for(lambda: not p._server._conns, WAIT)  # type: ignore[union-attr]  # every handler is done
    assert requests.get(f"{p.url}/health", timeout=WAIT).status_code == 200
    assert not [line for line in records.lines if line.startswith(("WARNING", "ERROR", "CRITICAL"))]


# ---------------------------------------------------------------- fuzz
_RUN = json.dumps({"input": {"fuzz": 1}}).encode()
_DONE = json.dumps({"output": "x"}).encode()
VALID = [
    post_head(b"Content-Length: %d\r\n" % len(_RUN)) + _RUN,
    post_head(b"Transfer-Encoding: chunked\r\n") + b"%x\r\n%s\r\n0\r\n\r\n" % (len(_RUN), _RUN),
    b"GET /health HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n",
    b"GET /status/nope HTTP/1.0\r\n\r\n",
    post_head(b"Content-Length: %d\r\nAuthorization: k\r\nX-Request-ID: j\r\n" % len(_DONE),
              b"/v2/local/job-done/w1/j?gpu=local&isStream=false") + _DONE,
    b"GET /v2/local/ping/w1?gpu=local HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /v2/local/job-take/w1?gpu=local HTTP/1.1\r\nHost: x\r\n\r\n",
    post_head(b"Expect: 100-continue\r\nContent-Length: %d\r\n" % len(_RUN)) + _RUN,
]
#: Lines a mutation may insert: the framing headers, right and wrong.
HOSTILE_LINES = [b"Content-Length: 3\r\n", b"Content-Length: -1\r\n", b"Transfer-Encoding: chunked\r\n",
                 b"Transfer-Encoding: gzip\r\n", b"Connection: close\r\n", b"Expect: 100-continue\r\n",
                 b"X: \xff\r\n", b"\r\n", b"0\r\n\r\n", b"ffffffff\r\n"]


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One to three random edits of ``data``."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(b))
        kind = rng.randrange(8)
        if kind == 0 and b:
            b[min(at, len(b) - 1)] = rng.randrange(256)
        elif kind == 1:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif kind == 2:
            del b[at:at + rng.randint(1, 12)]
        elif kind == 3:
            b[at:at] = rng.choice(HOSTILE_LINES)
        elif kind == 4:
            b = bytearray(bytes(b).replace(b"\r\n", b"\n", rng.randint(1, 3)))
        elif kind == 5:
            b = b[:at]
        elif kind == 6:
            b += rng.choice(VALID)
        else:
            digits = [i for i, c in enumerate(b) if 0x30 <= c <= 0x39]
            if digits:
                b[rng.choice(digits)] = rng.choice(b"0123456789abcdefx-+ ")
    return bytes(b)


def fuzz_case(rng: random.Random) -> bytes:
    pick = rng.random()
    if pick < 0.15:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
    if pick < 0.25:
        return b"".join(rng.choice(VALID) for _ in range(rng.randint(2, 4)))
    return mutate(rng, rng.choice(VALID))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_bytes_get_well_formed_answers_or_a_close_never_a_hang(make_platform: Any, records: Any,
                                                                     seed: int) -> None:
    p = make_platform(long_poll=0.05, max_body=4096, api_key="k")
    rng = random.Random(seed)
    statuses: Dict[int, int] = {}
    for case in range(150):
        raw = fuzz_case(rng)
        with socket.create_connection(("127.0.0.1", p.port), timeout=WAIT) as s:
            try:
                s.sendall(raw)
                s.shutdown(socket.SHUT_WR)  # so that a request cut short is not waited for
            except OSError:
                pass  # the server may already have answered and closed
            data, closed = read_until_closed(s, timeout=WAIT)
        assert closed, f"seed {seed} case {case}: no close within {WAIT} s after {raw!r}"
        for status, headers, body in parse_answers(data):
            statuses[status] = statuses.get(status, 0) + 1
            assert status < 500 or status in (501, 505), (raw, status, body)
            if status >= 400:
                assert json.loads(body)["status"] == status, (raw, body)
    assert statuses.get(200, 0) > 10 and sum(n for s, n in statuses.items() if s >= 400) > 50, statuses
    assert not [line for line in records.lines if line.startswith(("ERROR", "CRITICAL"))], records.text()
    r = requests.post(f"{p.url}/run", json={"input": "after"}, timeout=WAIT)
    assert r.status_code == 200 and p.status(r.json()["id"])["status"] == "IN_QUEUE"
