"""runpod's ``serverless`` namespace, so ``import slotworker as runpod`` just works."""

from __future__ import annotations

import importlib

from .._version import __version__
from ..entry import start
from ..worker.fitness import register_fitness_check
from ..worker.progress import progress_update
from ..config import PROTOCOL_VERSION as runpod_version

__all__ = ["start", "progress_update", "register_fitness_check", "runpod_version", "__version__"]


def __getattr__(name: str) -> object:
    # `runpod.serverless.utils.rp_upload...` works after a bare `import runpod`
    # in runpod; here the subpackages load on that first use.
    if name in ("utils", "modules"):
        return importlib.import_module(f"{__name__}.{name}")
    from ..runpod_alias import missing_attribute

    raise missing_attribute(__name__, name, frozenset({"VolumeCache", "worker"}))
