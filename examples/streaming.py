"""A generator handler: each yielded value is streamed as it is made.

    python examples/streaming.py --test_input '{"input": {"words": ["one", "two", "three"]}}'
    python examples/streaming.py --rp_serve_api

With ``return_aggregate_stream`` the final result is the list of every chunk
(``/runsync`` and ``/status`` show it); ``/stream/{id}`` shows them as they come.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Iterator

import slotworker as runpod


def handler(job: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    """Yield one chunk per word, as a token streamer would."""
    for index, word in enumerate(job["input"].get("words", [])):
        time.sleep(0.05)  # the work that makes each chunk
        yield {"index": index, "word": word.upper()}


if __name__ == "__main__":
    runpod.serverless.start({"handler": handler, "return_aggregate_stream": True})
