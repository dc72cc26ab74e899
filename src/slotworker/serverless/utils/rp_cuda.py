"""``is_available()``: whether an NVIDIA GPU is usable, without importing torch."""

from __future__ import annotations

import subprocess

#: A healthy ``nvidia-smi`` answers in well under a second; one that hangs
#: (a wedged driver) must not hang the caller with it.
PROBE_TIMEOUT = 30.0

__all__ = ["is_available"]


def is_available() -> bool:
    """True when ``nvidia-smi`` runs and reports itself (its banner says NVIDIA-SMI).

    Any failure (not installed, non-zero exit, timeout, unexpected output)
    means no GPU, as in runpod.
    """
    try:
        output = subprocess.check_output(["nvidia-smi"], stderr=subprocess.DEVNULL,
                                         timeout=PROBE_TIMEOUT)
        return "NVIDIA-SMI" in output.decode()
    except Exception:  # whatever went wrong (undecodable output too), the answer is "no GPU"
        return False
