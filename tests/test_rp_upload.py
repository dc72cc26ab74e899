"""``serverless.utils.rp_upload`` against a real S3 server on loopback (moto's
server mode), and its local fallback without credentials.

Every presigned URL is fetched with ``requests`` to show it serves the bytes
that were uploaded.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import textwrap
import time
from typing import Any, Dict, Iterator

import pytest
import requests

from slotworker.serverless.utils import rp_upload

try:
    import boto3
    import moto.server as moto_server
except ImportError:  # pragma: no cover - PyPy only
    if platform.python_implementation() != "PyPy":
        raise  # the test extra installs both: a CPython run must not skip these
    pytest.skip("moto's S3 server needs cryptography, which has no PyPy wheel to install here; "
                "the CPython run covers uploads", allow_module_level=True)

BUCKET_ENV = ("BUCKET_ENDPOINT_URL", "BUCKET_ACCESS_KEY_ID", "BUCKET_SECRET_ACCESS_KEY")
KEY_ID, SECRET = "test-key-id", "test-secret"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on a free loopback port, for this module."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Own folder; no bucket settings, AWS profile or proxy from outside."""
    monkeypatch.chdir(tmp_path)
    for name in BUCKET_ENV:
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith("AWS_") or name.lower() in ("http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Bucket credentials in the environment; returns a client to inspect the server."""
    monkeypatch.setenv("BUCKET_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("BUCKET_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("BUCKET_SECRET_ACCESS_KEY", SECRET)
    return boto3.session.Session().client("s3", endpoint_url=s3_endpoint, aws_access_key_id=KEY_ID,
                                          aws_secret_access_key=SECRET, region_name="us-east-1")


def make_bucket(client: Any, name: str) -> str:
    try:
        client.create_bucket(Bucket=name)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    return name


def fetch(url: str) -> requests.Response:
    response = requests.get(url, timeout=10)
    assert response.status_code == 200, response.text
    return response


def write(path: str, data: bytes) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as out:
        out.write(data)
    return path


# -- with a bucket -----------------------------------------------------------------------
def test_upload_in_memory_object_returns_a_working_presigned_url(s3: Any) -> None:
    make_bucket(s3, "mem")
    url = rp_upload.upload_in_memory_object("out.bin", b"\x00payload\xff", bucket_name="mem", prefix="job-1")
    assert fetch(url).content == b"\x00payload\xff"
    assert s3.get_object(Bucket="mem", Key="job-1/out.bin")["Body"].read() == b"\x00payload\xff"
    assert "X-Amz-Expires=604800" in url


def test_upload_file_to_bucket_with_extra_args(s3: Any) -> None:
    make_bucket(s3, "files")
    write("result.json", b'{"ok": true}')
    url = rp_upload.upload_file_to_bucket("result.json", "result.json", bucket_name="files",
                                          extra_args={"ContentType": "application/json"})
    response = fetch(url)
    assert response.content == b'{"ok": true}'
    assert response.headers["Content-Type"] == "application/json"


def test_a_large_file_goes_up_in_parts_and_comes_back_whole(s3: Any) -> None:
    make_bucket(s3, "large")
    data = os.urandom(6 * 1024 * 1024 + 123)  # over S3's 5 MiB part size: two parts
    write("big.bin", data)
    url = rp_upload.upload_file_to_bucket("big.bin", "big.bin", bucket_name="large", prefix="p")
    assert fetch(url).content == data
    assert s3.head_object(Bucket="large", Key="p/big.bin")["ETag"].strip('"').endswith("-2")


def test_upload_image_names_and_types_the_object(s3: Any) -> None:
    make_bucket(s3, "images")
    write("cat.png", b"PNG")
    results = [None, None]
    url = rp_upload.upload_image("job-9", "cat.png", result_index=1, results_list=results, bucket_name="images")
    assert results == [None, url]
    key = re.search(r"/images/(job-9/[0-9a-f]{8}\.png)\?", url).group(1)
    assert s3.head_object(Bucket="images", Key=key)["ContentType"] == "image/png"
    assert fetch(url).content == b"PNG"


def test_the_default_bucket_is_the_current_month(s3: Any) -> None:
    # Both names, in case the month turns during the test.
    now = time.time()
    for when in (now, now + 120):
        make_bucket(s3, time.strftime("%m-%y", time.localtime(when)))
    url = rp_upload.upload_in_memory_object("m.txt", b"month")
    assert re.search(r"/\d\d-\d\d/m\.txt\?", url)
    assert fetch(url).content == b"month"


def test_files_uploads_in_parallel_and_keeps_the_order(s3: Any) -> None:
    now = time.time()
    for when in (now, now + 120):
        make_bucket(s3, time.strftime("%m-%y", time.localtime(when)))
    paths = [write(f"img{n}.jpg", f"image {n}".encode()) for n in range(8)]
    urls = rp_upload.files("job-p", paths)
    assert len(set(urls)) == 8
    assert [fetch(u).content for u in urls] == [f"image {n}".encode() for n in range(8)]


# The failing thread's exception is reported through threading.excepthook, as in runpod.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_failed_upload_in_files_leaves_none(s3: Any) -> None:
    make_bucket(s3, time.strftime("%m-%y"))
    write("ok.png", b"ok")
    urls = rp_upload.files("job-f", ["ok.png", "missing.png"])
    assert urls[1] is None and fetch(urls[0]).content == b"ok"


def test_bucket_upload_with_explicit_credentials(s3: Any, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in BUCKET_ENV:  # only the explicit credentials count
        monkeypatch.delenv(name)
    make_bucket(s3, "custom")
    write("out/a.txt", b"A")
    write("out/b.txt", b"B")
    creds = {"endpointUrl": s3_endpoint, "accessId": KEY_ID, "accessSecret": SECRET, "bucketName": "custom"}
    urls = rp_upload.bucket_upload("job-b", ["out/a.txt", "out/b.txt"], creds)
    assert urls == [f"{s3_endpoint}/custom/job-b/out/a.txt", f"{s3_endpoint}/custom/job-b/out/b.txt"]
    assert s3.get_object(Bucket="custom", Key="job-b/out/b.txt")["Body"].read() == b"B"


def test_bucket_creds_take_the_place_of_the_environment(s3: Any, s3_endpoint: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in BUCKET_ENV:
        monkeypatch.delenv(name)
    make_bucket(s3, "viacreds")
    creds = {"endpointUrl": s3_endpoint, "accessId": KEY_ID, "accessSecret": SECRET}
    url = rp_upload.upload_in_memory_object("c.txt", b"creds", bucket_creds=creds, bucket_name="viacreds")
    assert fetch(url).content == b"creds"


def test_get_boto_client_returns_a_client_and_runpods_transfer_settings(s3: Any) -> None:
    client, transfer = rp_upload.get_boto_client()
    assert client is not None and client.meta.service_model.service_name == "s3"
    assert (transfer.multipart_threshold, transfer.multipart_chunksize, transfer.use_threads) == (25600, 25600, True)


# Values runpod 1.12.0 gives for the same URLs, odd ones included.
@pytest.mark.parametrize("url, region", [
    ("https://bucket.s3.eu-central-1.amazonaws.com", "eu-central-1"),
    ("https://b.s3.us-west-004.backblazeb2.com", "us-west-004"),
    ("https://s3.us-west-2.amazonaws.com", None),
    ("https://bucket.nyc3.digitaloceanspaces.com", "nyc3"),
    ("https://nyc3.digitaloceanspaces.com", "digitaloceanspaces"),
    ("http://127.0.0.1:9000", None),
])
def test_region_from_the_endpoint(url: str, region: Any) -> None:
    assert rp_upload.extract_region_from_url(url) == region


# -- without credentials -----------------------------------------------------------------
def test_without_credentials_files_are_saved_locally(tmp_path: Any) -> None:
    write("in/pic.png", b"IMG")
    path = rp_upload.upload_image("job", "in/pic.png")
    assert re.fullmatch(r"simulated_uploaded/[0-9a-f]{8}\.png", path)
    assert (tmp_path / path).read_bytes() == b"IMG"

    assert rp_upload.upload_file_to_bucket("copy.png", "in/pic.png", prefix="ignored") == "local_upload/copy.png"
    assert (tmp_path / "local_upload" / "copy.png").read_bytes() == b"IMG"

    assert rp_upload.upload_in_memory_object("mem.txt", b"") == "local_upload/mem.txt"
    assert (tmp_path / "local_upload" / "mem.txt").read_bytes() == b""

    assert rp_upload.files("job", ["in/pic.png"])[0].startswith("simulated_uploaded/")


def test_incomplete_credentials_mean_the_local_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUCKET_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("BUCKET_ACCESS_KEY_ID", "only-the-id")
    client, transfer = rp_upload.get_boto_client()
    assert client is None and transfer is not None
    assert rp_upload.upload_in_memory_object("x", b"x") == "local_upload/x"


def run_without_boto3(code: str, env: Dict[str, str], cwd: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter where ``import boto3`` fails."""
    prelude = "import sys\nsys.modules['boto3'] = None\nsys.modules['botocore'] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, cwd=cwd, env=dict(os.environ, **env))


def test_without_boto3_and_with_credentials_the_upload_says_how_to_install_it(tmp_path: Any) -> None:
    proc = run_without_boto3("""
        from slotworker.serverless.utils import rp_upload
        for call in (lambda: rp_upload.upload_in_memory_object("x", b"x"),
                     lambda: rp_upload.bucket_upload("j", [], {"endpointUrl": "http://127.0.0.1:9",
                                                              "accessId": "a", "accessSecret": "s",
                                                              "bucketName": "b"})):
            try:
                call()
            except ImportError as exc:
                print(exc)
    """, {"BUCKET_ENDPOINT_URL": "http://127.0.0.1:9", "BUCKET_ACCESS_KEY_ID": "a",
          "BUCKET_SECRET_ACCESS_KEY": "s"}, str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("pip install 'slotworker[s3]'") == 2, proc.stdout
    assert not (tmp_path / "local_upload").exists()


def test_without_boto3_and_without_credentials_the_fallback_still_works(tmp_path: Any) -> None:
    proc = run_without_boto3("""
        from slotworker.serverless.utils import rp_upload
        print(rp_upload.get_boto_client())
        print(rp_upload.upload_in_memory_object("x.txt", b"local"))
    """, {}, str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["(None, None)", "local_upload/x.txt"]
    assert (tmp_path / "local_upload" / "x.txt").read_bytes() == b"local"
