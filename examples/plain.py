"""A plain handler: one job in, one result out.

    python examples/plain.py --test_input '{"input": {"name": "world"}}'
    python examples/plain.py --rp_serve_api

A runpod handler moves over with one changed line: ``import slotworker as runpod``.
"""

from __future__ import annotations

from typing import Any, Dict

import slotworker as runpod


def handler(job: Dict[str, Any]) -> Dict[str, Any]:
    """Greet ``job["input"]["name"]``."""
    name = job["input"].get("name", "nobody")
    return {"greeting": f"hello, {name}"}


if __name__ == "__main__":
    runpod.serverless.start({"handler": handler})
