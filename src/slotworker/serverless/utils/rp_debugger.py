"""Timing helpers for ``--rp_debugger``: named checkpoints, a ``with`` timer
and a function decorator, with runpod 1.12.0's shapes.

All timers record into one process-wide :class:`Checkpoints` store.
:func:`get_debugger_output` returns what was recorded (and empties the
store); :func:`clear_debugger_output` just empties it. A checkpoint name can
be used once per emptying: adding it again raises ``KeyError``, as in runpod.
Unlike runpod's, the store takes a lock, so handlers running on several
threads at once can record into it safely.
"""

from __future__ import annotations

import datetime
import functools
import platform
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from ...config import PROTOCOL_VERSION
from ..._version import __version__
from ...worker.results import processor_name

__all__ = ["Checkpoints", "LineTimer", "FunctionTimer", "get_debugger_output", "clear_debugger_output"]


def _utc_now() -> str:
    # runpod appends "Z" to an offset-aware ISO time ("...+00:00Z"); kept
    # for readers that parse its output.
    return datetime.datetime.now(datetime.timezone.utc).isoformat() + "Z"


class Checkpoints:
    """The process-wide store of named timings (``Checkpoints()`` always
    returns the same object).

    ``add(name)`` registers a checkpoint, ``start(name)`` and ``stop(name)``
    time it, ``get_checkpoints()`` returns the finished ones as
    ``{"name", "start_utc", "stop_utc", "duration_ms"}`` dicts, ``clear()``
    forgets them all. ``checkpoints`` (the list) and ``name_lookup`` (name ->
    index in it) are public, as in runpod.
    """

    _instance: Optional["Checkpoints"] = None
    _instance_lock = threading.Lock()
    _lock: Any  # the store's own lock, set on the one instance
    checkpoints: List[Dict[str, Any]] = []
    name_lookup: Dict[str, int] = {}

    def __new__(cls) -> "Checkpoints":
        with cls._instance_lock:
            if Checkpoints._instance is None:
                instance = object.__new__(cls)
                instance.checkpoints = []
                instance.name_lookup = {}
                instance._lock = threading.RLock()
                Checkpoints._instance = instance
        return Checkpoints._instance

    def add(self, name: str) -> None:
        """Register checkpoint ``name``; ``KeyError`` if it is registered already."""
        with self._lock:
            if name in self.name_lookup:
                raise KeyError(f'Checkpoint name "{name}" already exists.')
            self.checkpoints.append({"name": name})
            self.name_lookup[name] = len(self.checkpoints) - 1

    def _entry(self, name: str) -> Dict[str, Any]:
        if name not in self.name_lookup:
            raise KeyError(f"Checkpoint name '{name}' does not exist.")
        return self.checkpoints[self.name_lookup[name]]

    def start(self, name: str) -> None:
        """Mark the start of checkpoint ``name``; ``KeyError`` if it was not added."""
        with self._lock:
            entry = self._entry(name)
            entry["start"] = time.perf_counter()
            entry["start_utc"] = _utc_now()

    def stop(self, name: str) -> None:
        """Mark the end of checkpoint ``name``; ``KeyError`` if it was not added or not started."""
        with self._lock:
            entry = self._entry(name)
            if "start" not in entry:
                raise KeyError("Checkpoint has not been started.")
            entry["end"] = time.perf_counter()
            entry["stop_utc"] = _utc_now()

    def get_checkpoints(self) -> List[Dict[str, Any]]:
        """The checkpoints that were started and stopped, each with its ``duration_ms``.

        A checkpoint is reported once: its raw counter readings are dropped
        as it is reported, as runpod does.
        """
        with self._lock:
            finished = []
            for entry in self.checkpoints:
                if "start" not in entry or "end" not in entry:
                    continue
                entry["duration_ms"] = (entry.pop("end") - entry.pop("start")) * 1000
                finished.append(entry)
            return finished

    def clear(self) -> None:
        """Forget every checkpoint."""
        with self._lock:
            self.checkpoints = []
            self.name_lookup = {}


class LineTimer:
    """Time a block: ``with LineTimer("load"): ...`` records checkpoint ``load``.

    The checkpoint is added when the timer is created (``KeyError`` if the
    name is taken), started on entry and stopped on exit, even by an
    exception. As in runpod, ``with ... as x`` binds ``None``.
    """

    def __init__(self, name: str) -> None:
        self.checkpoints = Checkpoints()
        self.name = name
        self.checkpoints.add(self.name)

    def __enter__(self) -> None:
        self.checkpoints.start(self.name)

    def __exit__(self, *exc: Any) -> None:
        self.checkpoints.stop(self.name)


class FunctionTimer:
    """Decorator: each call of the function is recorded as a checkpoint named
    after the function.

    The name is added at each call, so a second call before the store is
    emptied raises ``KeyError``, as in runpod. The wrapper carries the
    function's name and docstring and also works on methods.
    """

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.checkpoints = Checkpoints()
        functools.update_wrapper(self, function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = self.function.__name__
        self.checkpoints.add(name)
        try:
            self.checkpoints.start(name)
            return self.function(*args, **kwargs)
        finally:
            # The store may have been emptied meanwhile (by another thread's
            # job finishing); then there is nothing left to stop.
            if name in self.checkpoints.name_lookup:
                self.checkpoints.stop(name)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self.__call__, instance)


def _system_info() -> Dict[str, str]:
    return {
        "os": f"{platform.system()} {platform.release()}",
        "processor": processor_name(),
        "python_version": platform.python_version(),
        "runpod": PROTOCOL_VERSION,
        "slotworker": __version__,
    }


# runpod's module-level OS_INFO, PROCESSOR and PYTHON_VERSION, computed when
# first read instead of at import (reading the CPU model is not free).
_SYSTEM_CONSTANTS = {"OS_INFO": "os", "PROCESSOR": "processor", "PYTHON_VERSION": "python_version"}


def __getattr__(name: str) -> str:
    if name in _SYSTEM_CONSTANTS:
        return _system_info()[_SYSTEM_CONSTANTS[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_debugger_output() -> Dict[str, Any]:
    """``{"system_info": {...}, "timestamps": [...]}``: the finished
    checkpoints and where they ran; empties the store.

    ``system_info`` has runpod's keys (``os``, ``processor``,
    ``python_version``, ``runpod``: the runpod release whose behaviour
    slotworker follows) plus ``slotworker``, its own version.
    """
    store = Checkpoints()
    with store._lock:
        timestamps = store.get_checkpoints()
        store.clear()
    return {"system_info": _system_info(), "timestamps": timestamps}


def clear_debugger_output() -> None:
    """Forget every recorded checkpoint."""
    Checkpoints().clear()
