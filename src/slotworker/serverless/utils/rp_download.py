"""Downloading the files a job's input points at, as runpod 1.12.0 does.

- :func:`file` fetches one URL into ``job_files/`` (extracting a zip) and
  describes what it saved;
- :func:`download_files_from_urls` fetches several URLs in parallel into
  ``jobs/<job_id>/downloaded_files/`` and returns their paths.

Every fetch goes through the URL guard (:mod:`._url_guard`): only public
addresses, every redirect checked again, the size capped while streaming
(``RUNPOD_ALLOW_PRIVATE_DOWNLOAD_URLS``, ``RUNPOD_MAX_DOWNLOAD_BYTES``).
A refused URL raises :class:`SSRFError`. Unlike runpod, a download that
fails halfway leaves no partial file behind.
"""

from __future__ import annotations

import logging
import os
import random
import time
import uuid
import zipfile
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Mapping, Optional, TypeVar, Union
from urllib.parse import urlparse

import requests

from ..._version import __version__
from ._url_guard import SSRFError, iter_content_capped, max_download_bytes, safe_get

log = logging.getLogger("slotworker")

HEADERS = {"User-Agent": f"slotworker/{__version__} (runpod-compatible downloader)"}

#: Tries per URL in :func:`download_files_from_urls` (runpod: 3, with
#: randomized exponential waits between them).
DOWNLOAD_ATTEMPTS = 3

# safe_get, iter_content_capped and max_download_bytes are here because
# runpod's module has them too (from its URL guard); handlers can fetch
# other URLs with the same protections.
__all__ = ["file", "download_files_from_urls", "calculate_chunk_size", "parse_content_length",
           "extract_disposition_params", "SSRFError", "safe_get", "iter_content_capped",
           "max_download_bytes", "HEADERS"]

_T = TypeVar("_T")


def calculate_chunk_size(file_size: int) -> int:
    """Read size for a body of ``file_size`` bytes: 1 KiB up to 1 MiB,
    1 MiB up to 1 GiB, 10 MiB beyond."""
    if file_size <= 1024 * 1024:
        return 1024
    if file_size <= 1024 * 1024 * 1024:
        return 1024 * 1024
    return 10 * 1024 * 1024


def parse_content_length(headers: Mapping[str, Any]) -> int:
    """The Content-Length header as an int; 0 when missing or not a number.

    Only used to pick a read size: the server controls the header, so it is
    never trusted for the size cap.
    """
    try:
        return int(headers.get("Content-Length", 0))
    except (TypeError, ValueError):
        return 0


def extract_disposition_params(content_disposition: str) -> Dict[str, str]:
    """The ``key=value`` parameters of a Content-Disposition header, keys
    lower-cased, values without their quotes (``filename`` among them)."""
    params: Dict[str, str] = {}
    for part in content_disposition.split(";"):
        part = part.strip()
        if "=" in part:
            key, value = part.split("=", 1)
            params[key.strip().lower()] = value.strip().strip('"')
    return params


def _disposition_filename(response: requests.Response) -> str:
    header = response.headers.get("Content-Disposition")
    if not header:
        return ""
    return extract_disposition_params(header).get("filename", "")


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _save_body(response: requests.Response, path: str) -> None:
    """Stream the body to ``path`` under the size cap; on any failure the
    partial file is removed before the error goes on."""
    chunk_size = calculate_chunk_size(parse_content_length(response.headers))
    try:
        with open(path, "wb") as out:
            for chunk in iter_content_capped(response, chunk_size, max_download_bytes()):
                out.write(chunk)
    except BaseException:
        _remove_quietly(path)
        raise


def _with_retries(action: Callable[[], _T], attempts: int = DOWNLOAD_ATTEMPTS) -> _T:
    """``action()``, tried again after a ``requests`` error, waiting a random
    0-1 s, then 0-2 s, ... in between; the last error is raised. Refusals of
    the URL guard are not ``requests`` errors and are never retried."""
    for attempt in range(attempts):
        try:
            return action()
        except requests.RequestException:
            if attempt + 1 >= attempts:
                raise
            time.sleep(random.uniform(0, 2 ** attempt))
    raise AssertionError("unreachable")  # the loop returns or raises


def download_files_from_urls(job_id: str, urls: Union[str, List[Optional[str]]]) -> List[Optional[str]]:
    """Download ``urls`` (one URL or a list) in parallel into
    ``jobs/<job_id>/downloaded_files/`` under the working directory.

    Returns one absolute path per URL, in order: a random name plus the
    extension from Content-Disposition's filename, else from the URL's path.
    A ``None`` URL, or one that still fails after three tries (an HTTP error
    status, a broken connection), gives ``None``. A URL the guard refuses
    raises :class:`SSRFError`.
    """
    directory = os.path.abspath(os.path.join("jobs", job_id, "downloaded_files"))
    os.makedirs(directory, exist_ok=True)
    if isinstance(urls, str):
        urls = [urls]

    def fetch_once(url: str, stem: str) -> str:
        with safe_get(url, timeout=5, headers=HEADERS) as response:
            response.raise_for_status()
            extension = (os.path.splitext(_disposition_filename(response))[1]
                         or os.path.splitext(urlparse(url).path)[1])
            _save_body(response, stem + extension)
            return extension

    def fetch(url: Optional[str]) -> Optional[str]:
        if url is None:
            return None
        stem = os.path.join(directory, str(uuid.uuid4()))
        try:
            extension = _with_retries(lambda: fetch_once(url, stem))
        except requests.RequestException as exc:
            log.error("Failed to download %s: %s", url, exc)
            return None
        return os.path.abspath(stem + extension)

    with ThreadPoolExecutor() as pool:
        return list(pool.map(fetch, urls))


def file(file_url: str) -> Dict[str, Any]:
    """Download ``file_url`` into ``job_files/`` under the working directory.

    The file is saved as ``<random>.<type>``, where ``type`` is the extension
    (without its dot) of the original name: Content-Disposition's filename,
    else the last part of the URL's path. A ``zip`` is also extracted into
    ``job_files/<random>/``. Returns ``{"file_path": absolute path, "type":
    type, "original_name": original name, "extracted_path": absolute path of
    the extracted folder, or None}``.

    An HTTP error status raises ``requests.HTTPError`` (nothing is saved); a
    refused URL raises :class:`SSRFError`. There are no retries here.
    """
    os.makedirs("job_files", exist_ok=True)
    with safe_get(file_url, timeout=30, headers=HEADERS) as response:
        response.raise_for_status()
        original_name = _disposition_filename(response) or os.path.basename(urlparse(file_url).path)
        file_type = os.path.splitext(original_name)[1].replace(".", "")
        stem = str(uuid.uuid4())
        path = os.path.join("job_files", f"{stem}.{file_type}")
        _save_body(response, path)

    extracted: Optional[str] = None
    if file_type == "zip":
        folder = os.path.join("job_files", stem)
        os.makedirs(folder, exist_ok=True)
        with zipfile.ZipFile(path, "r") as archive:
            archive.extractall(folder)
        extracted = os.path.abspath(folder)

    return {
        "file_path": os.path.abspath(path),
        "type": file_type,
        "original_name": original_name,
        "extracted_path": extracted,
    }
