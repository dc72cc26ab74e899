"""The automatic checks every deployed worker runs: memory, disk, network.

Each function raises ``RuntimeError`` when the machine fails it and returns
otherwise; thresholds are arguments (:mod:`~slotworker.worker.auto_checks`
reads them from the environment). What is measured follows runpod 1.12.0:

- memory: the memory available to new processes, in GiB, from psutil
  when it is installed (runpod depends on it; slotworker does not), else
  ``MemAvailable`` in ``/proc/meminfo``, the figure psutil gives on Linux;
- disk: free space on ``/`` as a percentage of its size;
- network: a TCP connection to Google's public DNS server, 8.8.8.8 port 53.
"""

from __future__ import annotations

import logging
import shutil
import socket
import time
from typing import Dict, Optional, Tuple

log = logging.getLogger("slotworker")

GIB = 1024 ** 3

#: Where the network check connects. runpod has no setting for it; these
#: are module attributes only so that a test can point the check at a
#: loopback server from inside the worker process.
NETWORK_PROBE_HOST = "8.8.8.8"
NETWORK_PROBE_PORT = 53

MEMINFO = "/proc/meminfo"


def read_meminfo(path: str = MEMINFO) -> Dict[str, int]:
    """``/proc/meminfo`` as ``{field: bytes}`` (the file gives kB)."""
    fields: Dict[str, int] = {}
    with open(path, encoding="ascii", errors="replace") as handle:
        for line in handle:
            name, _, rest = line.partition(":")
            words = rest.split()
            if words and words[0].isdigit():
                fields[name.strip()] = int(words[0]) * 1024
    return fields


def meminfo_memory(path: str = MEMINFO) -> Tuple[float, float]:
    """``(available, total)`` memory in GiB, from ``/proc/meminfo``.

    Kernels before 3.14 print no ``MemAvailable``; free memory plus the page
    cache and buffers stands in for it there.
    """
    try:
        info = read_meminfo(path)
    except OSError as exc:
        raise RuntimeError(f"cannot read memory information from {path}: {exc}") from exc
    if "MemAvailable" in info:
        available = info["MemAvailable"]
    else:
        available = info.get("MemFree", 0) + info.get("Cached", 0) + info.get("Buffers", 0)
    return available / GIB, info.get("MemTotal", 0) / GIB


def available_memory(meminfo: str = MEMINFO) -> Tuple[float, float]:
    """``(available, total)`` memory in GiB: psutil's figures when the image has psutil, as runpod reads them,
    else :func:`meminfo_memory` of ``meminfo`` (the same figure on Linux)."""
    try:
        import psutil  # type: ignore[import-not-found]  # optional: slotworker does not depend on it
    except ImportError:
        return meminfo_memory(meminfo)
    memory = psutil.virtual_memory()
    return memory.available / GIB, memory.total / GIB


def check_memory(min_gib: float) -> None:
    """At least ``min_gib`` GiB of memory is available (:func:`available_memory`)."""
    available, total = available_memory()
    if available < min_gib:
        raise RuntimeError(f"Insufficient memory: {available:.2f}GB available, {min_gib:g}GB required")
    log.info("memory check passed: %.2fGB available of %.2fGB", available, total)


def check_disk(min_free_percent: float, path: str = "/") -> None:
    """Free space on ``path`` is at least ``min_free_percent`` % of its size."""
    try:
        usage = shutil.disk_usage(path)
    except OSError as exc:
        raise RuntimeError(f"cannot read the disk usage of {path}: {exc}") from exc
    free_percent = 100.0 * usage.free / usage.total if usage.total > 0 else 0.0
    free_gib = usage.free / GIB
    if free_percent < min_free_percent:
        raise RuntimeError(f"Insufficient disk space: {free_gib:.2f}GB free on {path} ({free_percent:.1f}%), "
                           f"{min_free_percent:g}% required")
    log.info("disk check passed: %.2fGB free on %s (%.1f%%)", free_gib, path, free_percent)


def check_network(timeout: float, host: Optional[str] = None, port: Optional[int] = None) -> None:
    """A TCP connection to ``host:port`` (default: the probe address above) opens within ``timeout`` seconds.

    The connection is closed at once; nothing is sent on it.
    """
    host = NETWORK_PROBE_HOST if host is None else host
    port = NETWORK_PROBE_PORT if port is None else port
    started = time.perf_counter()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except socket.timeout:
        raise RuntimeError(f"Network connectivity failed: no connection to {host}:{port} "
                           f"within {timeout:g}s") from None
    except ConnectionRefusedError:
        raise RuntimeError(f"Network connectivity failed: {host}:{port} refused the connection") from None
    except OSError as exc:
        raise RuntimeError(f"Network connectivity failed: {host}:{port}: {exc}") from exc
    log.info("network check passed: connected to %s:%s in %.0fms", host, port,
             (time.perf_counter() - started) * 1000)
