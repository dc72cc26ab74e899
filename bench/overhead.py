"""Per-job overhead (BENCH.md): take cost 0, a handler that returns at once,
32 slots, a few thousand jobs through one worker process. Reports jobs per
second and the worker process's CPU seconds per 1,000 jobs (utime + stime
from /proc) for slotworker and, when /tmp/rpvenv has it, runpod 1.12.0 with
a sync and an async handler.

    python bench/overhead.py [--jobs 3000] [--reps 2] [arms ...]

The local platform runs in this process, so jobs/s is bounded by it too;
CPU seconds are the worker's alone.
"""

from __future__ import annotations

import sys
from typing import List, Optional

from slotworker.burst import main as burst_main


def main(argv: Optional[List[str]] = None) -> int:
    """Run the overhead arms through the burst runner with overhead settings."""
    args = list(sys.argv[1:] if argv is None else argv)
    arms = [a for a in args if not a.startswith("-") and (args.index(a) == 0 or not args[args.index(a) - 1].startswith("--"))]
    options = [a for a in args if a not in arms]
    jobs = "3000"
    if "--jobs" in options:
        at = options.index("--jobs")
        jobs = options[at + 1]
        del options[at:at + 2]
    arms = arms or ["drain", "runpod-sync", "runpod-async"]
    return burst_main(arms + ["--take-cost", "0", "--seconds", "0", "--slots", "32", "--burst", jobs,
                              "--reps", "2", "--timeout", "600"] + options)


if __name__ == "__main__":
    sys.exit(main())
