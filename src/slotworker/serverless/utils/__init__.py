"""runpod's ``serverless.utils`` helpers for handler code.

``from slotworker.serverless.utils import download_files_from_urls`` and the
submodules (``rp_validator``, ``rp_download``, ``rp_upload``, ``rp_cleanup``,
``rp_debugger``, ``rp_cuda``) take the place of runpod 1.12.0's. The
package-level names are resolved on first use, so importing the package
loads nothing else (boto3 in particular stays unloaded until an upload).
"""

from __future__ import annotations

import importlib
from typing import Any, List

from ...runpod_alias import NotProvidedError

# Package-level name -> the submodule that defines it.
_LAZY = {
    "download_files_from_urls": "rp_download",
    "upload_file_to_bucket": "rp_upload",
    "upload_in_memory_object": "rp_upload",
}

#: runpod names slotworker does not provide, with why.
_NOT_PROVIDED = {
    "VolumeCache": (
        "runpod.serverless.utils.VolumeCache is not provided by slotworker: slotworker provides "
        "the worker side only (the job loop and the helpers handlers call), not runpod's "
        "network-volume model cache. Keep runpod installed and import VolumeCache from it."
    ),
}

__all__ = ["download_files_from_urls", "upload_file_to_bucket", "upload_in_memory_object"]


#: The submodules, loaded on first attribute access as well as by import
#: (runpod's ``import runpod`` loads several, so handlers reach them as attributes).
_SUBMODULES = frozenset({"rp_validator", "rp_download", "rp_upload", "rp_cleanup", "rp_debugger", "rp_cuda"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    if name in _NOT_PROVIDED:
        # An ImportError (not AttributeError) so ``from ... import VolumeCache``
        # shows this message instead of Python's generic "cannot import name".
        raise NotProvidedError(_NOT_PROVIDED[name], name=name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
