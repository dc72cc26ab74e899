"""Shared pytest fixtures.

`platform` and `make_platform` give tests a real local platform on a free
loopback port (see `slotworker.platform`); every one is closed at teardown.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable, Iterator, List

import pytest

try:  # run from a checkout without installing the package
    import slotworker  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from slotworker.platform import Platform
from support import LogRecords

# Workers run in this process (WorkerThread) read these from os.environ: no
# automatic fitness check here (one opens a connection to a public address).
# tests/test_fitness_checks.py turns them on for the workers it starts.
os.environ["RUNPOD_SKIP_AUTO_SYSTEM_CHECKS"] = "true"
os.environ["RUNPOD_SKIP_GPU_CHECK"] = "true"


@pytest.fixture
def platform() -> Iterator[Platform]:
    """A started local platform: no take cost, 0.2 s long polls."""
    p = Platform(take_cost=0.0, long_poll=0.2).start()
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def make_platform() -> Iterator[Callable[..., Platform]]:
    """A factory: `make_platform(**kwargs)` -> a started Platform(**kwargs)
    (defaults: take_cost=0.0, long_poll=0.2); all are closed at teardown."""
    made: List[Platform] = []

    def make(**kwargs: Any) -> Platform:
        kwargs.setdefault("take_cost", 0.0)
        kwargs.setdefault("long_poll", 0.2)
        p = Platform(**kwargs).start()
        made.append(p)
        return p

    try:
        yield make
    finally:
        for p in made:
            p.close()


@pytest.fixture
def records() -> Iterator[LogRecords]:
    """Captures the ``slotworker`` logger at DEBUG for the test (see support.LogRecords)."""
    logger = logging.getLogger("slotworker")
    handler = LogRecords()
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
