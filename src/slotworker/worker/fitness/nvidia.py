"""Running NVIDIA's command-line tools and reading what they print.

The automatic GPU checks ask three questions of the machine, as runpod
1.12.0 asks them: is there a GPU (plain ``nvidia-smi`` succeeds and prints
its ``NVIDIA-SMI`` banner), how many GPUs does ``nvidia-smi --list-gpus``
list, and which CUDA version is installed (``nvcc --version`` first, the
``CUDA Version:`` field of ``nvidia-smi``'s banner second). The parsing
functions take text, so they can be tested without the tools.
"""

from __future__ import annotations

import logging
import re
import subprocess
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

log = logging.getLogger("slotworker")

#: Seconds each tool may run before it is killed (runpod's bounds).
DETECT_TIMEOUT = 5.0
LIST_TIMEOUT = 10.0
VERSION_TIMEOUT = 5.0

_VERSION = re.compile(r"(\d+)\.(\d+)")


@dataclass(frozen=True)
class ToolRun:
    """The outcome of one tool run.

    ``problem`` is set when the tool could not be run to its end (not on
    ``PATH``, timed out, not executable); ``returncode`` is None then.
    """

    argv: Tuple[str, ...]
    returncode: Optional[int]
    stdout: str
    stderr: str
    problem: Optional[str] = None

    @property
    def ok(self) -> bool:
        """True when the tool ran and exited 0."""
        return self.problem is None and self.returncode == 0


def run_tool(argv: Sequence[str], timeout: float) -> ToolRun:
    """Run ``argv`` (found on ``PATH``) with no input; never raises for a missing or hung tool."""
    args = tuple(argv)
    try:
        done = subprocess.run(list(args), stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout, check=False)
    except FileNotFoundError:
        return ToolRun(args, None, "", "", problem=f"{args[0]} not found")
    except subprocess.TimeoutExpired:
        return ToolRun(args, None, "", "", problem=f"{args[0]} timed out after {timeout:g}s")
    except OSError as exc:  # e.g. found but not executable
        return ToolRun(args, None, "", "", problem=f"{args[0]} could not run: {exc}")
    return ToolRun(args, done.returncode, done.stdout.decode("utf-8", "replace"),
                   done.stderr.decode("utf-8", "replace"))


def gpu_present() -> bool:
    """True when plain ``nvidia-smi`` exits 0 and prints its ``NVIDIA-SMI`` banner.

    This is how runpod tells a GPU worker from a CPU-only one: a machine
    whose ``nvidia-smi`` is missing, hangs or fails (a broken driver) counts
    as having no GPU, and gets no GPU check.
    """
    run = run_tool(["nvidia-smi"], DETECT_TIMEOUT)
    present = run.ok and "NVIDIA-SMI" in run.stdout
    log.debug("GPU detection: %s (%s)", "present" if present else "none",
              run.problem or f"nvidia-smi exit {run.returncode}")
    return present


def listed_gpus(list_output: str) -> List[str]:
    """The GPUs in ``nvidia-smi --list-gpus`` output: each non-blank line counts as one, as runpod counts them."""
    return [line.strip() for line in list_output.splitlines() if line.strip()]


def cuda_version_in_nvcc_output(output: str) -> Optional[str]:
    """The first line of ``nvcc --version`` that mentions a release or version, stripped; None if none does."""
    for line in output.splitlines():
        lowered = line.lower()
        if "release" in lowered or "version" in lowered:
            return line.strip()
    return None


def cuda_version_in_smi_output(output: str) -> Optional[str]:
    """The word after ``CUDA Version:`` in ``nvidia-smi``'s banner; None if there is none."""
    for line in output.splitlines():
        if "CUDA Version:" in line:
            words = line.split("CUDA Version:", 1)[1].split()
            if words:
                return words[0]
    return None


def installed_cuda_version() -> Optional[Tuple[str, str]]:
    """``(source, text)`` of the installed CUDA version, or None when neither tool tells.

    ``nvcc --version`` is asked first (the toolkit's version); when it is
    missing, fails or names no version, ``nvidia-smi`` (the highest CUDA
    version the driver supports). ``text`` is what the tool printed about
    the version, unparsed: see :func:`parse_version`.
    """
    nvcc = run_tool(["nvcc", "--version"], VERSION_TIMEOUT)
    if nvcc.ok:
        found = cuda_version_in_nvcc_output(nvcc.stdout)
        if found is not None:
            return "nvcc", found
    else:
        log.debug("nvcc gives no CUDA version: %s", nvcc.problem or f"exit {nvcc.returncode}")
    smi = run_tool(["nvidia-smi"], VERSION_TIMEOUT)
    if smi.ok:
        found = cuda_version_in_smi_output(smi.stdout)
        if found is not None:
            return "nvidia-smi", found
        log.debug("nvidia-smi printed no CUDA Version field")
    else:
        log.debug("nvidia-smi gives no CUDA version: %s", smi.problem or f"exit {smi.returncode}")
    return None


def parse_version(text: str) -> Optional[Tuple[int, int]]:
    """The first ``MAJOR.MINOR`` in ``text`` as a pair of ints (``"release 12.10, V12.10.1"`` -> ``(12, 10)``).

    None when ``text`` holds no such pair; the CUDA version check then
    counts it as 0.0, as runpod does.
    """
    match = _VERSION.search(text)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))
