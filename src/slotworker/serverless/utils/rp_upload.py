"""Uploading a job's output files to S3-compatible storage, as runpod 1.12.0 does.

The bucket comes from ``BUCKET_ENDPOINT_URL``, ``BUCKET_ACCESS_KEY_ID`` and
``BUCKET_SECRET_ACCESS_KEY`` (or from a ``bucket_creds`` dict with
``endpointUrl``, ``accessId``, ``accessSecret`` and, for
:func:`bucket_upload`, ``bucketName``). The upload functions return a
presigned GET URL valid for 7 days; the bucket name defaults to the current
``MM-YY``.

Without credentials, files are saved to a local folder instead
(``simulated_uploaded/`` for :func:`upload_image`, ``local_upload/`` for
the others) and that path is returned, as in runpod, so handlers can be
tried locally.

boto3 is needed only for real uploads and is imported only then; it comes
with ``pip install 'slotworker[s3]'``. With credentials set and boto3
missing, the upload raises ``ImportError`` rather than quietly saving to
disk on a deployed worker.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple
from urllib.parse import urlparse

if TYPE_CHECKING:  # only for annotations; boto3 is loaded on demand
    from boto3.s3.transfer import TransferConfig
    from botocore.client import BaseClient

#: The module's logger (runpod's module has one by this name too).
logger = logging.getLogger("slotworker")

S3_EXTRA = "pip install 'slotworker[s3]'"
#: Lifetime of the returned presigned URLs (7 days, S3's maximum).
PRESIGNED_URL_SECONDS = 604800

__all__ = ["get_boto_client", "extract_region_from_url", "upload_image", "files", "bucket_upload",
           "upload_file_to_bucket", "upload_in_memory_object"]


def _boto3() -> Tuple[Any, Any, Any]:
    """boto3's ``session`` module, ``TransferConfig`` and botocore's ``Config``."""
    try:
        from boto3 import session
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config
    except ImportError as exc:
        raise ImportError(f"S3 uploads need boto3, which is not installed: {S3_EXTRA}") from exc
    return session, TransferConfig, Config


def _client_config() -> Any:
    _, _, Config = _boto3()
    return Config(signature_version="s3v4", retries={"max_attempts": 3, "mode": "standard"})


def _transfer_config() -> Any:
    _, TransferConfig, _ = _boto3()
    # runpod's settings; s3transfer raises the part size to S3's 5 MiB minimum.
    return TransferConfig(multipart_threshold=1024 * 25, multipart_chunksize=1024 * 25,
                          max_concurrency=os.cpu_count() or 1, use_threads=True)


def _credentials(bucket_creds: Optional[Dict[str, Any]]) -> Tuple[Optional[str], Optional[str], Optional[str]]:
    if bucket_creds:
        return bucket_creds["endpointUrl"], bucket_creds["accessId"], bucket_creds["accessSecret"]
    return (os.environ.get("BUCKET_ENDPOINT_URL"), os.environ.get("BUCKET_ACCESS_KEY_ID"),
            os.environ.get("BUCKET_SECRET_ACCESS_KEY"))


def extract_region_from_url(endpoint_url: str) -> Optional[str]:
    """The region named in an endpoint URL, or None, read as runpod reads it.

    A URL containing ``.s3.`` (``https://<bucket>.s3.<region>.amazonaws.com``,
    Backblaze alike) gives the label after it; a DigitalOcean Spaces host gives
    the URL's second dot-separated part (the region in
    ``https://<bucket>.<region>.digitaloceanspaces.com``). Anything else,
    ``https://s3.<region>.amazonaws.com`` included, gives None.
    """
    if ".s3." in endpoint_url:
        return endpoint_url.split(".s3.")[1].split(".")[0]
    if urlparse(endpoint_url).netloc.endswith(".digitaloceanspaces.com"):
        return endpoint_url.split(".")[1].split(".digitaloceanspaces.com")[0]
    return None


def get_boto_client(bucket_creds: Optional[Dict[str, Any]] = None
                    ) -> Tuple[Optional["BaseClient"], Optional["TransferConfig"]]:
    """An S3 client for the configured bucket and the transfer settings for it.

    Returns ``(None, transfer config)`` when the credentials are incomplete
    (``(None, None)`` if boto3 is not installed either): the callers then
    save locally. Raises ``ImportError`` when the credentials are complete
    but boto3 is missing.
    """
    endpoint_url, access_key_id, secret_access_key = _credentials(bucket_creds)
    if not (endpoint_url and access_key_id and secret_access_key):
        try:
            return None, _transfer_config()
        except ImportError:
            return None, None
    session, _, _ = _boto3()
    client = session.Session().client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        config=_client_config(),
        region_name=extract_region_from_url(endpoint_url),
    )
    return client, _transfer_config()


def _save_locally(file_name: str, directory: str, source_path: Optional[str] = None,
                  data: Optional[bytes] = None) -> str:
    """Save to ``<directory>/<file_name>`` in place of an upload; returns that path."""
    logger.warning("No bucket credentials (BUCKET_ENDPOINT_URL, BUCKET_ACCESS_KEY_ID, "
                "BUCKET_SECRET_ACCESS_KEY): saving %s to the local folder %r instead of uploading it.",
                file_name, directory)
    os.makedirs(directory, exist_ok=True)
    destination = f"{directory}/{file_name}"
    if source_path:
        shutil.copyfile(source_path, destination)
    elif data is not None:
        with open(destination, "wb") as out:
            out.write(data)
    else:
        raise ValueError("nothing to save: give source_path or data")
    return destination


def _presigned_get(client: Any, bucket: str, key: str) -> str:
    return client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key},
                                         ExpiresIn=PRESIGNED_URL_SECONDS)


def _default_bucket() -> str:
    return time.strftime("%m-%y")


def upload_image(job_id: str, image_location: str, result_index: int = 0,
                 results_list: Optional[List[Any]] = None, bucket_name: Optional[str] = None) -> str:
    """Upload one image as ``<job_id>/<8 random hex><ext>`` with Content-Type
    ``image/<ext>``; returns its presigned URL.

    Without credentials the image is copied to ``simulated_uploaded/`` and
    that relative path is returned. If ``results_list`` is given, the result
    is also stored at ``results_list[result_index]``.
    """
    image_name = str(uuid.uuid4())[:8]
    client, _ = get_boto_client()
    extension = os.path.splitext(image_location)[1]
    with open(image_location, "rb") as source:
        data = source.read()

    if client is None:
        result = _save_locally(f"{image_name}{extension}", "simulated_uploaded", data=data)
    else:
        bucket = bucket_name or _default_bucket()
        key = f"{job_id}/{image_name}{extension}"
        client.put_object(Bucket=bucket, Key=key, Body=data, ContentType="image/" + extension.lstrip("."))
        result = _presigned_get(client, bucket, key)

    if results_list is not None:
        results_list[result_index] = result
    return result


def files(job_id: str, file_list: List[str]) -> List[Optional[str]]:
    """Upload ``file_list`` with :func:`upload_image`, one thread per file;
    returns their URLs (or local paths) in order.

    As in runpod, a file whose upload fails leaves ``None`` in its place
    (the error is reported by the thread, on stderr).
    """
    urls: List[Optional[str]] = [None] * len(file_list)
    threads = [threading.Thread(target=upload_image, args=(job_id, path, index, urls),
                                name=f"slotworker-upload-{index}")
               for index, path in enumerate(file_list)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return urls


def bucket_upload(job_id: str, file_list: List[str], bucket_creds: Dict[str, Any]) -> List[str]:
    """Upload each file to ``bucket_creds["bucketName"]`` as ``<job_id>/<path as given>``.

    Returns ``<endpointUrl>/<bucketName>/<job_id>/<path>`` for each (plain
    URLs, not presigned). There is no local fallback: boto3 is required.
    """
    session, _, _ = _boto3()
    client = session.Session().client(
        "s3",
        endpoint_url=bucket_creds["endpointUrl"],
        aws_access_key_id=bucket_creds["accessId"],
        aws_secret_access_key=bucket_creds["accessSecret"],
        config=_client_config(),
    )
    urls = []
    for path in file_list:
        with open(path, "rb") as body:
            client.put_object(Bucket=str(bucket_creds["bucketName"]), Key=f"{job_id}/{path}", Body=body)
        urls.append(f"{bucket_creds['endpointUrl']}/{bucket_creds['bucketName']}/{job_id}/{path}")
    return urls


def upload_file_to_bucket(file_name: str, file_location: str, bucket_creds: Optional[Dict[str, Any]] = None,
                          bucket_name: Optional[str] = None, prefix: Optional[str] = None,
                          extra_args: Optional[Dict[str, Any]] = None) -> str:
    """Upload the file at ``file_location`` as ``[<prefix>/]<file_name>``;
    returns its presigned URL.

    ``extra_args`` go to boto3's ``upload_file`` (``ContentType``, ``ACL``,
    ...). Without credentials the file is copied to ``local_upload/<file_name>``
    and that relative path is returned.
    """
    client, transfer_config = get_boto_client(bucket_creds)
    bucket = bucket_name or _default_bucket()
    key = f"{prefix}/{file_name}" if prefix else file_name
    if client is None:
        return _save_locally(file_name, "local_upload", source_path=file_location)

    upload_args: Dict[str, Any] = {"Filename": file_location, "Bucket": bucket, "Key": key,
                                   "Config": transfer_config}
    if extra_args:
        upload_args["ExtraArgs"] = extra_args
    client.upload_file(**upload_args)
    return _presigned_get(client, bucket, key)


def upload_in_memory_object(file_name: str, file_data: bytes, bucket_creds: Optional[Dict[str, Any]] = None,
                            bucket_name: Optional[str] = None, prefix: Optional[str] = None) -> str:
    """Upload ``file_data`` as ``[<prefix>/]<file_name>``; returns its presigned URL.

    Without credentials the bytes are written to ``local_upload/<file_name>``
    and that relative path is returned.
    """
    client, transfer_config = get_boto_client(bucket_creds)
    bucket = bucket_name or _default_bucket()
    key = f"{prefix}/{file_name}" if prefix else file_name
    if client is None:
        return _save_locally(file_name, "local_upload", data=file_data)

    client.upload_fileobj(io.BytesIO(file_data), bucket, key, Config=transfer_config)
    return _presigned_get(client, bucket, key)
