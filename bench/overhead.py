"""Per-job overhead (docs/benchmarks.md): take cost 0, a handler that returns at once,
32 slots, a few thousand jobs through one worker process. Reports jobs per
second and the worker process's CPU seconds per 1,000 jobs (utime + stime
from /proc) for slotworker and, when --runpod-python has it, runpod 1.12.0 with
a sync and an async handler.

    python bench/overhead.py [--jobs 3000] [--reps 2] [arms ...]

The local platform runs in this process, so jobs/s is bounded by it too;
CPU seconds are the worker's alone. Every option of bench/burst.py applies.
"""

from __future__ import annotations

import sys
from typing import List, Optional

from slotworker.tools.bench import build_parser, main as burst_main


def main(argv: Optional[List[str]] = None) -> int:
    """The burst runner with the overhead settings as its defaults."""
    parser = build_parser()
    parser.prog = "bench/overhead.py"
    parser.add_argument("--jobs", dest="burst", type=int, help="jobs through the worker (default 3000)")
    parser.set_defaults(arms=["drain", "runpod-sync", "runpod-async"], take_cost=0.0, seconds=0.0,
                        slots=32, burst=3000, reps=2, timeout=600.0)
    return burst_main(argv, parser)


if __name__ == "__main__":
    sys.exit(main())
