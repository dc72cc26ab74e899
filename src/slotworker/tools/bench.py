"""``slotworker bench``: the burst benchmark (docs/benchmarks.md) on the local platform.

Each arm is a worker command that speaks the protocol, run as a subprocess
against a fresh local platform: one warm worker per arm per rep (start it,
one warm-up job, then the scenario's jobs), SIGTERM after. Arms alternate
(A B C A B C ...) in one run so machine drift hits all alike. The table
shows medians over reps and, with 4 or more reps, a bootstrap 95 % interval
of each arm's difference to the first.

Scenarios: ``burst`` (all jobs at once), ``small-burst`` (32 at once),
``sequential`` (one after another: latency), ``two-workers`` (two workers of
the arm share one burst; idle seconds of one while the other held more jobs
than its slots, i.e. jobs taken but not started).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..platform import Faults, Platform

BUILTIN = ("drain", "fixed", "lookahead", "pipeline")
RUNPOD_ARMS = ("runpod-async", "runpod-sync")
#: Where .ci/differential keeps its runpod==1.12.0 venv, relative to a checkout.
RUNPOD_PYTHON = os.path.join(".venv-runpod", "bin", "python")

_RUNPOD_SCRIPT = '''\
import asyncio, os, time
import runpod

SLOTS = int(os.environ.get("SLOTWORKER_DEMO_SLOTS", "32"))

{handler}

runpod.serverless.start({{"handler": handler, "concurrency_modifier": lambda current: SLOTS}})
'''
_RUNPOD_SYNC = '''\
def handler(job):
    seconds = float((job.get("input") or {}).get("seconds", 0.4))
    if seconds > 0:
        time.sleep(seconds)
    return {"slept": seconds}'''
_RUNPOD_ASYNC = '''\
async def handler(job):
    seconds = float((job.get("input") or {}).get("seconds", 0.4))
    if seconds > 0:
        await asyncio.sleep(seconds)
    return {"slept": seconds}'''


class Arm:
    """A named worker command line and the environment it adds."""

    def __init__(self, name: str, argv: List[str], env: Optional[Dict[str, str]] = None) -> None:
        self.name = name
        self.argv = argv
        self.env = env or {}


def has_runpod(python: str) -> bool:
    """True when ``python`` can import runpod."""
    try:
        return subprocess.run([python, "-c", "import runpod"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def resolve_arm(spec: str, slots: int, runpod_python: str, scripts: str) -> Arm:
    """``pipeline``/``drain``/``fixed``/``lookahead``, ``runpod-async``/``runpod-sync``, or ``name=command``."""
    if "=" in spec:
        name, command = spec.split("=", 1)
        try:
            argv = shlex.split(command)
        except ValueError as exc:  # an unclosed quote
            raise SystemExit(f"arm {spec!r}: cannot split its command line: {exc}") from exc
        if not name or not argv:
            raise SystemExit(f"arm {spec!r}: write it name=command, with a name and a command")
        return Arm(name, argv, {"SLOTWORKER_DEMO_SLOTS": str(slots)})
    if spec in BUILTIN:
        return Arm(spec, [sys.executable, "-m", "slotworker.tools.demo_handler"],
                   {"SLOTWORKER_DEMO_POLICY": spec, "SLOTWORKER_DEMO_SLOTS": str(slots)})
    if spec in RUNPOD_ARMS:
        path = os.path.join(scripts, spec.replace("-", "_") + ".py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(_RUNPOD_SCRIPT.format(handler=_RUNPOD_ASYNC if spec == "runpod-async" else _RUNPOD_SYNC))
        # Logs at WARN, as every arm does (RUNPOD_LOG_LEVEL, set for all, is what both read first).
        return Arm(spec, [runpod_python, path], {"SLOTWORKER_DEMO_SLOTS": str(slots)})
    raise SystemExit(f"unknown arm {spec!r}: use {', '.join(BUILTIN + RUNPOD_ARMS)} or name=command")


# -- measuring ---------------------------------------------------------------------
def cpu_seconds(pid: int) -> Optional[float]:
    """CPU time (user + system, every thread, exited ones too) of a live process.

    Read from the process's CPU-time clock where the system has one (Linux:
    the clock id ``clock_getcpuclockid`` would return, ``(~pid << 3) | 2``),
    which counts in nanoseconds; else from ``/proc/<pid>/stat``, which counts
    in ticks of 10 ms: a 32-slot cell of the matrix spends about ten of those,
    too few to compare cells. None where there is neither.
    """
    if sys.platform.startswith("linux"):
        try:
            return time.clock_gettime((~pid << 3) | 2)
        except (OSError, AttributeError, OverflowError):
            pass
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def quantile_time(times: Sequence[float], total: int, q: float) -> float:
    """The time by which ``q`` of ``total`` jobs were done (nan if never)."""
    need = max(1, int(total * q))
    ordered = sorted(times)
    return ordered[need - 1] if len(ordered) >= need else float("nan")


def in_progress_curve(intervals: Sequence[Tuple[float, float]]) -> Tuple[List[float], List[int]]:
    """Step curve of how many intervals are open over time."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    xs, ys, now = [0.0], [0], 0
    for t, step in edges:
        now += step
        xs.append(t)
        ys.append(now)
    return xs, ys


