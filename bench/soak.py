"""Soak: many jobs through several worker processes, with faults and chaos.

Not part of CI. Runs a local platform in this process (faults on, job-timeout
requeue on) and N real worker processes. While the jobs run, workers are sent
SIGTERM at random (and, optionally, SIGKILL, a crash) and restarted. At the end
it reports jobs submitted, completed, failed, lost (never final), duplicated
(final results posted twice), late, requeued, the workers' exit codes and
each worker instance's RSS at start and end.

    python bench/soak.py --jobs 50000 --workers 4
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Dict, List, Optional

from slotworker.platform import Faults, Platform

HANDLER = """
import os
import random
import time

import slotworker


def handler(job):
    work = job["input"]["work"]
    if work:
        time.sleep(work)
    return {"n": job["input"]["n"], "pid": os.getpid()}


slotworker.start({"handler": handler,
                  "concurrency_modifier": lambda current: int(os.environ["SOAK_SLOTS"])})
"""


def rss_kb(pid: int) -> Optional[int]:
    """Resident set size of ``pid`` in kB (Linux), None if gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Instance:
    """One worker process: its id, log file, RSS samples and exit code."""

    def __init__(self, script: str, platform: Platform, worker_id: str, slots: int, grace: float,
                 log_dir: str) -> None:
        self.worker_id = worker_id
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPOD_")}
        env.update(platform.worker_env(worker_id))
        env.update({"SOAK_SLOTS": str(slots), "SLOTWORKER_SHUTDOWN_GRACE": str(grace),
                    "RUNPOD_PING_INTERVAL": "1000", "RUNPOD_LOG_LEVEL": "WARN", "PYTHONUNBUFFERED": "1"})
        self.log_path = os.path.join(log_dir, f"{worker_id}.log")
        self.log = open(self.log_path, "w", encoding="utf-8")
        self.proc = subprocess.Popen([sys.executable, script], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.started = time.monotonic()
        self.rss_start: Optional[int] = None
        self.rss_end: Optional[int] = None
        self.code: Optional[int] = None
        self.how = "running"

    def sample(self) -> None:
        rss = rss_kb(self.proc.pid)
        if rss is None:
            return
        if self.rss_start is None and time.monotonic() - self.started > 2.0:
            self.rss_start = rss
        self.rss_end = rss

    def stop(self, sig: int, timeout: float) -> int:
        self.sample()
        self.how = signal.Signals(sig).name
        self.proc.send_signal(sig)
        try:
            self.code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.how += "+KILL(timeout)"
            self.proc.kill()
            self.code = self.proc.wait()
        self.log.close()
        return self.code

    def lost_lines(self) -> List[str]:
        with open(self.log_path, encoding="utf-8", errors="replace") as handle:
            return [line.rstrip() for line in handle if "LOST" in line]


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=50000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--slots", type=int, default=16, help="concurrency of each worker")
    ap.add_argument("--chaos-every", type=float, default=4.0, help="mean seconds between SIGTERMs")
    ap.add_argument("--kill-rate", type=float, default=0.1, help="share of chaos events that are SIGKILL")
    ap.add_argument("--stable", type=int, default=1, help="workers never signalled (for the RSS trend)")
    ap.add_argument("--grace", type=float, default=15.0)
    ap.add_argument("--job-timeout", type=float, default=10.0, help="platform requeue after silence")
    ap.add_argument("--max-seconds", type=float, default=1800.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-faults", action="store_true")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)

    faults = None if args.no_faults else Faults(
        error_rate=0.02, throttle_rate=0.002, garbage_rate=0.01, drop_rate=0.01,
        drop_after_assign_rate=0.005, slow_rate=0.01, slow_seconds=0.5, seed=args.seed)
    tmp = tempfile.mkdtemp(prefix="slotworker-soak-")
    script = os.path.join(tmp, "soak_handler.py")
    with open(script, "w", encoding="utf-8") as handle:
        handle.write(textwrap.dedent(HANDLER))

    platform = Platform(take_cost=0.0, long_poll=1.0, job_timeout=args.job_timeout, faults=faults).start()
    t0 = time.monotonic()
    ids = [platform.submit({"n": i, "work": rng.choice([0.0, 0.0, 0.001, 0.005, 0.02])})
           for i in range(args.jobs)]
    generation = [0] * args.workers
    instances: List[Instance] = []
    current: List[Instance] = []

    def spawn(slot: int) -> Instance:
        generation[slot] += 1
        inst = Instance(script, platform, f"w{slot}-g{generation[slot]}", args.slots, args.grace, tmp)
        instances.append(inst)
        return inst

    for slot in range(args.workers):
        current.append(spawn(slot))
    print(f"soak: {args.jobs} jobs, {args.workers} workers x {args.slots} slots, faults "
          f"{'off' if faults is None else 'on'}, logs in {tmp}", flush=True)

    signals = {"SIGTERM": 0, "SIGKILL": 0}
    next_chaos = time.monotonic() + rng.expovariate(1.0 / args.chaos_every)
    last_report = time.monotonic()
    finished = False
    while time.monotonic() - t0 < args.max_seconds:
        counts = platform.counts()
        done = counts["completed"] + counts["failed"]
        if done >= args.jobs:
            finished = True
            break
        for inst in current:
            inst.sample()
        now = time.monotonic()
        if now >= next_chaos and args.workers > args.stable:
            slot = rng.randrange(args.stable, args.workers)
            sig = signal.SIGKILL if rng.random() < args.kill_rate else signal.SIGTERM
            signals[signal.Signals(sig).name] += 1
            current[slot].stop(sig, args.grace + 15)
            current[slot] = spawn(slot)
            next_chaos = time.monotonic() + rng.expovariate(1.0 / args.chaos_every)
        if now - last_report >= 10:
            last_report = now
            print(f"  {now - t0:6.0f}s  done {done}/{args.jobs}  in progress {counts['in_progress']}  "
                  f"requeued {counts['requeued']}  duplicates {counts['duplicates']}", flush=True)
        platform.wait_until(lambda p: False, 0.2)
    elapsed = time.monotonic() - t0
    for inst in current:
        inst.stop(signal.SIGTERM, args.grace + 15)

    counts = platform.counts()
    final = {"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}
    never_final = [j for j in ids if platform.status(j)["status"] not in final]
    lost_lines = [line for inst in instances for line in inst.lost_lines()]
    print()
    print(f"finished: {finished} in {elapsed:.0f}s ({args.jobs / elapsed:.0f} jobs/s)")
    print(f"jobs submitted {counts['submitted']}  completed {counts['completed']}  failed {counts['failed']}  "
          f"lost (never final) {len(never_final)}  duplicated {counts['duplicates']}  late {counts['late']}  "
          f"requeued {counts['requeued']}  unknown {counts['unknown']}")
    faulted: Dict[str, int] = {}
    for e in platform.events:
        if e.fault:
            faulted[e.fault] = faulted.get(e.fault, 0) + 1
    print(f"faults injected: {faulted}")
    print(f"chaos: {signals['SIGTERM']} SIGTERM, {signals['SIGKILL']} SIGKILL; "
          f"{len(instances)} worker instances")
    print(f"worker LOST log lines: {len(lost_lines)}")
    for line in lost_lines[:10]:
        print("   ", line[:200])
    print("instance        how                 exit  jobs   RSS start kB  RSS end kB")
    per_worker: Dict[str, int] = {}
    for job in platform.jobs():
        if job.worker_id:
            per_worker[job.worker_id] = per_worker.get(job.worker_id, 0) + 1
    for inst in instances:
        print(f"{inst.worker_id:<15} {inst.how:<19} {str(inst.code):>4}  {per_worker.get(inst.worker_id, 0):>5}"
              f"  {str(inst.rss_start):>12}  {str(inst.rss_end):>10}")
    platform.close()
    ok = finished and not never_final and counts["duplicates"] == 0
    print("OK" if ok else "PROBLEMS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
