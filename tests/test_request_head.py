"""The local platform's request-head reader: the parser alone, then over real sockets."""

from __future__ import annotations

import io
import json
import random
import socket
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest
import requests

from slotworker.platform import Platform
from slotworker.platform.request_head import (MAX_HEADERS, MAX_LINE, HeadError, parse_request_line,
                                              read_headers, split_target)

from support import raw_exchange

WAIT = 10.0


# ---------------------------------------------------------------- the parser
def _as_urllib_reads_it(target: str) -> tuple:
    split = urlsplit(target)
    return [unquote(part) for part in split.path.split("/") if part], dict(parse_qsl(split.query, keep_blank_values=True))


def test_a_target_is_split_as_urllib_splits_it() -> None:
    # The plain split (nothing to unquote) and urllib's way must agree on
    # every target, so seeded random ones mix what each path handles.
    assert split_target("/v2/ep/job-done/w-1/j-1?gpu=local&isStream=false") == (
        ["v2", "ep", "job-done", "w-1", "j-1"], {"gpu": "local", "isStream": "false"})
    assert split_target("/a//b/?x&y=&x=2") == (["a", "b"], {"x": "2", "y": ""})
    assert split_target("/a%2Fb?q=a+b%26c#frag") == (["a/b"], {"q": "a b&c"})
    pieces = ["/", "a", "?", "&", "=", "%20", "%2F", "+", "#", ";", "//", "==", "http:", "\u00e9"]
    rng = random.Random(11)
    for _ in range(20000):
        target = rng.choice(["/", ""]) + "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        assert split_target(target) == _as_urllib_reads_it(target), target


def test_headers_match_any_case_keep_their_order_and_the_first_repeat_wins() -> None:
    h = read_headers(io.BytesIO(b"Host: x\r\nX-Twice: one\r\ncontent-LENGTH:  12 \r\nx-twice: two\r\n\r\nbody"))
    assert h.get("Content-Length") == "12" and h["CONTENT-LENGTH"] == "12"
    assert h.get("X-TWICE") == "one" and h.get_all("x-twice") == ["one", "two"]
    assert h.items() == [("Host", "x"), ("X-Twice", "one"), ("content-LENGTH", "12"), ("x-twice", "two")]
    assert "host" in h and "Accept" not in h and h.get("Accept") is None and h.get("Accept", "d") == "d"
    assert list(h) == h.keys() == ["Host", "X-Twice", "content-LENGTH", "x-twice"] and len(h) == 4
    assert h.values() == ["x", "one", "12", "two"]


def test_the_reader_stops_at_the_blank_line_and_leaves_the_body() -> None:
    f = io.BytesIO(b"A: 1\nB: 2\n\n{\"x\": 1}")
    assert read_headers(f).items() == [("A", "1"), ("B", "2")]
    assert f.read() == b'{"x": 1}'


def test_a_folded_line_continues_the_header_before_it() -> None:
    h = read_headers(io.BytesIO(b"X-Long: first\r\n  second\r\n\tthird\r\nY: y\r\n\r\n"))
    assert h.get("x-long") == "first second third" and h.get("y") == "y"


def test_values_keep_latin_1_and_empty_values_are_values() -> None:
    h = read_headers(io.BytesIO("X-Name: caf\u00e9\r\nX-Empty:\r\n\r\n".encode("latin-1")))
    assert h.get("x-name") == "caf\u00e9" and h.get("x-empty") == "" and "x-empty" in h


@pytest.mark.parametrize("raw, status", [
    (b"no colon here\r\n\r\n", 400),
    (b"Bad Name: x\r\n\r\n", 400),
    (b": no name\r\n\r\n", 400),
    (b" starts folded: x\r\n\r\n", 400),
    (b"Host: x\r\nContent-Length: 5\r\n", 400),  # the connection ended inside the head
    (b"", 400),
    (b"X-Big: " + b"a" * MAX_LINE + b"\r\n\r\n", 431),
    (b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS + 1)) + b"\r\n", 431),
])
def test_bad_header_blocks_are_refused_with_a_status(raw: bytes, status: int) -> None:
    with pytest.raises(HeadError) as info:
        read_headers(io.BytesIO(raw))
    assert info.value.status == status and info.value.message


def test_a_full_house_of_headers_is_still_read() -> None:
    raw = b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS)) + b"\r\n"
    assert len(read_headers(io.BytesIO(raw))) == MAX_HEADERS


def test_request_lines() -> None:
    assert parse_request_line("POST /v2/x HTTP/1.1") == ("POST", "/v2/x", "HTTP/1.1", (1, 1))
    assert parse_request_line("GET / HTTP/1.0")[3] == (1, 0)
    for line, status in [("NONSENSE", 400), ("GET /", 400), ("GET / HTTP/1.1 extra", 400),
                         ("GET / HTTX/1.1", 400), ("GET / HTTP/1", 400), ("GET / HTTP/1.x", 400),
                         ("GET / HTTP/\uff11.\uff11", 400),
                         ("GET / HTTP/2.0", 505)]:
        with pytest.raises(HeadError) as info:
            parse_request_line(line)
        assert info.value.status == status, line


# ---------------------------------------------------------------- over a socket
@pytest.mark.parametrize("raw, status", [
    (b"GET /health HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * MAX_LINE + b"\r\n\r\n", 431),
    (b"GET /health HTTP/2.0\r\n\r\n", 505),
    (b"GET /health\r\n\r\n", 400),
])
def test_a_bad_head_gets_a_json_error_and_the_connection_closes(platform: Platform, raw: bytes,
                                                                 status: int) -> None:
    got, headers, body = raw_exchange(platform, raw)
    assert got == status and headers["Connection"] == "close"
    assert json.loads(body)["status"] == status


def test_connection_close_and_http_1_0_end_the_connection_after_the_answer(platform: Platform) -> None:
    for raw in (b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n", b"GET /health HTTP/1.0\r\n\r\n"):
        status, headers, body = raw_exchange(platform, raw)
        assert status == 200 and headers["Connection"] == "close" and "jobs" in json.loads(body)


def test_two_requests_in_one_send_are_both_answered_on_the_kept_connection(platform: Platform) -> None:
    raw = (b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n{\"input\": 1}"
           b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: CLOSE\r\n\r\n")
    status, headers, _ = raw_exchange(platform, raw)
    assert status == 200 and headers["Connection"] == "close"
    assert platform.counts()["submitted"] == 1


def test_expect_100_continue_is_answered_before_the_body_is_sent(platform: Platform) -> None:
    body = json.dumps({"input": {"n": 1}}).encode()
    with socket.create_connection(("127.0.0.1", platform.port), timeout=WAIT) as s:
        s.sendall(b"POST /run HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        interim = s.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 ")
        s.sendall(body)
        answer = s.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200 ") and b"IN_QUEUE" in answer


def test_the_worker_headers_reach_the_recorded_events_as_sent(make_platform: Platform) -> None:
    p = make_platform(api_key="secret-key")  # type: ignore[operator]
    url = f"{p.url}/v2/{p.endpoint}/ping/w1?gpu=local"
    assert requests.get(url, headers={"authorization": "secret-key", "X-Extra": "1"}, timeout=WAIT).status_code == 200
    assert requests.get(url, headers={"Authorization": "wrong"}, timeout=WAIT).status_code == 401
    pings = [e for e in p.events if e.kind in ("ping", "rejected")]
    assert [e.kind for e in pings] == ["ping", "rejected"]
    assert pings[0].headers["authorization"] == "secret-key" and pings[0].headers["X-Extra"] == "1"
