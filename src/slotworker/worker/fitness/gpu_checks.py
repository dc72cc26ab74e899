"""The automatic checks of a GPU worker: GPU health, CUDA version, CUDA start-up, compute speed.

Each function raises ``RuntimeError`` when the machine fails it and returns
otherwise; :mod:`~slotworker.worker.auto_checks` decides which of them run.
They measure what runpod 1.12.0's checks measure, with two limits that
runpod shares when its optional pieces are missing:

- runpod's GPU health check runs a compiled ``gpu_test`` binary that
  allocates memory on every GPU. slotworker does not ship that binary, so
  it does what runpod does without it: it asks ``nvidia-smi --list-gpus``
  and passes when at least one GPU is listed (GPU memory is not touched).
- The CUDA start-up and compute checks use PyTorch, else CuPy, when the
  worker's image has one of them installed (slotworker depends on
  neither); with neither they pass without testing anything.
"""

from __future__ import annotations

import importlib
import logging
import time
from types import ModuleType
from typing import Optional, Tuple

from . import nvidia

log = logging.getLogger("slotworker")

#: Side of the square matrices the compute check multiplies.
BENCHMARK_SIZE = 1024
#: Characters of a failing tool's output kept in the failure message.
_OUTPUT_EXCERPT = 200


def _import_optional(name: str) -> Optional[ModuleType]:
    """``name`` imported, or None when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def check_gpu_health() -> None:
    """At least one GPU is listed by ``nvidia-smi --list-gpus`` (runpod's fallback when ``gpu_test`` is missing)."""
    run = nvidia.run_tool(["nvidia-smi", "--list-gpus"], nvidia.LIST_TIMEOUT)
    reason: Optional[str] = None
    if run.problem is not None:
        reason = run.problem
    elif run.returncode != 0:
        said = (run.stderr.strip() or run.stdout.strip())[:_OUTPUT_EXCERPT]
        reason = f"nvidia-smi --list-gpus failed (exit {run.returncode}): {said}"
    else:
        gpus = nvidia.listed_gpus(run.stdout)
        if not gpus:
            reason = "nvidia-smi --list-gpus listed no GPU"
    if reason is not None:
        raise RuntimeError(f"GPU health check failed (no gpu_test binary; nvidia-smi check failed): {reason}")
    log.info("GPU check passed: %d GPU(s) listed by nvidia-smi (GPU memory not tested: no gpu_test binary)",
             len(nvidia.listed_gpus(run.stdout)))


def _dotted(version: Tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def check_cuda_version(minimum: str) -> None:
    """The installed CUDA version (``nvcc``, else ``nvidia-smi``) is at least ``minimum``.

    Versions compare as ``(major, minor)``, so 12.10 is newer than 12.9.
    When no tool tells a version the check passes with a warning; when a
    tool names one that cannot be read (``N/A``) it counts as 0.0 and
    fails. A ``minimum`` without a ``MAJOR.MINOR`` in it sets no minimum.
    All three as in runpod.
    """
    found = nvidia.installed_cuda_version()
    if found is None:
        log.warning("CUDA version check skipped: neither nvcc nor nvidia-smi tells the CUDA version")
        return
    source, text = found
    need = nvidia.parse_version(minimum)
    if need is None:
        log.warning("minimum CUDA version %r holds no MAJOR.MINOR version: no minimum applies", minimum)
        need = (0, 0)
    parsed = nvidia.parse_version(text)
    have = parsed or (0, 0)
    if have < need:
        seen = _dotted(have) if parsed is not None else "an unreadable version (counted as 0.0)"
        raise RuntimeError(f"CUDA version too old: {seen} found ({source} says {text!r}), "
                           f"{_dotted(need)} required")
    log.info("CUDA version check passed: %s from %s (minimum %s)", _dotted(have), source, _dotted(need))


def check_cuda_init() -> None:
    """Every CUDA device starts, reports memory, and holds a small allocation (PyTorch, else CuPy)."""
    try:
        torch = _import_optional("torch")
        if torch is not None:
            _init_with_torch(torch)
            return
    except Exception as exc:
        raise RuntimeError(f"CUDA initialization failed: {exc}") from exc
    try:
        cupy = _import_optional("cupy")
        if cupy is not None:
            _init_with_cupy(cupy)
            return
    except Exception as exc:
        raise RuntimeError(f"CUDA initialization check failed: {exc}") from exc
    log.debug("CUDA initialization not tested: neither PyTorch nor CuPy is installed")


def _init_with_torch(torch: ModuleType) -> None:
    if not torch.cuda.is_available():
        log.debug("CUDA initialization not tested: PyTorch sees no CUDA")
        return
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.synchronize()
    count = torch.cuda.device_count()
    if count == 0:
        raise RuntimeError("PyTorch says CUDA is available but counts no device")
    for index in range(count):
        try:
            if torch.cuda.get_device_properties(index).total_memory == 0:
                raise RuntimeError(f"GPU {index} reports no memory")
            torch.zeros(1024, device=f"cuda:{index}")
            torch.cuda.synchronize()
        except Exception as exc:
            raise RuntimeError(f"GPU {index} did not initialize: {exc}") from exc
    log.info("CUDA initialization passed: %d device(s) (PyTorch)", count)


def _init_with_cupy(cupy: ModuleType) -> None:
    cupy.cuda.Device().synchronize()
    count = cupy.cuda.runtime.getDeviceCount()
    if count == 0:
        raise RuntimeError("CuPy counts no CUDA device")
    for index in range(count):
        try:
            cupy.cuda.Device(index).use()
            cupy.zeros(1024)
            cupy.cuda.Device().synchronize()
        except Exception as exc:
            raise RuntimeError(f"GPU {index} did not initialize with CuPy: {exc}") from exc
    log.info("CUDA initialization passed: %d device(s) (CuPy)", count)


def check_gpu_benchmark(limit_seconds: float) -> None:
    """Two random 1024x1024 matrices multiply on the GPU within ``limit_seconds`` (PyTorch, else CuPy).

    A ``RuntimeError`` on the way (PyTorch reports CUDA faults so) fails
    the check; any other error only skips that library, as in runpod.
    """
    for name in ("torch", "cupy"):
        try:
            module = _import_optional(name)
            if module is None:
                continue
            elapsed = _matmul_torch(module) if name == "torch" else _matmul_cupy(module)
            if elapsed is None:
                return  # PyTorch sees no CUDA: nothing to measure
            if elapsed > limit_seconds:
                raise RuntimeError(f"GPU compute too slow: a {BENCHMARK_SIZE}x{BENCHMARK_SIZE} matrix multiply "
                                   f"took {elapsed * 1000:.0f}ms (limit {limit_seconds * 1000:.0f}ms)")
            log.info("GPU compute check passed: matrix multiply in %.0fms (%s)", elapsed * 1000, name)
            return
        except RuntimeError:
            raise
        except Exception as exc:
            log.warning("GPU compute check could not use %s: %s", name, exc)
    log.debug("GPU compute not tested: neither PyTorch nor CuPy could run it")


def _matmul_torch(torch: ModuleType) -> Optional[float]:
    """Seconds one multiply takes, or None when PyTorch sees no CUDA."""
    if not torch.cuda.is_available():
        log.debug("GPU compute not tested: PyTorch sees no CUDA")
        return None
    started = time.perf_counter()
    a = torch.randn(BENCHMARK_SIZE, BENCHMARK_SIZE, device="cuda")
    b = torch.randn(BENCHMARK_SIZE, BENCHMARK_SIZE, device="cuda")
    torch.matmul(a, b)
    torch.cuda.synchronize()  # the multiply is queued; wait for the GPU to finish it
    return time.perf_counter() - started


def _matmul_cupy(cupy: ModuleType) -> float:
    """Seconds one multiply takes."""
    started = time.perf_counter()
    a = cupy.random.randn(BENCHMARK_SIZE, BENCHMARK_SIZE)
    b = cupy.random.randn(BENCHMARK_SIZE, BENCHMARK_SIZE)
    cupy.matmul(a, b)
    cupy.cuda.Device().synchronize()
    return time.perf_counter() - started
