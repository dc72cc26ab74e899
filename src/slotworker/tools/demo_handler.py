"""The handler the demo and the burst benchmark run: a sync function that sleeps.

Run as ``python -m slotworker.tools.demo_handler``; it reads its settings from the
environment so that any worker command line can be an arm:
``SLOTWORKER_DEMO_SLOTS`` (concurrency, default 32),
``SLOTWORKER_DEMO_POLICY`` (take policy, default: the worker's default),
``SLOTWORKER_DEMO_PREFETCH`` (jobs held beyond the free slots, default 0),
``SLOTWORKER_DEMO_POST_BACKLOG`` (results that may wait to be posted after
their slots were given back; default: the worker's default).
A job's ``input.seconds`` is how long it sleeps (default 0.4).
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict


def handler(job: Dict[str, Any]) -> Dict[str, Any]:
    """Sleep ``input.seconds`` like a blocking model call, then echo the input."""
    seconds = float((job.get("input") or {}).get("seconds", 0.4))
    if seconds > 0:
        time.sleep(seconds)
    return {"slept": seconds, "i": (job.get("input") or {}).get("i")}


def main() -> None:
    """Start a worker with this handler (the environment says how)."""
    import slotworker
    from slotworker.config import DEFAULT_TAKE_POLICY

    slots = int(os.environ.get("SLOTWORKER_DEMO_SLOTS", "32"))
    backlog = os.environ.get("SLOTWORKER_DEMO_POST_BACKLOG")
    slotworker.start({
        "handler": handler,
        "concurrency_modifier": lambda current: slots,
        "take_policy": os.environ.get("SLOTWORKER_DEMO_POLICY", DEFAULT_TAKE_POLICY),
        "prefetch": int(os.environ.get("SLOTWORKER_DEMO_PREFETCH", "0")),
        "post_backlog": int(backlog) if backlog else None,
    })


if __name__ == "__main__":
    main()
