"""runpod's ``serverless`` namespace, so ``import slotworker as runpod`` just works."""

from __future__ import annotations

from .._version import __version__
from ..entry import start
from ..fitness import register_fitness_check
from ..progress import progress_update
from ..settings import PROTOCOL_VERSION as runpod_version

__all__ = ["start", "progress_update", "register_fitness_check", "runpod_version", "__version__"]
