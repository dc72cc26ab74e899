"""``rp_download`` against runpod 1.12.0's, fetching from the same loopback server.

Both sides download into their own empty folder; results are compared with
random names and the folder replaced by placeholders, and so are the files
each side left behind.
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from typing import Any, Dict, Iterator, List, Optional

import pytest

from _codec import decode, encode
from slotworker.serverless.utils import rp_download
from test_rp_download import FileServer

MODULE = "runpod.serverless.utils.rp_download"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
PROXIES = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy"]


def normalize(value: Any, folder: str) -> Any:
    if isinstance(value, str):
        return UUID.sub("<uuid>", value.replace(folder, "<cwd>"))
    if isinstance(value, list):
        return [normalize(v, folder) for v in value]
    if isinstance(value, dict):
        return {k: normalize(v, folder) for k, v in value.items()}
    return value


def left_behind(folder: str) -> List[str]:
    found = []
    for directory, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as fh:
                found.append(f"{normalize(os.path.relpath(path, folder), folder)}:{len(fh.read())}")
    return sorted(found)


class Pair:
    """Runs one call on both sides, each in a fresh folder."""

    def __init__(self, ref: Any, root: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ref, self.root, self.monkeypatch = ref, root, monkeypatch
        self.count = 0

    def run(self, func: str, *args: Any, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        self.count += 1
        theirs_dir = os.path.join(self.root, f"runpod{self.count}")
        ours_dir = os.path.join(self.root, f"slotworker{self.count}")
        os.makedirs(theirs_dir)
        os.makedirs(ours_dir)
        full_env: Dict[str, Optional[str]] = {name: None for name in PROXIES}
        full_env.update({"RUNPOD_ALLOW_PRIVATE_DOWNLOAD_URLS": None, "RUNPOD_MAX_DOWNLOAD_BYTES": None})
        full_env.update(env or {})
        answer = self.ref.call_raw(MODULE, func, *args, cwd=theirs_dir, env=full_env)
        theirs = ({"exc": answer["exc"][0]} if "exc" in answer
                  else {"value": normalize(answer["value"], theirs_dir)})

        for name, value in full_env.items():
            if value is None:
                self.monkeypatch.delenv(name, raising=False)
            else:
                self.monkeypatch.setenv(name, value)
        self.monkeypatch.chdir(ours_dir)
        try:
            ours: Dict[str, Any] = {"value": normalize(getattr(rp_download, func)(*args), ours_dir)}
        except Exception as exc:
            ours = {"exc": type(exc).__name__}
        # Through the same encoding as the reference's answer (tuples become lists).
        if "value" in ours:
            ours["value"] = decode(encode(ours["value"]))
        if "value" in theirs:
            theirs["value"] = decode(theirs["value"])
        return {"ours": ours, "theirs": theirs,
                "ours_files": left_behind(ours_dir), "theirs_files": left_behind(theirs_dir)}


@pytest.fixture
def server() -> Iterator[FileServer]:
    with FileServer() as s:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("a.txt", "alpha")
            archive.writestr("sub/b.txt", "beta")
        s.content["bundle.zip"] = buffer.getvalue()
        s.content["pic"] = b"PNGDATA"
        yield s


@pytest.fixture
def pair(runpod_ref: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Pair:
    return Pair(runpod_ref, str(tmp_path), monkeypatch)


ALLOW = {"RUNPOD_ALLOW_PRIVATE_DOWNLOAD_URLS": "true"}


@pytest.mark.parametrize("path", [
    "/file/pic?cd=photo.png", "/file/clip.mp4?len=3", "/file/noext?len=3", "/file/bundle.zip",
    "/file/x?cd=a.tar.gz&len=1", "/file/x?cd=&len=2", "/nolength/3000", "/chunked/2500",
])
def test_file_matches_runpod(server: FileServer, pair: Pair, path: str) -> None:
    result = pair.run("file", server.url(path), env=ALLOW)
    assert "value" in result["ours"], result
    assert result["ours"] == result["theirs"]
    assert result["ours_files"] == result["theirs_files"]


def test_file_follows_redirects_like_runpod(server: FileServer, pair: Pair) -> None:
    result = pair.run("file", server.redirect("/file/rel.txt?len=2"), env=ALLOW)
    assert result["ours"] == result["theirs"] and result["ours_files"] == result["theirs_files"]


def test_download_files_matches_runpod(server: FileServer, pair: Pair) -> None:
    urls = [server.url("/file/one.txt?len=1"), None, server.url("/file/x?cd=two.json&len=2"),
            server.url("/file/three?len=3"), server.url("/file/bundle.zip")]
    result = pair.run("download_files_from_urls", "job-1", urls, env=ALLOW)
    assert result["ours"] == result["theirs"]
    assert result["ours_files"] == result["theirs_files"]


def test_a_failing_url_gives_none_on_both_sides(server: FileServer, pair: Pair) -> None:
    result = pair.run("download_files_from_urls", "job-2", [server.url("/status/404")], env=ALLOW)
    assert result["ours"] == result["theirs"] == {"value": [None]}


def test_loopback_is_refused_by_both_by_default(server: FileServer, pair: Pair) -> None:
    url = server.url("/file/a.txt?len=1")
    for result in (pair.run("file", url), pair.run("download_files_from_urls", "job-3", [url])):
        assert result["ours"] == result["theirs"] == {"exc": "SSRFError"}
    assert server.paths == []


def test_an_error_status_raises_in_file_on_both_sides(server: FileServer, pair: Pair) -> None:
    result = pair.run("file", server.url("/status/500"), env=ALLOW)
    assert result["ours"] == result["theirs"] == {"exc": "HTTPError"}
    assert result["ours_files"] == result["theirs_files"] == []


@pytest.mark.parametrize("path", ["/file/big?len=5000", "/nolength/5000", "/chunked/5000"])
def test_the_cap_refuses_on_both_sides_and_only_runpod_may_leave_a_partial_file(
        server: FileServer, pair: Pair, path: str) -> None:
    result = pair.run("file", server.url(path), env=dict(ALLOW, RUNPOD_MAX_DOWNLOAD_BYTES="2048"))
    assert result["ours"] == result["theirs"] == {"exc": "SSRFError"}
    assert result["ours_files"] == []
    # runpod keeps what it wrote before the cap tripped (when there was no
    # declared length to refuse up front); slotworker deletes it.
    assert len(result["theirs_files"]) == (0 if path.startswith("/file") else 1)