def idle_while_other_held(jobs: List[Any], workers: Sequence[str], slots: int) -> float:
    """Seconds one worker had nothing in progress while another held more jobs than slots."""
    edges = []
    for j in jobs:
        if j.taken_at is not None and j.finished_at is not None and j.worker_id in workers:
            edges += [(j.taken_at, j.worker_id, 1), (j.finished_at, j.worker_id, -1)]
    edges.sort(key=lambda e: (e[0], e[2]))
    held = {w: 0 for w in workers}
    idle, last = 0.0, None
    for t, worker, step in edges:
        if last is not None and any(held[w] == 0 for w in workers) and any(held[w] > slots for w in workers):
            idle += t - last
        held[worker] += step
        last = t
    return idle


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


class _ScenarioDone:
    """Counts the scenario's jobs (input ``i`` of 0 or more) as they reach a final state.

    A listener on the platform's job store: the bench waits on one Event
    rather than waking on every change to the store and copying every job
    to count the finished ones, which at 8,192 jobs held the platform's
    lock for tens of ms four times a second, and the worker under test
    waited on it.
    """

    def __init__(self, platform: Platform, total: int) -> None:
        self.count = 0  # written under the store's mutex, read without it
        self.total = total
        self.reached = threading.Event()
        platform.store.on_final(self._final)

    def _final(self, job: Any) -> None:  # called under the store's mutex
        scenario_job = isinstance(job.input, dict) and isinstance(job.input.get("i"), int) and job.input["i"] >= 0
        if scenario_job:
            self.count += 1
            if self.count >= self.total:
                self.reached.set()


