"""The benchmark tools: the floor a cell is measured against, the matrix table, and a burst run end to end."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slotworker.tools.bench import build_parser, cpu_seconds, resolve_arm, run
from slotworker.tools.matrix import floor_seconds, table


@pytest.mark.parametrize("job, take, waves, floor", [
    (0.4, 0.5, 16, 8.4),   # take-bound: 16 takes, then the last batch runs
    (1.0, 0.5, 8, 8.5),    # job-bound: the first take, then 8 waves of 1 s
    (0.5, 0.5, 2, 1.5),
])
def test_the_floor_is_one_take_in_flight(job: float, take: float, waves: int, floor: float) -> None:
    assert floor_seconds(job, take, waves) == pytest.approx(floor)


def test_a_late_answer_to_result_posts_delays_only_the_last_wave() -> None:
    # Slots are given back as results are queued: the answers overlap the next waves.
    assert floor_seconds(0.4, 0.5, 16, post=0.05) == pytest.approx(8.45)
    assert floor_seconds(1.0, 0.5, 8, post=0.25) == pytest.approx(0.5 + 8 * 1.0 + 0.25)


# A child that spends CPU in a thread which then exits, prints its own CPU
# clock, and blocks on stdin (spending none) until the test is done with it.
_BURNER = """
import sys, threading, time
def burn():
    until = time.process_time() + 0.123
    while time.process_time() < until:
        pass
worker = threading.Thread(target=burn)
worker.start()
worker.join()
print(repr(time.process_time()), flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads another process's CPU clock")
def test_cpu_seconds_counts_a_finished_thread_to_the_nanosecond() -> None:
    # /proc/<pid>/stat counts in 10 ms ticks: a 32-slot cell spends about ten.
    child = subprocess.Popen([sys.executable, "-c", _BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        own = float(child.stdout.readline())
        seen = cpu_seconds(child.pid)
    finally:
        child.stdin.close()
        child.wait(30)
    assert own >= 0.123
    assert seen is not None and seen == pytest.approx(own, abs=0.002)
    assert cpu_seconds(child.pid) is None  # reaped: no such process


def test_the_matrix_table_has_a_row_per_cell_and_a_column_per_arm() -> None:
    def sample(arm: str, slots: int, job: float, t99: float) -> dict:
        return {"arm": arm, "cell_slots": slots, "cell_job": job, "floor": 4.0, "t99": t99,
                "cpu_seconds": 0.5, "jobs": 500, "lost": 0, "duplicates": 0}

    text = table([sample("drain", 32, 0.4, 8.0), sample("a-long-arm-name", 32, 0.4, 4.4),
                  sample("drain", 128, 0.4, 6.0), sample("a-long-arm-name", 128, 0.4, 4.0)])
    rows = text.splitlines()
    assert "a-long-arm-name" in rows[1] and "drain" in rows[1]
    assert rows[2].split() == ["32", "0.4", "4.00", "2.000", "1.100", "1.00", "1.00", "0", "0"]
    assert rows[3].split()[:5] == ["128", "0.4", "4.00", "1.500", "1.000"]


def test_a_burst_against_a_platform_that_answers_results_late(tmp_path) -> None:
    # --post-latency: every result post is answered that much later; a real
    # worker process, a real platform, and nothing lost on the way.
    args = build_parser().parse_args(["pipeline", "--burst", "8", "--slots", "4", "--seconds", "0",
                                      "--take-cost", "0.01", "--reps", "1", "--post-latency", "0.2",
                                      "--out", str(tmp_path)])
    samples, _ = run(args)
    (sample,) = samples
    assert sample["all_done"] and sample["lost"] == 0 and sample["duplicates"] == 0, sample
    assert len(sample["latencies"]) == 8 and min(sample["latencies"]) >= 0.2


def test_the_sequential_scenario_end_to_end(tmp_path) -> None:
    # Its jobs are counted as the platform finalises them (input i >= 0),
    # one at a time; a count that missed one would wait out the timeout.
    args = build_parser().parse_args(["pipeline", "--scenario", "sequential", "--sequential", "3",
                                      "--seconds", "0", "--take-cost", "0.01", "--reps", "1",
                                      "--out", str(tmp_path)])
    samples, _ = run(args)
    (sample,) = samples
    assert sample["all_done"] and sample["lost"] == 0 and sample["duplicates"] == 0, sample
    assert len(sample["latencies"]) == 3


@pytest.mark.parametrize("spec", ["cur=", "=python -m x", "cur='unclosed"])
def test_an_arm_without_a_name_or_a_command_is_a_clear_error(spec: str, tmp_path) -> None:
    with pytest.raises(SystemExit, match="arm"):
        resolve_arm(spec, 32, "python", str(tmp_path))
