"""Micro benchmarks of the slot counter (pytest-benchmark).

One acquire+release pair, uncontended and with 8 threads on one counter, for
every backend built (cython, cffi, python) beside two baselines: a
``threading.Semaphore`` (non-blocking acquire) and a ``threading.Lock``-
guarded int.  Not collected by the normal test run (testpaths = tests)::

    python -m pytest bench/test_bench_slots.py

A table of nanoseconds per pair (the median round divided by the pairs in
it) is printed at the end.  With 8 threads the figure is wall time per pair
across all threads, so it shows what contention costs the whole process.
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, Iterator, List, Tuple

import pytest

from slotworker import slots

CAPACITY = 1_000  # every acquire succeeds: this measures the counter, not refusals
PAIRS_UNCONTENDED = 1_000  # pairs per timed round
THREADS = 8
PAIRS_PER_THREAD = 5_000  # per thread per timed round


class LockedInt:
    """The baseline: an int under a threading.Lock, no argument checks."""

    __slots__ = ("_lock", "_capacity", "_in_use")

    def __init__(self, capacity: int) -> None:
        self._lock = threading.Lock()
        self._capacity = capacity
        self._in_use = 0

    def try_acquire(self, n: int = 1) -> int:
        with self._lock:
            grant = min(n, self._capacity - self._in_use)
            if grant <= 0:
                return 0
            self._in_use += grant
            return grant

    def release(self, n: int = 1) -> None:
        with self._lock:
            self._in_use -= n


def _pair_functions(arm: str) -> Tuple[Callable[[], object], Callable[[], object]]:
    """(acquire, release) for one slot, for an arm of the benchmark."""
    if arm == "semaphore":
        sem = threading.Semaphore(CAPACITY)
        return (lambda: sem.acquire(False)), sem.release
    if arm == "lock_int":
        counter: object = LockedInt(CAPACITY)
    else:
        try:
            counter = slots.load(arm)(CAPACITY)
        except ImportError as exc:
            pytest.skip(str(exc))
    return counter.try_acquire, counter.release  # type: ignore[attr-defined]


ARMS = ["cython", "cffi", "python", "semaphore", "lock_int"]
_results: Dict[Tuple[str, str], float] = {}


@pytest.fixture(scope="module", autouse=True)
def _print_table(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if not _results or reporter is None:
        return
    lines = ["", "slot counter: ns per acquire+release pair (median round)",
             f"{'arm':<12}{'uncontended':>14}{f'{THREADS} threads':>14}"]
    for arm in ARMS:
        row = [_results.get((arm, mode)) for mode in ("uncontended", "contended")]
        if any(v is not None for v in row):
            cells = "".join(f"{v:>14.1f}" if v is not None else f"{'-':>14}" for v in row)
            lines.append(f"{arm:<12}{cells}")
    # Teardown output is captured; write past the capture to the terminal.
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        for line in lines:
            reporter.write_line(line)


def _record(benchmark, arm: str, mode: str, pairs: int) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # --benchmark-disable
        return
    ns = stats.stats.median / pairs * 1e9
    benchmark.extra_info["ns_per_pair"] = ns
    _results[(arm, mode)] = ns


@pytest.mark.parametrize("arm", ARMS)
def test_pair_uncontended(benchmark, arm: str) -> None:
    acquire, release = _pair_functions(arm)
    rounds = range(PAIRS_UNCONTENDED)

    def run() -> None:
        for _ in rounds:
            acquire()
            release()

    benchmark.group = "uncontended"
    benchmark(run)
    _record(benchmark, arm, "uncontended", PAIRS_UNCONTENDED)


class _Crowd:
    """THREADS threads that each run PAIRS_PER_THREAD pairs per round.

    The threads live across rounds, so a round times the pairs, not thread
    start-up; two barriers start a round together and wait for its end.
    """

    def __init__(self, acquire: Callable[[], object], release: Callable[[], object]) -> None:
        self._start = threading.Barrier(THREADS + 1)
        self._end = threading.Barrier(THREADS + 1)
        self._stopping = False
        self.errors: List[BaseException] = []
        self._threads = [
            threading.Thread(target=self._work, args=(acquire, release), daemon=True)
            for _ in range(THREADS)
        ]
        for t in self._threads:
            t.start()

    def _work(self, acquire: Callable[[], object], release: Callable[[], object]) -> None:
        rounds = range(PAIRS_PER_THREAD)
        while True:
            self._start.wait()
            if self._stopping:
                return
            try:
                for _ in rounds:
                    acquire()
                    release()
            except BaseException as exc:  # reported by the main thread
                self.errors.append(exc)
            self._end.wait()

    def round(self) -> None:
        self._start.wait()
        self._end.wait()

    def close(self) -> None:
        self._stopping = True
        self._start.wait()
        for t in self._threads:
            t.join()


@pytest.mark.parametrize("arm", ARMS)
def test_pair_eight_threads(benchmark, arm: str) -> None:
    acquire, release = _pair_functions(arm)
    crowd = _Crowd(acquire, release)
    try:
        benchmark.group = f"{THREADS} threads"
        benchmark.pedantic(crowd.round, rounds=20, warmup_rounds=2)
    finally:
        crowd.close()
    assert not crowd.errors
    _record(benchmark, arm, "contended", THREADS * PAIRS_PER_THREAD)
