"""``slotworker bench --matrix``: the burst over a grid of job lengths and concurrencies.

Each cell is a burst of ``waves`` × slots jobs of one length against a warm
worker per arm (take cost 0.5 s by default), the arms alternating within the
cell. For each cell and arm it reports time to 99 % done against the floor of
one take in flight (``take + (waves - 1) × max(job, take) + job``: the first
take, then one wave per job length or take, whichever is longer; plus one
answer to a result post for the last wave, if ``--post-latency`` is set: a
job gives its slot back as its result is queued, so the arms that hold it
until the result is in, runpod's and ``post_backlog=0``, read higher), and the
worker's CPU per job. With matplotlib (the ``[bench]`` extra) it draws a heat
map of t99 / floor per arm.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .bench import RUNPOD_ARMS, Run, build_parser, has_runpod, resolve_arm

Cell = Tuple[float, int]  # (job seconds, slots)


def floor_seconds(job: float, take: float, waves: int, post: float = 0.0) -> float:
    """Time to finish ``waves`` full waves with one take in flight at a time.

    ``post``: how long the platform takes to answer a result post (``bench
    --post-latency``). A job gives its slot back when its result is queued
    (up to the worker's ``post_backlog``), so the answers overlap the next
    waves and only the last wave's results wait for theirs.
    """
    return take + (waves - 1) * max(job, take) + job + post


def _numbers(text: str, kind: type) -> List[Any]:
    return [kind(part) for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The matrix's own options on the bench parser."""
    group = parser.add_argument_group("matrix (with --matrix)")
    group.add_argument("--matrix", action="store_true", help="run the grid of job lengths x slots")
    group.add_argument("--lengths", default="0.1,0.4,1,3", help="job seconds, comma-separated")
    group.add_argument("--slot-counts", default="32,128,512,1024", help="concurrencies, comma-separated")
    group.add_argument("--waves", type=int, default=8, help="jobs per cell = waves x slots")


def run_matrix(args: argparse.Namespace) -> Tuple[List[Dict[str, Any]], str]:
    """Every cell, every arm, ``args.reps`` times; returns (samples, json path)."""
    os.makedirs(args.out, exist_ok=True)
    scripts = tempfile.mkdtemp(prefix="slotworker-matrix-")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = os.path.join(args.out, f"logs-matrix-{stamp}")
    os.makedirs(log_dir, exist_ok=True)
    specs = []
    for spec in args.arms:
        if spec in RUNPOD_ARMS and not has_runpod(args.runpod_python):
            print(f"skipping {spec}: runpod does not import in {args.runpod_python}", file=sys.stderr)
            continue
        specs.append(spec)
    samples: List[Dict[str, Any]] = []
    for slots in _numbers(args.slot_counts, int):
        for job in _numbers(args.lengths, float):
            cell = argparse.Namespace(**vars(args))
            cell.scenario, cell.slots, cell.seconds, cell.burst = "burst", slots, job, args.waves * slots
            floor = floor_seconds(job, args.take_cost, args.waves, args.post_latency)
            cell.timeout = max(args.timeout, 10 * floor)
            for rep in range(args.reps):
                for spec in specs:
                    arm = resolve_arm(spec, slots, args.runpod_python, scripts)
                    sample = Run(arm, rep, cell, log_dir).execute()
                    sample.update(cell_job=job, cell_slots=slots, floor=floor)
                    sample.pop("intervals", None)  # large, and not needed here
                    samples.append(sample)
    sys.stderr.write("\n")
    path = os.path.join(args.out, f"matrix-{stamp}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"args": vars(args), "samples": samples}, handle)
    return samples, path


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(samples: List[Dict[str, Any]]) -> str:
    """One row per cell: t99 / floor and CPU ms per job for each arm."""
    arms = list(dict.fromkeys(s["arm"] for s in samples))
    cells = list(dict.fromkeys((s["cell_slots"], s["cell_job"]) for s in samples))
    width = max([12] + [len(a) + 2 for a in arms])
    head = f"{'':>22}" + f"{'t99 / floor':^{width * len(arms)}}" + f"{'cpu ms per job':^{width * len(arms)}}"
    lines = [head]
    head = f"{'slots':>6}{'job s':>7}{'floor s':>9}" + "".join(f"{a:>{width}}" for a in arms) * 2
    head += f"{'lost':>6}{'dup':>5}"
    lines.append(head)
    for slots, job in cells:
        mine = [s for s in samples if (s["cell_slots"], s["cell_job"]) == (slots, job)]
        row = f"{slots:>6}{job:>7.1f}{mine[0]['floor']:>9.2f}"
        for arm in arms:
            runs = [s for s in mine if s["arm"] == arm]
            row += f"{_median([s['t99'] / s['floor'] for s in runs]):>{width}.3f}"
        for arm in arms:
            runs = [s for s in mine if s["arm"] == arm and s["cpu_seconds"] is not None]
            row += f"{_median([1000 * s['cpu_seconds'] / s['jobs'] for s in runs]):>{width}.2f}"
        row += f"{sum(s['lost'] for s in mine):>6}{sum(s['duplicates'] for s in mine):>5}"
        lines.append(row)
    lines.append("t99/floor: time to 99 % done over the one-take-in-flight floor (1.00 is the floor); "
                 "medians over reps; lost/dup summed over arms and reps")
    return "\n".join(lines)


def heat_map(samples: List[Dict[str, Any]], path: str) -> bool:
    """A heat map of t99 / floor per arm; False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    arms = list(dict.fromkeys(s["arm"] for s in samples))
    slot_counts = sorted({s["cell_slots"] for s in samples})
    lengths = sorted({s["cell_job"] for s in samples})
    fig, axes = plt.subplots(1, len(arms), figsize=(4 * len(arms) + 1, 3.8), squeeze=False)
    for ax, arm in zip(axes[0], arms):
        grid = [[_median([s["t99"] / s["floor"] for s in samples
                          if s["arm"] == arm and s["cell_slots"] == n and s["cell_job"] == j])
                 for j in lengths] for n in slot_counts]
        image = ax.imshow(grid, cmap="RdYlGn_r", vmin=1.0, vmax=2.0, origin="lower", aspect="auto")
        for y, row in enumerate(grid):
            for x, value in enumerate(row):
                ax.text(x, y, f"{value:.2f}", ha="center", va="center", fontsize=9)
        ax.set_xticks(range(len(lengths)), [f"{j:g} s" for j in lengths])
        ax.set_yticks(range(len(slot_counts)), [str(n) for n in slot_counts])
        ax.set_xlabel("job length")
        ax.set_ylabel("slots")
        ax.set_title(arm)
    fig.colorbar(image, ax=axes[0].tolist(), label="t99 / floor")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def bench_parser() -> argparse.ArgumentParser:
    """``slotworker bench``'s parser: the burst's options, then the matrix's in
    their own group, so that ``slotworker bench --help`` lists both."""
    parser = build_parser()
    add_arguments(parser)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """``slotworker bench --matrix [arms] [options]``; 1 when any job was lost or duplicated."""
    parser = bench_parser()
    parser.prog = "slotworker bench --matrix"
    parser.set_defaults(arms=["drain", "pipeline"], reps=1)
    args = parser.parse_args(argv)
    samples, path = run_matrix(args)
    print(f"matrix: take cost {args.take_cost}s, {args.waves} waves per cell, reps {args.reps}")
    print(table(samples))
    print(f"raw samples: {path}")
    png = path[:-5] + ".png"
    if heat_map(samples, png):
        print(f"heat map: {png}")
    bad = any(s["lost"] or s["duplicates"] or not s["all_done"] for s in samples)
    return 1 if bad else 0

