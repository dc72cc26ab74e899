"""The runpod command-line flags, parsed out of ``sys.argv``.

Flags slotworker knows are removed from ``sys.argv``; the rest are left
for the handler's own parser, as runpod does.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional


def build_parser() -> argparse.ArgumentParser:
    """The parser for runpod 1.12.0's flags (plus ``--test_output``)."""
    parser = argparse.ArgumentParser(prog="slotworker", description="slotworker worker arguments",
                                     add_help=False, allow_abbrev=False)
    parser.add_argument("--rp_log_level", type=str, default=None,
                        help="ERROR, WARN, INFO, DEBUG or TRACE")
    parser.add_argument("--rp_debugger", action="store_true", default=None,
                        help="add timings to each job's output")
    parser.add_argument("--rp_serve_api", action="store_true", default=None,
                        help="serve the local platform's API and run the worker against it")
    parser.add_argument("--rp_api_port", type=int, default=8000, help="port of the local API")
    parser.add_argument("--rp_api_concurrency", type=int, default=1,
                        help="accepted for compatibility; the worker's concurrency_modifier decides")
    parser.add_argument("--rp_api_host", type=str, default="localhost", help="host of the local API")
    parser.add_argument("--test_input", type=str, default=None, help="one job as JSON, run locally")
    parser.add_argument("--test_output", type=str, default=None,
                        help="expected result as JSON; exit 1 when it differs")
    return parser


class ArgsError(ValueError):
    """A flag's value could not be used (e.g. --test_input that is not JSON)."""


def parse_rp_args(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    """Parse runpod's flags out of ``argv`` (``sys.argv`` by default, which is rewritten)."""
    rewrite = argv is None
    args_in = sys.argv[1:] if argv is None else argv
    args, unknown = build_parser().parse_known_args(args_in)
    if rewrite:
        sys.argv = [sys.argv[0]] + unknown
    parsed = vars(args)
    for key in ("test_input", "test_output"):
        if parsed[key] is not None:
            try:
                parsed[key] = json.loads(parsed[key])
            except ValueError as exc:
                raise ArgsError(f"--{key} is not valid JSON: {exc}") from exc
    return parsed
