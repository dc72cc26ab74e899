"""``serverless.utils.rp_download``: fetching from a real loopback server.

Loopback is a private address, so the guard refuses it unless
``RUNPOD_ALLOW_PRIVATE_DOWNLOAD_URLS`` is set; most tests set it. Refusals
of other private, odd-scheme and proxied URLs happen before any connection,
so they need no server. The return shapes asserted here are runpod 1.12.0's
(``tests_differential/test_download_differential.py`` compares them).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple
from urllib.parse import parse_qs, quote, urlparse

import pytest
import requests

from slotworker.serverless.utils import rp_download
from slotworker.serverless.utils._url_guard import (SSRFError, _get_first_reachable, _PinnedAdapter,
                                                    is_public_address, safe_get)

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


class FileServer:
    """A threaded HTTP server on 127.0.0.1 with the routes these tests need.

    ``/file/<name>?cd=<filename>&len=<n>``: ``n`` bytes (default: the
    ``content`` set for ``name``), with a Content-Disposition filename if
    ``cd`` is given; ``/nolength/<n>``: ``n`` bytes without a length (the end
    is the closed connection); ``/chunked/<n>``: ``n`` bytes in chunks;
    ``/status/<code>``; ``/redirect?to=<url>&code=<c>``; ``/loop``: redirects to itself; ``/flaky/<key>/<n>``:
    500 for the first ``n`` requests of ``key``, then a body; ``/host``: the
    Host header it got. ``on_request`` (if set) runs for every request.
    """

    def __init__(self, tls: Optional[Tuple[str, str]] = None) -> None:
        self.content: Dict[str, bytes] = {}
        self.hits: Dict[str, int] = {}
        self.paths: List[str] = []
        self.on_request: Optional[Callable[[str], None]] = None
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, code: int, body: bytes, headers: Optional[Dict[str, str]] = None,
                      length: Optional[int] = None) -> None:
                self.send_response(code)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                if length is None:
                    self.send_header("Content-Length", str(len(body)))
                elif length >= 0:
                    self.send_header("Content-Length", str(length))
                else:  # no length: the body ends when the connection closes
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:  # the client hung up early, as the cap makes it do
                    pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                parts = url.path.strip("/").split("/")
                with server._lock:
                    server.paths.append(self.path)
                if server.on_request is not None:
                    server.on_request(self.path)
                route = parts[0]
                if route == "file":
                    body = server.content.get(parts[1], b"x" * int(query.get("len", "0")))
                    headers = {"Content-Disposition": f'attachment; filename="{query["cd"]}"'} if "cd" in query else {}
                    self._send(200, body, headers)
                elif route == "nolength":
                    self._send(200, b"n" * int(parts[1]), length=-1)
                elif route == "chunked":
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    try:
                        for start in range(0, int(parts[1]), 1000):
                            piece = b"c" * min(1000, int(parts[1]) - start)
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.write(b"0\r\n\r\n")
                    except OSError:  # the client hung up early, as the cap makes it do
                        self.close_connection = True
                elif route == "status":
                    self._send(int(parts[1]), b"error page")
                elif route == "loop":
                    self._send(302, b"", {"Location": "/loop"})
                elif route == "redirect":
                    self._send(int(query.get("code", "302")), b"", {"Location": query["to"]})
                elif route == "flaky":
                    with server._lock:
                        seen = server.hits[parts[1]] = server.hits.get(parts[1], 0) + 1
                    if seen <= int(parts[2]):
                        self._send(500, b"try again")
                    else:
                        self._send(200, b"finally")
                elif route == "host":
                    self._send(200, self.headers.get("Host", "").encode())
                else:
                    self._send(404, b"no such route")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            import ssl
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="test-file-server", daemon=True)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"

    def redirect(self, to: str, code: int = 302) -> str:
        """A URL that answers ``code`` with ``Location: to``."""
        return self.url(f"/redirect?code={code}&to={quote(to, safe='')}")

    def __enter__(self) -> "FileServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Each test runs in its own folder, with no proxy and no guard settings from outside."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.delenv("RUNPOD_ALLOW_PRIVATE_DOWNLOAD_URLS", raising=False)
    monkeypatch.delenv("RUNPOD_MAX_DOWNLOAD_BYTES", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def server() -> Iterator[FileServer]:
    with FileServer() as s:
        yield s


@pytest.fixture
def allow_private(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNPOD_ALLOW_PRIVATE_DOWNLOAD_URLS", "true")


def files_under(folder: str) -> List[str]:
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)


# -- the guard -----------------------------------------------------------------------
def test_loopback_is_refused_by_default(server: FileServer) -> None:
    with pytest.raises(SSRFError, match="not a public address"):
        rp_download.file(server.url("/file/a?len=3"))
    assert server.paths == []  # refused before connecting
    assert files_under("job_files") == []


@pytest.mark.parametrize("url", [
    "http://10.0.0.1/x", "http://192.168.1.1/x", "http://172.16.0.1/x",
    "http://169.254.169.254/latest/meta-data/", "http://100.64.0.1/x", "http://0.0.0.0/x",
    "http://[::1]/x", "http://[::ffff:127.0.0.1]/x", "http://[fe80::1]/x", "http://[fd00::1]/x",
    "http://224.0.0.1/x", "http://localhost/x",
])
def test_non_public_addresses_are_refused(url: str) -> None:
    with pytest.raises(SSRFError):
        rp_download.file(url)
    with pytest.raises(SSRFError):
        rp_download.download_files_from_urls("job", [url])


@pytest.mark.parametrize("url", ["ftp://example.com/a", "file:///etc/passwd", "http:///nohost",
                                 "gopher://127.0.0.1/x", "http://example.com:notaport/x"])
def test_other_schemes_and_hostless_urls_are_refused_even_when_private_is_allowed(
        url: str, allow_private: None) -> None:
    with pytest.raises(SSRFError):
        rp_download.file(url)


def test_public_addresses_pass_the_address_check() -> None:
    assert is_public_address("93.184.215.14")
    assert is_public_address("2606:4700::6810:85e5")
    assert not is_public_address("not an address")


def test_a_proxied_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # A public literal address: the check happens before any connection.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    with pytest.raises(SSRFError, match="proxy"):
        rp_download.file("http://93.184.215.14/x")


def test_no_proxy_exempts_a_url_from_the_proxy_refusal(server: FileServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with pytest.raises(SSRFError, match="not a public address"):  # the proxy check passed
        rp_download.file(server.url("/file/a?len=3"))


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "yes", " true "])
def test_the_escape_hatch_allows_private_urls(server: FileServer, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("RUNPOD_ALLOW_PRIVATE_DOWNLOAD_URLS", value)
    assert rp_download.file(server.url("/file/a.bin?len=3"))["type"] == "bin"


@pytest.mark.parametrize("value", ["false", "0", "", "on"])
def test_other_values_keep_the_guard(server: FileServer, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("RUNPOD_ALLOW_PRIVATE_DOWNLOAD_URLS", value)
    with pytest.raises(SSRFError):
        rp_download.file(server.url("/file/a.bin?len=3"))


def test_every_redirect_hop_is_checked_again(server: FileServer, monkeypatch: pytest.MonkeyPatch,
                                             allow_private: None) -> None:
    # The first hop is fetched with private URLs allowed; the server then
    # withdraws the permission before answering with a redirect, so the
    # second hop (loopback again) must be refused by its own check.
    target = server.url("/file/secret.txt?len=5")

    def withdraw(path: str) -> None:
        if path.startswith("/redirect"):
            os.environ["RUNPOD_ALLOW_PRIVATE_DOWNLOAD_URLS"] = "false"

    server.on_request = withdraw
    with pytest.raises(SSRFError, match="not a public address"):
        rp_download.file(server.redirect(target))
    assert [p for p in server.paths if p.startswith("/file")] == []


def test_a_redirect_to_another_scheme_is_refused(server: FileServer, allow_private: None) -> None:
    with pytest.raises(SSRFError, match="only http and https"):
        rp_download.file(server.redirect("file:///etc/passwd"))


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_redirects_are_followed(server: FileServer, allow_private: None, code: int) -> None:
    target = server.url("/file/a.txt?cd=b.dat&len=4")
    result = rp_download.file(server.redirect(target, code))
    assert result["original_name"] == "b.dat"
    with open(result["file_path"], "rb") as fh:
        assert fh.read() == b"xxxx"


def test_a_relative_redirect_is_resolved_and_the_name_comes_from_the_first_url(
        server: FileServer, allow_private: None) -> None:
    # Without Content-Disposition, runpod names the file after the URL it
    # was given, not after where the redirects ended.
    result = rp_download.file(server.redirect("/file/rel.txt?len=2"))
    assert result["original_name"] == "redirect" and os.path.getsize(result["file_path"]) == 2


def test_a_redirect_loop_ends_after_five_hops(server: FileServer, allow_private: None) -> None:
    with pytest.raises(SSRFError, match="more than 5 redirects"):
        rp_download.file(server.url("/loop"))
    assert server.paths == ["/loop"] * 6


def test_the_host_header_names_the_url_host_while_the_checked_address_is_dialed(
        server: FileServer, allow_private: None) -> None:
    # "localhost" may resolve to ::1 first, where nothing listens: the
    # next checked address is tried, as a plain connect would.
    with safe_get(server.url("/host", host="localhost"), timeout=5) as response:
        assert response.text == f"localhost:{server.port}"


def test_the_connection_goes_to_the_checked_address_not_to_a_new_lookup(server: FileServer) -> None:
    # Pinned to 127.0.0.1, a name that cannot resolve (.invalid) still
    # reaches the server: the socket never asks DNS again.
    with requests.Session() as session:
        session.mount("http://", _PinnedAdapter("127.0.0.1"))
        response = session.get(f"http://pinned.invalid:{server.port}/host", timeout=5)
    assert response.text == f"pinned.invalid:{server.port}"


def test_an_unreachable_address_moves_on_to_the_next_checked_one(server: FileServer) -> None:
    # The server listens on 127.0.0.1 only, so 127.0.0.2 refuses the connection.
    session, response = _get_first_reachable(["127.0.0.2", "127.0.0.1"], server.url("/host"), None, 5)
    try:
        assert response.status_code == 200
    finally:
        response.close()
        session.close()
    with pytest.raises(requests.ConnectionError):
        _get_first_reachable(["127.0.0.2"], server.url("/host"), None, 5)


def test_tls_checks_the_url_host_name_on_a_pinned_connection(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                             allow_private: None) -> None:
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", cert)
    with FileServer(tls=(cert, key)) as tls_server:
        result = rp_download.file(tls_server.url("/file/t.txt?len=6", host="localhost"))
        assert result["original_name"] == "t.txt" and os.path.getsize(result["file_path"]) == 6
        # The same server by address: the certificate does not name it.
        with pytest.raises(requests.exceptions.SSLError):
            rp_download.file(tls_server.url("/file/t.txt?len=6"))


# -- the size cap ----------------------------------------------------------------------
def test_a_declared_length_over_the_cap_is_refused_before_saving(
        server: FileServer, allow_private: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNPOD_MAX_DOWNLOAD_BYTES", "100")
    with pytest.raises(SSRFError, match="100-byte cap"):
        rp_download.file(server.url("/file/big.bin?len=101"))
    assert files_under("job_files") == []


@pytest.mark.parametrize("route", ["/nolength/5000", "/chunked/5000"])
def test_a_body_over_the_cap_without_an_honest_length_fails_and_leaves_no_file(
        server: FileServer, allow_private: None, monkeypatch: pytest.MonkeyPatch, route: str) -> None:
    monkeypatch.setenv("RUNPOD_MAX_DOWNLOAD_BYTES", "2048")
    with pytest.raises(SSRFError, match="2048-byte cap"):
        rp_download.file(server.url(route))
    assert files_under("job_files") == []
    with pytest.raises(SSRFError):
        rp_download.download_files_from_urls("job1", [server.url(route)])
    assert files_under("jobs") == []


@pytest.mark.parametrize("route", ["/nolength/2048", "/chunked/2048", "/file/a?len=2048"])
def test_a_body_of_exactly_the_cap_is_saved(server: FileServer, allow_private: None,
                                            monkeypatch: pytest.MonkeyPatch, route: str) -> None:
    monkeypatch.setenv("RUNPOD_MAX_DOWNLOAD_BYTES", "2048")
    result = rp_download.file(server.url(route))
    assert os.path.getsize(result["file_path"]) == 2048


@pytest.mark.parametrize("value", ["nope", "0", "-5", ""])
def test_a_cap_that_is_not_a_positive_number_means_the_default(
        server: FileServer, allow_private: None, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("RUNPOD_MAX_DOWNLOAD_BYTES", value)
    assert rp_download.max_download_bytes() == 5 * 1024 ** 3
    assert os.path.getsize(rp_download.file(server.url("/nolength/3000"))["file_path"]) == 3000


def test_the_environment_is_read_at_each_call(server: FileServer, monkeypatch: pytest.MonkeyPatch) -> None:
    url = server.url("/file/a.bin?len=50")
    with pytest.raises(SSRFError):
        rp_download.file(url)
    monkeypatch.setenv("RUNPOD_ALLOW_PRIVATE_DOWNLOAD_URLS", "true")
    rp_download.file(url)
    monkeypatch.setenv("RUNPOD_MAX_DOWNLOAD_BYTES", "10")
    with pytest.raises(SSRFError):
        rp_download.file(url)


# -- file() -------------------------------------------------------------------------------
def test_file_returns_runpods_shape(server: FileServer, allow_private: None, tmp_path: Any) -> None:
    server.content["pic"] = b"PNGDATA"
    result = rp_download.file(server.url("/file/pic?cd=photo.png"))
    assert list(result) == ["file_path", "type", "original_name", "extracted_path"]
    assert re.fullmatch(re.escape(str(tmp_path / "job_files")) + "/" + UUID + r"\.png", result["file_path"])
    assert result["type"] == "png" and result["original_name"] == "photo.png"
    assert result["extracted_path"] is None
    with open(result["file_path"], "rb") as fh:
        assert fh.read() == b"PNGDATA"


def test_file_names_come_from_the_url_without_content_disposition(server: FileServer, allow_private: None) -> None:
    result = rp_download.file(server.url("/file/clip.mp4?len=3"))
    assert (result["type"], result["original_name"]) == ("mp4", "clip.mp4")


def test_a_name_without_extension_keeps_runpods_trailing_dot(server: FileServer, allow_private: None) -> None:
    result = rp_download.file(server.url("/file/noext?len=3"))
    assert result["type"] == "" and result["original_name"] == "noext"
    assert re.fullmatch(UUID + r"\.", os.path.basename(result["file_path"]))


def test_a_zip_is_extracted_next_to_it(server: FileServer, allow_private: None, tmp_path: Any) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a.txt", "alpha")
        archive.writestr("sub/b.txt", "beta")
    server.content["bundle.zip"] = buffer.getvalue()
    result = rp_download.file(server.url("/file/bundle.zip"))
    assert result["type"] == "zip"
    stem = os.path.basename(result["file_path"])[:-len(".zip")]
    assert result["extracted_path"] == str(tmp_path / "job_files" / stem)
    assert files_under(result["extracted_path"]) == ["a.txt", os.path.join("sub", "b.txt")]


def test_file_raises_on_an_error_status_and_saves_nothing(server: FileServer, allow_private: None) -> None:
    with pytest.raises(requests.HTTPError):
        rp_download.file(server.url("/status/404"))
    assert files_under("job_files") == []
    assert len(server.paths) == 1  # no retries in file()


# -- download_files_from_urls() -----------------------------------------------------------
def test_download_files_returns_absolute_paths_in_order(server: FileServer, allow_private: None, tmp_path: Any) -> None:
    urls = [server.url("/file/one.txt?len=1"), None, server.url("/file/x?cd=two.json&len=2"),
            server.url("/file/three?len=3")]
    paths = rp_download.download_files_from_urls("job-7", urls)
    folder = re.escape(str(tmp_path / "jobs" / "job-7" / "downloaded_files"))
    assert paths[1] is None
    assert re.fullmatch(folder + "/" + UUID + r"\.txt", paths[0])
    assert re.fullmatch(folder + "/" + UUID + r"\.json", paths[2])
    assert re.fullmatch(folder + "/" + UUID, paths[3])
    assert [os.path.getsize(p) for p in (paths[0], paths[2], paths[3])] == [1, 2, 3]


def test_download_files_takes_one_url_as_a_string(server: FileServer, allow_private: None) -> None:
    [path] = rp_download.download_files_from_urls("j", server.url("/file/s.txt?len=1"))
    assert path.endswith(".txt")


def test_download_files_of_no_urls_is_an_empty_list(tmp_path: Any) -> None:
    assert rp_download.download_files_from_urls("j", []) == []
    assert os.path.isdir(tmp_path / "jobs" / "j" / "downloaded_files")


def test_a_failing_url_is_tried_three_times_then_gives_none(server: FileServer, allow_private: None) -> None:
    assert rp_download.download_files_from_urls("j", [server.url("/status/503")]) == [None]
    assert server.paths.count("/status/503") == 3
    assert files_under("jobs") == []


def test_a_flaky_url_succeeds_on_a_retry(server: FileServer, allow_private: None) -> None:
    [path] = rp_download.download_files_from_urls("j", [server.url("/flaky/k/2")])
    with open(path, "rb") as fh:
        assert fh.read() == b"finally"
    assert server.hits["k"] == 3


def test_many_downloads_run_in_parallel_without_mixing_files(server: FileServer, allow_private: None) -> None:
    for n in range(24):
        server.content[f"f{n}.bin"] = bytes([n]) * (1000 + n)
    urls = [server.url(f"/file/f{n}.bin") for n in range(24)]
    paths = rp_download.download_files_from_urls("par", urls)
    assert len(set(paths)) == 24
    for n, path in enumerate(paths):
        with open(path, "rb") as fh:
            assert fh.read() == bytes([n]) * (1000 + n)


# -- helpers that runpod's module exposes --------------------------------------------------
def test_disposition_params_and_chunk_sizes() -> None:
    assert rp_download.extract_disposition_params('attachment; FileName="a b.png"; x') == {"filename": "a b.png"}
    assert rp_download.calculate_chunk_size(1024 * 1024) == 1024
    assert rp_download.calculate_chunk_size(1024 * 1024 + 1) == 1024 * 1024
    assert rp_download.calculate_chunk_size(2 * 1024 ** 3) == 10 * 1024 * 1024
    assert rp_download.parse_content_length({"Content-Length": "12"}) == 12
    assert rp_download.parse_content_length({"Content-Length": "twelve"}) == 0
    assert rp_download.parse_content_length({}) == 0
