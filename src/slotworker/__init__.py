"""slotworker: a threaded, synchronous serverless worker for the RunPod protocol.

``slotworker.start({"handler": handler})`` runs a plain ``def handler(job)``
N jobs at a time. It is a drop-in for ``runpod.serverless.start``:
``import slotworker as runpod`` makes ``runpod.serverless.start``,
``runpod.serverless.progress_update`` and ``runpod.RunPodLogger`` resolve here.
"""

from __future__ import annotations

from . import serverless
from ._version import __version__
from .entry import start
from .worker.fitness import register_fitness_check
from .logs import RunPodLogger
from .worker.progress import progress_update

__all__ = ["start", "progress_update", "register_fitness_check", "RunPodLogger", "serverless",
           "__version__"]
