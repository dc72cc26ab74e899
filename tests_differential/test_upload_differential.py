"""``rp_upload`` against runpod 1.12.0's: the same moto S3 server for both,
and the local fallback without credentials.

Presigned URLs differ in their date and signature only; those are masked,
as are the random object names.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional
from urllib.parse import parse_qsl, urlencode, urlparse

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from _codec import decode, encode
from slotworker.serverless.utils import rp_upload
from test_rp_upload import KEY_ID, SECRET, make_bucket, s3_endpoint  # noqa: F401 (a fixture)

MODULE = "runpod.serverless.utils.rp_upload"
HEX8 = re.compile(r"\b[0-9a-f]{8}(?=\.)")
BUCKET_ENV = ("BUCKET_ENDPOINT_URL", "BUCKET_ACCESS_KEY_ID", "BUCKET_SECRET_ACCESS_KEY")


def mask_url(value: Any) -> Any:
    """A presigned URL with its date, signature and random name masked."""
    if not isinstance(value, str) or "?" not in value:
        return HEX8.sub("<hex>", value) if isinstance(value, str) else value
    parsed = urlparse(value)
    query = []
    for key, item in sorted(parse_qsl(parsed.query)):
        if key == "X-Amz-Date" or key == "X-Amz-Signature":
            item = "<masked>"
        elif key == "X-Amz-Credential":
            item = re.sub(r"/\d{8}/", "/<date>/", item)
        query.append((key, item))
    return HEX8.sub("<hex>", parsed._replace(query=urlencode(query)).geturl())


def listing(folder: str) -> List[str]:
    found = []
    for directory, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as fh:
                found.append(f"{HEX8.sub('<hex>', os.path.relpath(path, folder))}:{fh.read()!r}")
    return sorted(found)


class Pair:
    """One call on both sides, each in a fresh folder with the same input files."""

    def __init__(self, ref: Any, root: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ref, self.root, self.monkeypatch = ref, root, monkeypatch
        self.count = 0

    def run(self, func: str, *args: Any, env: Optional[Dict[str, str]] = None,
            inputs: Optional[Dict[str, bytes]] = None) -> Dict[str, Any]:
        self.count += 1
        folders = {side: os.path.join(self.root, f"{side}{self.count}") for side in ("runpod", "slotworker")}
        for folder in folders.values():
            for name, data in (inputs or {}).items():
                os.makedirs(os.path.dirname(os.path.join(folder, name)), exist_ok=True)
                with open(os.path.join(folder, name), "wb") as out:
                    out.write(data)
            os.makedirs(folder, exist_ok=True)
        full_env: Dict[str, Optional[str]] = {name: None for name in BUCKET_ENV}
        full_env.update({"AWS_CONFIG_FILE": os.path.join(self.root, "none"),
                         "AWS_SHARED_CREDENTIALS_FILE": os.path.join(self.root, "none"),
                         "AWS_EC2_METADATA_DISABLED": "true"})
        full_env.update(env or {})
        answer = self.ref.call_raw(MODULE, func, *args, cwd=folders["runpod"], env=full_env)
        theirs = {"exc": answer["exc"][0]} if "exc" in answer else {"value": decode(answer["value"])}

        for name, value in full_env.items():
            if value is None:
                self.monkeypatch.delenv(name, raising=False)
            else:
                self.monkeypatch.setenv(name, value)
        self.monkeypatch.chdir(folders["slotworker"])
        try:
            ours: Dict[str, Any] = {"value": decode(encode(getattr(rp_upload, func)(*args)))}
        except Exception as exc:
            ours = {"exc": type(exc).__name__}
        result = {"ours": ours, "theirs": theirs}
        for side, folder in folders.items():
            result[f"{side}_files"] = listing(folder)
        return result


@pytest.fixture
def pair(runpod_ref: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Pair:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    return Pair(runpod_ref, str(tmp_path), monkeypatch)


def masked(result: Dict[str, Any], side: str) -> Any:
    value = result[side]
    if "value" not in value:
        return value
    inner = value["value"]
    return [mask_url(v) for v in inner] if isinstance(inner, list) else mask_url(inner)


# -- the local fallback ---------------------------------------------------------------------
@pytest.mark.parametrize("func, args", [
    ("upload_image", ("job", "in/pic.png")),
    ("upload_file_to_bucket", ("copy.png", "in/pic.png")),
    ("upload_file_to_bucket", ("copy.png", "in/pic.png", None, "bucket", "prefix")),
    ("upload_in_memory_object", ("mem.txt", b"bytes")),
    ("upload_in_memory_object", ("empty.txt", b"", None, "bucket", "prefix")),
    ("files", ("job", ["in/pic.png", "in/pic.png"])),
])
def test_the_local_fallback_matches_runpod(pair: Pair, func: str, args: Any) -> None:
    result = pair.run(func, *args, inputs={"in/pic.png": b"IMG"})
    assert masked(result, "ours") == masked(result, "theirs")
    assert result["slotworker_files"] == result["runpod_files"]


def test_get_boto_client_without_credentials_matches_runpod(pair: Pair) -> None:
    result = pair.run("get_boto_client")
    assert result["ours"]["value"][0] is None and result["theirs"]["value"][0] is None
    assert result["ours"]["value"][1] == result["theirs"]["value"][1]  # TransferConfig: class and attributes


# -- against the same S3 server -------------------------------------------------------------
@pytest.fixture
def bucket_env(s3_endpoint: str) -> Dict[str, str]:  # noqa: F811 (the imported fixture)
    import boto3
    client = boto3.session.Session().client("s3", endpoint_url=s3_endpoint, aws_access_key_id=KEY_ID,
                                            aws_secret_access_key=SECRET, region_name="us-east-1")
    make_bucket(client, "diff")
    return {"BUCKET_ENDPOINT_URL": s3_endpoint, "BUCKET_ACCESS_KEY_ID": KEY_ID, "BUCKET_SECRET_ACCESS_KEY": SECRET}


@pytest.mark.parametrize("func, args", [
    ("upload_image", ("job", "in/pic.png", 0, None, "diff")),
    ("upload_file_to_bucket", ("copy.png", "in/pic.png", None, "diff", "pre")),
    ("upload_file_to_bucket", ("copy.png", "in/pic.png", None, "diff", None, {"ContentType": "image/png"})),
    ("upload_in_memory_object", ("mem.bin", b"IMG", None, "diff", "pre")),
])
def test_uploads_give_the_same_urls_as_runpod(pair: Pair, bucket_env: Dict[str, str], func: str, args: Any) -> None:
    result = pair.run(func, *args, env=bucket_env, inputs={"in/pic.png": b"IMG"})
    assert "value" in result["ours"], result
    assert masked(result, "ours") == masked(result, "theirs")
    for side in ("ours", "theirs"):
        assert requests.get(result[side]["value"], timeout=10).content == b"IMG"
    assert result["slotworker_files"] == result["runpod_files"]


def test_bucket_upload_gives_the_same_urls_as_runpod(pair: Pair, bucket_env: Dict[str, str]) -> None:
    creds = {"endpointUrl": bucket_env["BUCKET_ENDPOINT_URL"], "accessId": KEY_ID, "accessSecret": SECRET,
             "bucketName": "diff"}
    result = pair.run("bucket_upload", "job", ["in/pic.png"], creds, inputs={"in/pic.png": b"IMG"})
    assert result["ours"] == result["theirs"]


# -- region parsing ---------------------------------------------------------------------------
LABELS = st.sampled_from(["s3", "bucket", "nyc3", "us-west-2", "digitaloceanspaces", "com", "amazonaws",
                          "backblazeb2", "", "x.s3", "s3-"])


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(scheme=st.sampled_from(["https://", "http://", ""]), labels=st.lists(LABELS, min_size=1, max_size=5),
       suffix=st.sampled_from(["", ":9000", "/path", ".digitaloceanspaces.com"]))
def test_region_parsing_matches_runpod(runpod_ref: Any, scheme: str, labels: List[str], suffix: str) -> None:
    url = scheme + ".".join(labels) + suffix
    answer = runpod_ref.call_raw(MODULE, "extract_region_from_url", url)
    try:
        ours: Dict[str, Any] = {"value": rp_upload.extract_region_from_url(url)}
    except Exception as exc:
        ours = {"exc": [type(exc).__name__, str(exc)]}
    assert ours == {k: v for k, v in answer.items() if k != "args_after"}
