"""The switch interval: raised with a worker's slots while it runs, and put back after."""

from __future__ import annotations

import sys
import threading
from typing import Any, Dict

import pytest

from support import WorkerThread
from slotworker.config import ConfigError, Options
from slotworker.worker import switch_interval


@pytest.fixture
def found():
    """The interval before the test, checked to be back after it (and put back if not)."""
    before = sys.getswitchinterval()
    yield before
    after = sys.getswitchinterval()
    sys.setswitchinterval(before)
    assert after == before


def test_a_few_slots_ask_for_less_than_the_default_and_many_for_at_most_the_cap() -> None:
    assert switch_interval.for_slots(32) < 0.005  # Python's default stands
    assert switch_interval.for_slots(512) == pytest.approx(512 * switch_interval.PER_SLOT)
    assert switch_interval.for_slots(1024) == switch_interval.MOST
    assert switch_interval.for_slots(100_000) == switch_interval.MOST
    assert switch_interval.for_slots(0) == 0.0


def test_the_largest_ask_wins_and_the_last_to_give_back_restores_what_was_found(found) -> None:
    one, two = object(), object()
    switch_interval.ask(one, found / 2)  # less than found: found stands
    assert sys.getswitchinterval() == found
    switch_interval.ask(two, 0.04)
    assert sys.getswitchinterval() == pytest.approx(0.04)
    switch_interval.ask(one, 0.03)  # replaces one's first ask; two's is still larger
    assert sys.getswitchinterval() == pytest.approx(0.04)
    switch_interval.give_back(two)
    assert sys.getswitchinterval() == pytest.approx(0.03)
    switch_interval.give_back(two)  # twice: nothing more happens
    assert sys.getswitchinterval() == pytest.approx(0.03)
    switch_interval.give_back(one)
    assert sys.getswitchinterval() == found


def _seen_while_running(platform: Any, **config: Any) -> Dict[str, float]:
    """The switch interval a job's handler sees, on a worker with ``config``."""
    seen: Dict[str, float] = {}
    ran = threading.Event()

    def handler(job: Any) -> Dict[str, Any]:
        seen["interval"] = sys.getswitchinterval()
        ran.set()
        return {}

    with WorkerThread(platform, handler, **config):
        job = platform.submit({})
        assert ran.wait(30)
        assert platform.wait_final([job], 30)
    return seen


def test_a_worker_with_1024_slots_runs_with_the_cap_and_puts_the_default_back(platform, found) -> None:
    seen = _seen_while_running(platform, concurrency=1024)
    assert seen["interval"] == pytest.approx(switch_interval.MOST)


def test_a_worker_with_32_slots_leaves_the_interval_alone(platform, found) -> None:
    seen = _seen_while_running(platform, concurrency=32)
    assert seen["interval"] == found


def test_the_option_turns_it_off_or_sets_the_value(platform, found) -> None:
    assert _seen_while_running(platform, concurrency=1024, switch_interval=0)["interval"] == found
    assert _seen_while_running(platform, concurrency=4, switch_interval=0.03)["interval"] == pytest.approx(0.03)


@pytest.mark.parametrize("bad", [-1, "fast", True, float("nan")])
def test_a_bad_switch_interval_is_refused_by_name(bad) -> None:
    with pytest.raises(ConfigError, match="switch_interval"):
        Options.load({"handler": lambda job: None, "switch_interval": bad})
