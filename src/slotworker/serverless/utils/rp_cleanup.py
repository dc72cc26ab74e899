"""``clean()``: remove what the download and upload helpers leave in the working directory."""

from __future__ import annotations

import os
import shutil
from typing import Iterable, Optional

#: Folders runpod's ``clean()`` removes from the working directory.
DEFAULT_FOLDERS = ("input_objects", "output_objects", "job_files")
#: The archive file it removes.
OUTPUT_ARCHIVE = "output.zip"

__all__ = ["clean"]


def clean(folder_list: Optional[Iterable[str]] = None) -> None:
    """Delete ``input_objects``, ``output_objects``, ``job_files`` and
    ``output.zip`` from the working directory, then each folder of
    ``folder_list``.

    Missing folders are skipped and errors while deleting a folder are
    ignored, as in runpod; ``jobs/`` (from ``download_files_from_urls``) and
    the local upload folders are left alone unless listed.
    """
    for folder in DEFAULT_FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)
    if os.path.exists(OUTPUT_ARCHIVE):
        os.remove(OUTPUT_ARCHIVE)
    for folder in folder_list or ():
        shutil.rmtree(folder, ignore_errors=True)
