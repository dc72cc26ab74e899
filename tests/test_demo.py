"""``slotworker demo``, the README's main job, scaled down: a real worker process, a burst, SIGTERM."""

from __future__ import annotations

from slotworker.tools.demo import main


def test_demo_reports_every_job_completed_once_and_a_clean_exit(capsys):
    assert main(["--jobs", "24", "--slots", "4", "--seconds", "0.02", "--take-cost", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "completed                24" in out
    assert "lost                     0" in out
    assert "duplicate results        0" in out
    assert "worker exit code         0" in out
