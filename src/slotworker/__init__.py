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


def __getattr__(name: str) -> object:
    # runpod's API-client names, looked up through `import slotworker as runpod`
    # or `slotworker run`, get an error that says why they are missing.
    from .runpod_alias import CLIENT_NAMES, missing_attribute

    raise missing_attribute(__name__, name, CLIENT_NAMES)
