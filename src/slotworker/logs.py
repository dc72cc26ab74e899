"""Logging through the standard :mod:`logging` module.

One logger, ``slotworker``. Job events carry the job id (``extra={"job_id":
...}``). Deployed workers (``RUNPOD_ENDPOINT_ID`` set) write JSON lines, the
shape the platform's log collector reads; local runs write readable text.
The API key is masked in every record, whatever logged it, before the line
leaves the thread that logged it. Lines go to stdout through
:class:`~.log_stream.QueueingStreamHandler` (the standard library's
``QueueHandler`` and ``QueueListener``): job threads queue their lines and one
listener thread writes them, so threads logging at once do not queue on a lock.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any, Optional

from .log_stream import QueueingStreamHandler

LOGGER_NAME = "slotworker"
TRACE = 5

#: RunPod's level names (and the WARN spelling) mapped to logging's levels.
LEVELS = {
    "NOTSET": logging.NOTSET,
    "TRACE": TRACE,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
}
_RUNPOD_NAMES = {TRACE: "TRACE", logging.DEBUG: "DEBUG", logging.INFO: "INFO",
                 logging.WARNING: "WARN", logging.ERROR: "ERROR", logging.CRITICAL: "ERROR"}
MAX_MESSAGE_LENGTH = 4096

log = logging.getLogger(LOGGER_NAME)


def parse_level(level: Any) -> int:
    """A RunPod level name (or logging int) as a :mod:`logging` level."""
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    name = str(level).strip().upper()
    if name not in LEVELS:
        raise ValueError(f"invalid log level {level!r}; use one of ERROR, WARN, INFO, DEBUG, TRACE")
    return LEVELS[name]


class RedactFilter(logging.Filter):
    """Masks secrets in the rendered message of every record it sees."""

    def __init__(self, secrets: "list[str]") -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s and len(s) >= 4]

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            message = record.getMessage()
            masked = message
            for secret in self.secrets:
                masked = masked.replace(secret, "***")
            if masked != message:
                record.msg, record.args = masked, None
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text:
                for secret in self.secrets:
                    record.exc_text = record.exc_text.replace(secret, "***")
        return True


def _truncate(message: str) -> str:
    if len(message) <= MAX_MESSAGE_LENGTH:
        return message
    half = MAX_MESSAGE_LENGTH // 2
    cut = len(message) - MAX_MESSAGE_LENGTH
    return f"{message[:half]}\n...TRUNCATED {cut} CHARACTERS...\n{message[-half:]}"


class TextFormatter(logging.Formatter):
    """``LEVEL  | job-id | message``, as runpod prints locally."""

    def format(self, record: logging.LogRecord) -> str:
        message = _truncate(record.getMessage())
        job_id = getattr(record, "job_id", None)
        if job_id:
            message = f"{job_id} | {message}"
        if record.exc_info or record.exc_text:
            message += "\n" + (record.exc_text or self.formatException(record.exc_info))
        name = _RUNPOD_NAMES.get(record.levelno, record.levelname)
        return f"{name.ljust(7)}| {message}"


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``{"requestId", "message", "level"}``."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info or record.exc_text:
            message += "\n" + (record.exc_text or self.formatException(record.exc_info))
        return json.dumps({
            "requestId": getattr(record, "job_id", None),
            "message": _truncate(message),
            "level": _RUNPOD_NAMES.get(record.levelno, record.levelname),
        }, ensure_ascii=False)


_handler: Optional[QueueingStreamHandler] = None
# configure() replaces _handler and starts a thread; job threads logging their
# first lines at once must not each install a handler (each line then written
# once per handler).
_configure_lock = threading.RLock()


def configure(level: Any = "INFO", json_lines: bool = False, secrets: "Optional[list[str]]" = None) -> None:
    """Install (or re-install) the worker's stdout handler on the logger.

    Called by the worker at start-up; a host application that configured
    logging itself can skip it and attach its own handlers to ``slotworker``.
    Starts the handler's listener thread; a handler installed before is
    closed first (its queued lines written, its listener stopped), so lines
    stay in order and configuring again leaves no thread behind.
    """
    global _handler
    logging.addLevelName(TRACE, "TRACE")
    new_level = parse_level(level)
    with _configure_lock:
        if _handler is not None:
            log.removeHandler(_handler)
            _handler.close()
        handler = QueueingStreamHandler(sys.stdout)
        handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
        # A filter of the handler runs in the thread that logs, before the record
        # is formatted and queued: the key never reaches the queue or the stream.
        handler.addFilter(RedactFilter(list(secrets or [])))
        handler.start()
        log.addHandler(handler)
        log.setLevel(new_level)
        log.propagate = False
        _handler = handler


def flush() -> None:
    """Return once every line logged so far is on stdout.

    The worker's handler writes lines from a listener thread, a few
    milliseconds after they are logged (WARNING and worse before the call
    returns). Call this before printing to stdout, so that the print comes
    after the lines logged before it.
    """
    handler = _handler
    if handler is not None:
        handler.flush()


def set_level(level: Any) -> None:
    """Change the logger's level (RunPod names accepted)."""
    log.setLevel(parse_level(level))