class Run:
    """One arm, one rep: start the worker(s), warm up, submit, wait, measure."""

    def __init__(self, arm: Arm, rep: int, args: argparse.Namespace, log_dir: str) -> None:
        self.arm, self.rep, self.args, self.log_dir = arm, rep, args, log_dir

    def _spawn(self, platform: Platform, worker_id: str) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPOD_")}
        env.update(platform.worker_env(worker_id=worker_id))
        env.update(RUNPOD_LOG_LEVEL="WARN", RUNPOD_PING_INTERVAL="2000", PYTHONUNBUFFERED="1")
        env.update(self.arm.env)
        log = open(os.path.join(self.log_dir, f"{self.arm.name}-{self.rep}-{worker_id}.log"), "w")
        try:
            return subprocess.Popen(self.arm.argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()

    def _progress(self, done: "_ScenarioDone", ids: List[str], started: float) -> bool:
        """Wait for every job, showing a progress line; False on timeout."""
        deadline = started + self.args.timeout
        shown = -1
        while True:
            count = done.count
            if count != shown:  # a line per change, not per poll
                shown = count
                sys.stderr.write(f"\r  {self.arm.name:<14} rep {self.rep + 1}/{self.args.reps}"
                                 f"  {count:>5}/{len(ids)} done  {time.monotonic() - started:6.1f}s ")
                sys.stderr.flush()
            if count >= len(ids):
                return True
            if time.monotonic() > deadline:
                return False
            done.reached.wait(0.25)  # set when the last job is final; else a progress line 4 times a second

    def execute(self) -> Dict[str, Any]:
        """Run it; returns the raw sample (JSON-ready)."""
        args = self.args
        scenario = args.scenario
        count = 32 if scenario == "small-burst" else args.burst
        workers = ["w-a", "w-b"] if scenario == "two-workers" else ["w-a"]
        faults = None
        if args.post_latency > 0:  # every result post answered that much later
            faults = Faults(slow_rate=1.0, slow_seconds=args.post_latency, routes=frozenset({"done"}))
        with Platform(take_cost=args.take_cost, long_poll=1.0, faults=faults) as platform:
            done = _ScenarioDone(platform, args.sequential if scenario == "sequential" else count)
            procs = [self._spawn(platform, w) for w in workers]
            ids: List[str] = []
            cpu0: List[Optional[float]] = []
            try:
                warm = [platform.submit({"seconds": 0, "i": -1}) for _ in workers]
                if not platform.wait_final(warm, 60):
                    raise RuntimeError(f"arm {self.arm.name}: the worker did not answer within 60 s")
                if scenario == "two-workers":  # both must be warm, not one worker twice
                    seen = {platform.job(w).worker_id for w in warm}
                    tries = 0
                    while len(seen) < 2 and tries < 20:
                        more = [platform.submit({"seconds": 0.05, "i": -1}) for _ in range(64)]
                        platform.wait_final(more, 30)
                        seen |= {platform.job(m).worker_id for m in more}
                        tries += 1
                # A take sized while the warm job still held its slot may be in
                # flight; wait for one sized after it (it ends empty), so every arm
                # meets the burst with all its slots free, as a warm idle worker does.
                warm_done = max(platform.job(w).finished_at or 0.0 for w in warm)
                platform.wait_until(lambda p: all(any(t.worker_id == w and t.t_start > warm_done and t.given == 0
                                                      for t in p.takes()) for w in workers), 15)
                cpu0 = [cpu_seconds(p.pid) for p in procs]
                started = time.monotonic()
                if scenario == "sequential":
                    for i in range(args.sequential):
                        job = platform.submit({"seconds": args.seconds, "i": i})
                        ids.append(job)
                        platform.wait_final([job], args.timeout)
                        self._progress(done, ids, started)
                    all_done = platform.wait_final(ids, 0)
                else:
                    ids = [platform.submit({"seconds": args.seconds, "i": i}) for i in range(count)]
                    all_done = self._progress(done, ids, started)
                wall = time.monotonic() - started
                cpu1 = [cpu_seconds(p.pid) for p in procs]
            finally:
                codes = [_stop(p) for p in procs]
            jobs = [platform.job(j) for j in ids]
            counts = platform.counts()
            takes = [t for t in platform.takes() if t.given > 0 and t.t_start >= started]
        cpu = None
        if all(c is not None for c in cpu0 + cpu1):
            cpu = sum(b - a for a, b in zip(cpu0, cpu1))  # type: ignore[operator]
        done = [j.finished_at - started for j in jobs if j.finished_at is not None]
        gaps: Dict[str, List[float]] = {}
        for w in workers:
            mine = [t for t in takes if t.worker_id == w]
            gaps[w] = [b.t_start - a.t_start for a, b in zip(mine, mine[1:])]
        return {
            "arm": self.arm.name, "rep": self.rep, "scenario": scenario, "jobs": len(ids),
            "all_done": all_done, "wall": wall,
            "t99": quantile_time(done, len(ids), 0.99),
            "delays": [j.first_taken_at - j.submitted_at for j in jobs if j.first_taken_at is not None],
            "latencies": [j.finished_at - j.submitted_at for j in jobs if j.finished_at is not None],
            "gaps": [g for w in workers for g in gaps[w]],
            "lost": sum(1 for j in jobs if j.status not in ("COMPLETED", "FAILED")),
            "duplicates": counts["duplicates"],
            "idle_while_other_held": idle_while_other_held(jobs, workers, args.slots) if len(workers) > 1 else 0.0,
            "cpu_seconds": cpu, "exit_codes": codes,
            "intervals": [(j.taken_at - started, j.finished_at - started) for j in jobs
                          if j.taken_at is not None and j.finished_at is not None],
        }


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


# -- reporting ----------------------------------------------------------------------
def bootstrap_diff(a: Sequence[float], b: Sequence[float], rounds: int = 4000, seed: int = 0) -> Tuple[float, float]:
    """95 % bootstrap interval of median(b) - median(a), resampling reps."""
    rng = random.Random(seed)
    diffs = sorted(statistics.median(rng.choices(b, k=len(b))) - statistics.median(rng.choices(a, k=len(a)))
                   for _ in range(rounds))
    return diffs[int(rounds * 0.025)], diffs[int(rounds * 0.975) - 1]


METRICS = [  # (column, per-run value)
    ("t99 s", lambda s: s["t99"]),
    ("delay s", lambda s: _median(s["delays"])),
    ("latency s", lambda s: _median(s["latencies"])),
    ("take gap s", lambda s: _median(s["gaps"])),
    ("jobs/s", lambda s: s["jobs"] / s["wall"] if s["wall"] > 0 else float("nan")),
    ("cpu s/1k", lambda s: 1000 * s["cpu_seconds"] / s["jobs"] if s["cpu_seconds"] is not None else float("nan")),
]


def report(samples: List[Dict[str, Any]], arms: List[str], reps: int) -> str:
    """The table: medians over reps, interval of t99 (or latency) diff to the first arm, losses."""
    by_arm = {a: [s for s in samples if s["arm"] == a] for a in arms}
    key = "latency s" if samples and samples[0]["scenario"] == "sequential" else "t99 s"
    fn = dict(METRICS)[key]
    head = f"{'arm':<14}" + "".join(f"{m:>11}" for m, _ in METRICS) + f"  {'Δ' + key + ' vs ' + arms[0] + ' (95% CI)':>30}"
    head += f"{'lost':>6}{'dup':>5}{'idle*':>7}"
    lines = [head]
    base = [fn(s) for s in by_arm[arms[0]]]
    for arm in arms:
        runs = by_arm[arm]
        row = f"{arm:<14}" + "".join(f"{_median([f(s) for s in runs]):>11.3f}" for _, f in METRICS)
        mine = [fn(s) for s in runs]
        if arm != arms[0] and reps >= 4:
            lo, hi = bootstrap_diff(base, mine)
            row += f"  {_median(mine) - _median(base):>+8.2f} [{lo:+.2f}, {hi:+.2f}]".rjust(30)
        else:
            row += " " * 32
        row += f"{sum(s['lost'] for s in runs):>6}{sum(s['duplicates'] for s in runs):>5}"
        row += f"{_median([s['idle_while_other_held'] for s in runs]):>7.2f}"
        lines.append(row)
    lines.append("medians over reps; lost/dup summed over reps; idle*: s one worker idled while "
                 "the other held jobs it had not started (two-workers)")
    return "\n".join(lines)


def plot(samples: List[Dict[str, Any]], arms: List[str], path: str) -> bool:
    """Jobs in progress over time per arm (every rep); False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(9, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, arm in enumerate(arms):
        for s in (s for s in samples if s["arm"] == arm):
            xs, ys = in_progress_curve(s["intervals"])
            ax.step(xs, ys, where="post", color=colors[k % len(colors)], alpha=0.6,
                    label=arm if s["rep"] == 0 else None)
    ax.set_xlabel("seconds since the burst was submitted")
    ax.set_ylabel("jobs in progress (platform view)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's options (defaults: the headline burst of docs/benchmarks.md)."""
    parser = argparse.ArgumentParser(prog="slotworker bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("arms", nargs="*", default=["fixed", "drain", "pipeline"],
                        help="drain, fixed, lookahead, pipeline, runpod-async, runpod-sync, or name='command line'")
    parser.add_argument("--scenario", default="burst", choices=["burst", "sequential", "small-burst", "two-workers"])
    parser.add_argument("--take-cost", type=float, default=0.5)
    parser.add_argument("--post-latency", type=float, default=0.0,
                        help="seconds the platform takes to answer each result post (default 0: at once)")
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=0.4, help="handler seconds per job")
    parser.add_argument("--burst", type=int, default=512, help="jobs in a burst")
    parser.add_argument("--sequential", type=int, default=20, help="jobs in the sequential scenario")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=180.0, help="per run")
    parser.add_argument("--runpod-python", default=os.environ.get("SLOTWORKER_RUNPOD_PYTHON", RUNPOD_PYTHON),
                        help="an interpreter with runpod==1.12.0 installed, for the runpod-* arms "
                             "(default: $SLOTWORKER_RUNPOD_PYTHON, else %(default)s)")
    parser.add_argument("--out", default=os.path.join("bench", "out"), help="raw samples (JSON) and plots go here")
    return parser


