"""A handler that runs several jobs at once in one worker, each in its own thread.

    python examples/concurrency.py --test_input '{"input": {"seconds": 0.1}}'
    python examples/concurrency.py --rp_serve_api

The ``concurrency_modifier`` is runpod's: called with the current concurrency,
it returns the wanted one. Here it grows by one per call up to ``MAX_CONCURRENCY``,
as a worker would while it sees that memory allows. Try it:

    for i in $(seq 8); do curl -s -X POST localhost:8000/run -d '{"input": {"seconds": 2}}'; done
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict

import slotworker as runpod

MAX_CONCURRENCY = 8


def handler(job: Dict[str, Any]) -> Dict[str, Any]:
    """Sleep ``seconds`` (a stand-in for blocking work) and say which thread ran it."""
    seconds = float(job["input"].get("seconds", 1.0))
    time.sleep(seconds)
    return {"slept": seconds, "thread": threading.current_thread().name}


def concurrency_modifier(current: int) -> int:
    """Grow one job at a time up to ``MAX_CONCURRENCY``."""
    return min(current + 1, MAX_CONCURRENCY)


if __name__ == "__main__":
    runpod.serverless.start({"handler": handler, "concurrency_modifier": concurrency_modifier})