#: runpod's level names in its order; ``set_level`` takes an index into it.
_RUNPOD_LEVEL_ORDER = ("NOTSET", "TRACE", "DEBUG", "INFO", "WARN", "ERROR")


def _configure_if_unset() -> None:
    """Install the stdout handler if nothing would show a record yet.

    runpod's logger prints from the first call, also before ``start()`` (a
    handler module logging while it loads its model). Left alone when the
    worker or a host application configured logging already.
    """
    if _handler is not None or log.handlers or logging.getLogger().handlers:
        return  # (the common case, without the lock)
    with _configure_lock:  # job threads logging their first lines at once: one configures
        if _handler is None and not log.handlers and not logging.getLogger().handlers:
            level = os.environ.get("RUNPOD_LOG_LEVEL") or os.environ.get("RUNPOD_DEBUG_LEVEL") or "INFO"
            try:
                parse_level(level)
            except ValueError:
                level = "INFO"
            configure(level, json_lines=bool(os.environ.get("RUNPOD_ENDPOINT_ID")),
                      secrets=[os.environ.get("RUNPOD_AI_API_KEY", "")])


class RunPodLogger:
    """runpod's ``RunPodLogger`` API, writing to the ``slotworker`` logger.

    Handler code that logs with ``runpod.RunPodLogger().info(msg, job_id)``
    keeps working after ``import slotworker as runpod``. As in runpod,
    ``RunPodLogger()`` is always the same object.
    """

    _instance: "Optional[RunPodLogger]" = None
    _instance_lock = threading.Lock()

    def __new__(cls) -> "RunPodLogger":
        with RunPodLogger._instance_lock:
            if RunPodLogger._instance is None:
                RunPodLogger._instance = super().__new__(cls)
        return RunPodLogger._instance

    @property
    def level(self) -> str:
        """The current level by RunPod name (NOTSET, TRACE, DEBUG, INFO, WARN, ERROR)."""
        effective = log.getEffectiveLevel()
        return _RUNPOD_NAMES.get(effective, logging.getLevelName(effective))

    @level.setter
    def level(self, new_level: Any) -> None:
        set_level(new_level)

    def set_level(self, new_level: Any) -> None:
        """Set the level by RunPod name (ERROR, WARN, INFO, DEBUG, TRACE) or
        by runpod's index (0 NOTSET ... 5 ERROR), and log the new level."""
        if isinstance(new_level, int) and not isinstance(new_level, bool) and 0 <= new_level < len(_RUNPOD_LEVEL_ORDER):
            new_level = _RUNPOD_LEVEL_ORDER[new_level]
        set_level(new_level)
        self.info(f"Log level set to {self.level}")

    def log(self, message: Any, message_level: str = "INFO", job_id: Optional[str] = None) -> None:
        """Log ``message`` at a RunPod level name, tagged with ``job_id``."""
        level = logging.INFO if message_level == "TIP" else parse_level(message_level)
        _configure_if_unset()
        log.log(level, "%s", message, extra={"job_id": job_id})

    def secret(self, secret_name: str, secret: Any) -> None:
        """Log that a secret is set, showing only its first and last character."""
        text = str(secret)
        shown = text[0] + "*" * (len(text) - 2) + text[-1] if len(text) > 2 else "*" * len(text)
        self.info(f"{secret_name}: {shown}")

    def debug(self, message: Any, request_id: Optional[str] = None) -> None:
        """Log at DEBUG."""
        self.log(message, "DEBUG", request_id)

    def info(self, message: Any, request_id: Optional[str] = None) -> None:
        """Log at INFO."""
        self.log(message, "INFO", request_id)

    def warn(self, message: Any, request_id: Optional[str] = None) -> None:
        """Log at WARN."""
        self.log(message, "WARN", request_id)

    warning = warn

    def error(self, message: Any, request_id: Optional[str] = None) -> None:
        """Log at ERROR."""
        self.log(message, "ERROR", request_id)

    def tip(self, message: Any) -> None:
        """Log a tip (shown at INFO)."""
        self.log(message, "TIP")

    def trace(self, message: Any, request_id: Optional[str] = None) -> None:
        """Log at TRACE (below DEBUG)."""
        self.log(message, "TRACE", request_id)
