"""runpod's ``serverless.modules`` paths that handler code imports: ``rp_logger``
and ``rp_http``. The worker itself lives in ``slotworker.worker``."""

from __future__ import annotations

import importlib

#: runpod 1.12.0's other modules here: its worker's internals, which slotworker does not provide.
NOT_PROVIDED = frozenset({
    "rp_fastapi", "rp_fitness", "rp_gpu_fitness", "rp_handler", "rp_job", "rp_local", "rp_ping",
    "rp_progress", "rp_scale", "rp_system_fitness", "rp_tips", "worker_state",
})


def __getattr__(name: str) -> object:
    # `from runpod.serverless.modules import rp_progress` looks the name up
    # here after the import system swallowed the module's absence: say what
    # is missing and what slotworker provides, not Python's bare "cannot
    # import name".
    if name in ("rp_logger", "rp_http"):
        return importlib.import_module(f"{__name__}.{name}")
    from ...runpod_alias import missing_attribute

    raise missing_attribute(__name__, name, NOT_PROVIDED)
