"""The local platform: a real HTTP server on loopback that plays the RunPod
serverless platform, worker side (take, batch take, done, stream, ping, stop)
and client side (/run, /runsync, /status, /stream, /cancel, /health) on one
port. Used by `--rp_serve_api`, by the tests and by the benchmarks.

    from slotworker.platform import Platform, Faults
    with Platform(take_cost=0.5) as p:
        env = p.worker_env("w1")
        job_id = p.submit({"prompt": "hi"})
        p.wait_final([job_id], timeout=30)
"""

from __future__ import annotations

from .core import Platform
from .faults import WORKER_KINDS, Faults
from .state import Event, JobRecord

__all__ = ["Platform", "Faults", "Event", "JobRecord", "WORKER_KINDS"]