def run(args: argparse.Namespace) -> Tuple[List[Dict[str, Any]], str]:
    """Run every arm args.reps times, alternating; returns (samples, json path)."""
    os.makedirs(args.out, exist_ok=True)
    scripts = tempfile.mkdtemp(prefix="slotworker-bench-")
    arms = []
    for spec in args.arms:
        if spec in RUNPOD_ARMS and not has_runpod(args.runpod_python):
            print(f"skipping {spec}: runpod does not import in {args.runpod_python} (make one with: "
                  f"python3 -m venv .venv-runpod && .venv-runpod/bin/pip install runpod==1.12.0)", file=sys.stderr)
            continue
        arms.append(resolve_arm(spec, args.slots, args.runpod_python, scripts))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = os.path.join(args.out, f"logs-{stamp}")
    os.makedirs(log_dir, exist_ok=True)
    samples = []
    for rep in range(args.reps):
        for arm in arms:
            samples.append(Run(arm, rep, args, log_dir).execute())
    sys.stderr.write("\n")
    path = os.path.join(args.out, f"{args.scenario}-{stamp}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"args": vars(args), "arms": [a.name for a in arms], "samples": samples}, handle)
    return samples, path


def main(argv: Optional[List[str]] = None, parser: Optional[argparse.ArgumentParser] = None) -> int:
    """Run the benchmark and print the table; 1 when any job was lost or duplicated.

    ``parser`` lets a wrapper (bench/overhead.py) change the defaults.
    """
    args = (parser or build_parser()).parse_args(argv)
    samples, path = run(args)
    arms = list(dict.fromkeys(s["arm"] for s in samples))
    print(f"scenario {args.scenario}: take cost {args.take_cost}s, {args.slots} slots, "
          f"{args.seconds}s jobs, reps {args.reps}")
    print(report(samples, arms, args.reps))
    print(f"raw samples: {path}")
    png = path[:-5] + ".png"
    if plot(samples, arms, png):
        print(f"plot: {png}")
    bad = any(s["lost"] or s["duplicates"] or not s["all_done"] for s in samples)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
