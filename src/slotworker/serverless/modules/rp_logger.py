"""``RunPodLogger`` at runpod's import path, ``runpod.serverless.modules.rp_logger``.

It is slotworker's logger (:class:`slotworker.logs.RunPodLogger`), so what a
handler logs through it goes out with the worker's own lines, in the same
format.
"""

from __future__ import annotations

from ...logs import MAX_MESSAGE_LENGTH, RunPodLogger

#: runpod's level names, least to most severe.
LOG_LEVELS = ["NOTSET", "TRACE", "DEBUG", "INFO", "WARN", "ERROR"]

__all__ = ["RunPodLogger", "LOG_LEVELS", "MAX_MESSAGE_LENGTH"]
