"""``slotworker demo``: a burst of jobs through one real worker process.

Starts the local platform in this process, starts ``python -m
slotworker.demo_handler`` as the worker (the production path: HTTP, slots,
threads, signals), submits the burst at once, waits for every result, then
sends the worker SIGTERM and reports what happened.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import List, Optional

from .platform import Platform


def peak_concurrency(intervals: "List[tuple[float, float]]") -> int:
    """The most intervals that overlap at any instant."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    peak = now = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def build_parser() -> argparse.ArgumentParser:
    """The demo's options (defaults: the burst of BENCH.md, smaller)."""
    parser = argparse.ArgumentParser(prog="slotworker demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=256, help="jobs in the burst")
    parser.add_argument("--slots", type=int, default=32, help="worker concurrency")
    parser.add_argument("--seconds", type=float, default=0.4, help="how long each job sleeps")
    parser.add_argument("--take-cost", type=float, default=0.5, help="seconds each take costs the platform")
    parser.add_argument("--policy", default="drain", help="take policy of the worker")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up after this many seconds")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run the demo; exit code 0 when every job completed exactly once."""
    args = build_parser().parse_args(argv)
    with Platform(take_cost=args.take_cost, long_poll=1.0) as platform:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPOD_")}
        env.update(platform.worker_env(worker_id="demo-worker"))
        env.update(SLOTWORKER_DEMO_SLOTS=str(args.slots), SLOTWORKER_DEMO_POLICY=args.policy,
                   RUNPOD_LOG_LEVEL="WARN", RUNPOD_PING_INTERVAL="2000")
        print(f"local platform at {platform.url} (take cost {args.take_cost}s); starting the worker ...")
        worker = subprocess.Popen([sys.executable, "-m", "slotworker.demo_handler"], env=env)
        try:
            # Warm: one job through before the burst, so start-up is not timed.
            warm = platform.submit({"seconds": 0, "i": -1})
            if not platform.wait_final([warm], 30):
                print("the worker did not answer within 30 s", file=sys.stderr)
                return 1
            # The take that brought the warm job is followed by one sized while
            # that job held its slot; wait for it to end empty, so the burst
            # meets a warm idle worker with every slot free (as bench/burst.py).
            warm_done = platform.job(warm).finished_at or 0.0
            platform.wait_until(lambda p: any(t.t_start > warm_done and t.given == 0 for t in p.takes()), 15)
            print(f"submitting {args.jobs} jobs at once: {args.slots} slots, {args.seconds}s each")
            started = time.monotonic()
            ids = [platform.submit({"seconds": args.seconds, "i": i}) for i in range(args.jobs)]
            all_done = platform.wait_final(ids, args.timeout)
            wall = time.monotonic() - started
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                code = worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                code = worker.wait()
        jobs = [platform.job(j) for j in ids]
        done = sorted(j.finished_at - started for j in jobs if j.finished_at is not None)
        counts = platform.counts()
        takes = [t for t in platform.takes() if t.given > 0 and t.t_start >= started]
        gaps = [b.t_start - a.t_start for a, b in zip(takes, takes[1:])]
        delays = [j.first_taken_at - j.submitted_at for j in jobs if j.first_taken_at is not None]
        t99 = done[max(0, int(len(ids) * 0.99) - 1)] if len(done) >= int(len(ids) * 0.99) else float("nan")
        peak = peak_concurrency([(j.taken_at, j.finished_at) for j in jobs
                                 if j.taken_at is not None and j.finished_at is not None])
        completed = sum(1 for j in jobs if j.status == "COMPLETED")
        lost = len(ids) - sum(1 for j in jobs if j.status in ("COMPLETED", "FAILED"))
        print()
        print(f"  jobs submitted           {len(ids)}")
        print(f"  completed                {completed}")
        print(f"  lost                     {lost}")
        print(f"  duplicate results        {counts['duplicates']}")
        print(f"  time to 99% done         {t99:.2f} s   (all done in {wall:.2f} s)")
        print(f"  median queue delay       {statistics.median(delays):.2f} s" if delays else "")
        print(f"  takes that brought jobs  {len(takes)}")
        print(f"  median gap between takes {statistics.median(gaps):.2f} s" if gaps else "")
        print(f"  peak jobs in progress    {peak} of {args.slots} slots")
        print(f"  worker exit code         {code} (after SIGTERM)")
        ok = all_done and completed == len(ids) and counts["duplicates"] == 0 and code == 0
        print("\nOK: every job completed exactly once." if ok else "\nFAILED: see the figures above.")
        return 0 if ok else 1
