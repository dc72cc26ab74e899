"""``slotworker demo``, the README's main job, scaled down: a real worker process, a burst, SIGTERM."""

from __future__ import annotations

import os

from slotworker.tools.demo import DEFAULT_BURST, RUNPOD_T99_SECONDS, build_parser, main

from support import ROOT


def test_demo_reports_every_job_completed_once_and_a_clean_exit(capsys):
    assert main(["--jobs", "24", "--slots", "4", "--seconds", "0.02", "--take-cost", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "completed                24" in out
    assert "lost                     0" in out
    assert "duplicate results        0" in out
    assert "worker exit code         0" in out
    # 6 waves of 4: 0.02 s take + 5 x 0.02 s + 0.02 s job.
    assert "floor                    0.14 s" in out
    assert "runpod 1.12.0" not in out  # measured for the default burst only


def test_the_runpod_figure_is_the_default_bursts_and_is_in_docs_benchmarks():
    args = build_parser().parse_args([])
    assert (args.jobs, args.slots, args.seconds, args.take_cost) == DEFAULT_BURST
    with open(os.path.join(ROOT, "docs", "benchmarks.md"), encoding="utf-8") as handle:
        assert f"runpod {RUNPOD_T99_SECONDS:.1f}" in handle.read()
