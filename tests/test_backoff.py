"""The one backoff, and how the shutdown grace bounds each retry of a result."""

from __future__ import annotations

import time

import pytest

from slotworker.backoff import Backoff
from slotworker.worker.lifecycle import MIN_ATTEMPT_SECONDS, Lifecycle, State


def test_backoff_doubles_up_to_its_cap_and_resets() -> None:
    backoff = Backoff(0.5, 3.0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next() == 0.5


@pytest.mark.parametrize("first, cap", [(0, 1), (-1, 1), (2, 1)])
def test_backoff_refuses_bounds_that_make_no_sense(first: float, cap: float) -> None:
    with pytest.raises(ValueError):
        Backoff(first, cap)


def test_timeouts_are_whole_until_shutdown_then_cut_to_the_grace_left() -> None:
    lifecycle = Lifecycle()
    assert lifecycle.bound((10.0, 60.0)) == (10.0, 60.0)
    assert lifecycle.begin_shutdown(3.0)
    connect, read = lifecycle.bound((10.0, 60.0))
    assert MIN_ATTEMPT_SECONDS <= connect == read <= 3.0
    assert not lifecycle.begin_shutdown(100.0)  # once only: the first deadline stands
    assert lifecycle.bound((10.0, 60.0))[1] <= 3.0


def test_past_the_grace_a_try_still_gets_its_minimum() -> None:
    lifecycle = Lifecycle()
    lifecycle.begin_shutdown(0.0)
    assert lifecycle.past_grace()
    assert lifecycle.bound((10.0, 60.0)) == (MIN_ATTEMPT_SECONDS, MIN_ATTEMPT_SECONDS)


def test_a_pause_ends_when_shutdown_starts_and_never_outlasts_the_grace() -> None:
    lifecycle = Lifecycle()
    lifecycle.begin_shutdown(0.05)
    started = time.monotonic()
    lifecycle.pause(30.0)
    assert time.monotonic() - started < 5.0


def test_states_only_move_forward() -> None:
    lifecycle = Lifecycle()
    assert lifecycle.state is State.STARTING
    lifecycle.running()
    assert lifecycle.state is State.RUNNING
    lifecycle.begin_shutdown(1.0)
    lifecycle.running()  # a late call does not undo draining
    assert lifecycle.state is State.DRAINING
    lifecycle.stopped()
    assert lifecycle.state is State.STOPPED
