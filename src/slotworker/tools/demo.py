"""``slotworker demo``: a burst of jobs through one real worker process.

One rep of the benchmark's burst (:class:`slotworker.tools.bench.Run`): the local
platform in this process, ``python -m slotworker.demo_handler`` as the worker
(the production path: HTTP, slots, threads, signals), the burst submitted at
once, every result waited for, then SIGTERM to the worker and a report of
what happened. The report names the burst's floor (the best a worker can do
with one take in flight, :func:`slotworker.tools.matrix.floor_seconds`) and,
for the default burst, the time runpod 1.12.0 took on it as measured in
docs/benchmarks.md (a recorded figure, not a live run).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from typing import List, Optional

from ..config import DEFAULT_TAKE_POLICY
from .bench import Run, in_progress_curve, resolve_arm
from .matrix import floor_seconds

#: The demo's default burst: (jobs, slots, job seconds, take cost). It is the
#: 32-slot, 0.4 s cell of ``slotworker bench --matrix`` (8 waves).
DEFAULT_BURST = (256, 32, 0.4, 0.5)
#: Time to 99 % done of runpod 1.12.0 (async handler) on that burst, in
#: seconds, as measured in docs/benchmarks.md ("The current grid": the cell
#: 32 slots x 0.4 s, its t99 / floor times the 4.40 s floor). Not a live run.
RUNPOD_T99_SECONDS = 11.5


def build_parser() -> argparse.ArgumentParser:
    """The demo's options (defaults: the headline burst of docs/benchmarks.md, smaller)."""
    parser = argparse.ArgumentParser(prog="slotworker demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=256, help="jobs in the burst")
    parser.add_argument("--slots", type=int, default=32, help="worker concurrency")
    parser.add_argument("--seconds", type=float, default=0.4, help="how long each job sleeps")
    parser.add_argument("--take-cost", type=float, default=0.5, help="seconds each take costs the platform")
    parser.add_argument("--policy", default=DEFAULT_TAKE_POLICY, choices=["drain", "lookahead", "pipeline", "fixed"],
                        help="take policy of the worker")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up after this many seconds")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run the demo; exit code 0 when every job completed exactly once."""
    args = build_parser().parse_args(argv)
    run_args = argparse.Namespace(scenario="burst", burst=args.jobs, slots=args.slots, seconds=args.seconds,
                                  take_cost=args.take_cost, timeout=args.timeout, reps=1, sequential=0,
                                  post_latency=0.0)
    logs = tempfile.mkdtemp(prefix="slotworker-demo-")
    print(f"local platform (take cost {args.take_cost}s), one worker: {args.slots} slots, policy {args.policy}; "
          f"submitting {args.jobs} jobs of {args.seconds}s at once ...")
    sample = Run(resolve_arm(args.policy, args.slots, "", logs), 0, run_args, logs).execute()
    print()
    lost, jobs = sample["lost"], sample["jobs"]
    code = sample["exit_codes"][0]
    peak = max(in_progress_curve(sample["intervals"])[1])
    gaps = sample["gaps"]
    print(f"  jobs submitted           {jobs}")
    print(f"  completed                {jobs - lost}")
    print(f"  lost                     {lost}")
    print(f"  duplicate results        {sample['duplicates']}")
    waves = math.ceil(args.jobs / args.slots)
    floor = floor_seconds(args.seconds, args.take_cost, waves)
    print(f"  time to 99% done         {sample['t99']:.2f} s   (all done in {sample['wall']:.2f} s; "
          f"{sample['t99'] / floor:.2f} x the floor)")
    print(f"  floor                    {floor:.2f} s   (the best with one take in flight: {waves} waves of "
          f"{args.seconds:g} s jobs, {args.take_cost:g} s a take)")
    if (args.jobs, args.slots, args.seconds, args.take_cost) == DEFAULT_BURST:
        print(f"  runpod 1.12.0            took {RUNPOD_T99_SECONDS:.1f} s on this burst in docs/benchmarks.md "
              f"({RUNPOD_T99_SECONDS / floor:.2f} x the floor)")
    if sample["delays"]:
        print(f"  median queue delay       {statistics.median(sample['delays']):.2f} s")
    print(f"  takes that brought jobs  {len(gaps) + 1}")
    if gaps:
        print(f"  median gap between takes {statistics.median(gaps):.2f} s")
    print(f"  peak jobs in progress    {peak} of {args.slots} slots")
    print(f"  worker exit code         {code} (after SIGTERM); its log: {logs}")
    ok = sample["all_done"] and lost == 0 and sample["duplicates"] == 0 and code == 0
    print("\nOK: every job completed exactly once." if ok else "\nFAILED: see the figures above.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
