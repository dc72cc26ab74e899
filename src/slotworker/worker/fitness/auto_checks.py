"""Which automatic fitness checks a deployed worker runs, read from the environment when they run.

runpod 1.12.0 adds these checks after the user's own, in this order, under
these names (the unhealthy report carries the name of the one that failed):

1. ``_gpu_health_check``: ``nvidia-smi --list-gpus`` lists a GPU. Only on
   a GPU machine, and not when ``RUNPOD_SKIP_GPU_CHECK`` is ``true``.
2. ``_memory_check``: at least ``RUNPOD_MIN_MEMORY_GB`` GiB available (4).
3. ``_disk_check``: at least ``RUNPOD_MIN_DISK_PERCENT`` % of ``/`` free (10).
4. ``_network_check``: a TCP connection to 8.8.8.8:53 opens within
   ``RUNPOD_NETWORK_CHECK_TIMEOUT`` seconds (5).
5. ``_cuda_version_check``: CUDA is at least ``RUNPOD_MIN_CUDA_VERSION`` (11.8).
6. ``_cuda_init_check``: every CUDA device starts (with PyTorch or CuPy).
7. ``_benchmark_check``: a matrix multiply takes at most
   ``RUNPOD_GPU_BENCHMARK_TIMEOUT`` seconds (2).

``RUNPOD_SKIP_AUTO_SYSTEM_CHECKS=true`` turns off checks 2 to 7; checks 5
to 7 run only on a GPU machine. A switch counts as on when its value is
``true`` in any letter case, and for no other value. "A GPU machine" is
one where plain ``nvidia-smi`` succeeds
(:func:`~slotworker.worker.nvidia.gpu_present`).

``RUNPOD_GPU_TEST_TIMEOUT`` and ``RUNPOD_GPU_MAX_ERROR_MESSAGES`` tune
runpod's ``gpu_test`` binary, which slotworker does not ship; like runpod
without that binary, slotworker does not use them. A threshold that is not
a number fails the check that reads it, naming the variable.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, List, Mapping, Optional, Tuple

from . import gpu_checks, nvidia, system_checks

log = logging.getLogger("slotworker")

#: A check as the runner sees it: the name it is reported under, and a function of no arguments.
NamedCheck = Tuple[str, Callable[[], Any]]

SKIP_SYSTEM_CHECKS = "RUNPOD_SKIP_AUTO_SYSTEM_CHECKS"
SKIP_GPU_CHECK = "RUNPOD_SKIP_GPU_CHECK"
MIN_MEMORY_GB = ("RUNPOD_MIN_MEMORY_GB", 4.0)
MIN_DISK_PERCENT = ("RUNPOD_MIN_DISK_PERCENT", 10.0)
NETWORK_CHECK_TIMEOUT = ("RUNPOD_NETWORK_CHECK_TIMEOUT", 5.0)
GPU_BENCHMARK_TIMEOUT = ("RUNPOD_GPU_BENCHMARK_TIMEOUT", 2.0)
MIN_CUDA_VERSION = ("RUNPOD_MIN_CUDA_VERSION", "11.8")


def switched_on(env: Mapping[str, str], name: str) -> bool:
    """True when ``env[name]`` is ``true`` in any letter case (runpod honours no other spelling)."""
    return env.get(name, "").lower() == "true"


def number(env: Mapping[str, str], setting: Tuple[str, float], positive: bool = False) -> float:
    """The finite number in ``env`` under ``setting``'s name, or its default when unset or empty.

    ``ValueError`` names the variable when the value is not a finite number
    (or, with ``positive``, not above zero).
    """
    name, default = setting
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value) or (positive and value <= 0):
        raise ValueError(f"{name}={raw!r} must be a finite number{' above 0' if positive else ''}")
    return value


def text(env: Mapping[str, str], setting: Tuple[str, str]) -> str:
    """The value in ``env`` under ``setting``'s name, or its default when unset or empty."""
    name, default = setting
    return env.get(name, "").strip() or default


def automatic_checks(env: Mapping[str, str], gpu_present: Optional[Callable[[], bool]] = None) -> List[NamedCheck]:
    """The automatic checks for this machine and ``env``, in the order they run.

    ``gpu_present`` (default :func:`nvidia.gpu_present`) is asked at most
    once, and not at all when both switches turn off every check that
    depends on it. Thresholds are read when each check runs, so a bad one
    fails that check.
    """
    detect = gpu_present or nvidia.gpu_present
    known: List[bool] = []

    def has_gpu() -> bool:
        if not known:
            known.append(detect())
        return known[0]

    checks: List[NamedCheck] = []
    if switched_on(env, SKIP_GPU_CHECK):
        log.debug("automatic GPU check off (%s)", SKIP_GPU_CHECK)
    elif has_gpu():
        checks.append(("_gpu_health_check", gpu_checks.check_gpu_health))
    if switched_on(env, SKIP_SYSTEM_CHECKS):
        log.debug("automatic system checks off (%s)", SKIP_SYSTEM_CHECKS)
        return checks
    checks += [
        ("_memory_check", lambda: system_checks.check_memory(number(env, MIN_MEMORY_GB))),
        ("_disk_check", lambda: system_checks.check_disk(number(env, MIN_DISK_PERCENT))),
        ("_network_check", lambda: system_checks.check_network(number(env, NETWORK_CHECK_TIMEOUT, positive=True))),
    ]
    if has_gpu():
        checks += [
            ("_cuda_version_check", lambda: gpu_checks.check_cuda_version(text(env, MIN_CUDA_VERSION))),
            ("_cuda_init_check", gpu_checks.check_cuda_init),
            ("_benchmark_check", lambda: gpu_checks.check_gpu_benchmark(
                number(env, GPU_BENCHMARK_TIMEOUT, positive=True))),
        ]
    return checks
