"""The slot counter on the worker's hot path, from the fastest backend built.

Three backends share one API (see ``slotworker._slots_py`` for the reference
behaviour) and one test suite:

``"cython"``  ``slotworker._slots``: Cython over the C core in ext/ (CPython).
``"cffi"``    ``slotworker._slots_cffi``: cffi over the same core (PyPy, or
              CPython with cffi installed).
``"python"``  ``slotworker._slots_py``: a ``threading.Lock``-guarded fallback.

The C core is lock-free (a CAS loop on one 64-bit word holding capacity and
in_use), so the native backends are safe without the GIL too.

Selection
---------
``BACKEND`` and ``SlotCounter`` are resolved on first use, not at import
(nothing here reads the environment or imports an extension until then):
the first backend of cython, cffi, python that imports wins.  Setting
``SLOTWORKER_SLOTS_BACKEND`` to one of those names forces it; if the forced
backend is not built, resolving raises ImportError naming the backend and
why it did not import, rather than quietly running something else (someone
who forces a backend wants to know they did not get it).  An unknown name
raises ImportError too.

Fallback warning
----------------
When the selection fell through to ``"python"`` because nothing compiled
imports, a RuntimeWarning is emitted once: by the first SlotCounter created,
or by :func:`warn_if_fallback`, whichever comes first.  Forcing ``"python"``
with the environment variable is a choice, not a fallback: no warning.
"""

from __future__ import annotations

import importlib
import os
import threading
import warnings
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

if TYPE_CHECKING:  # resolved lazily by __getattr__ below
    from slotworker._slots_py import SlotCounter

    BACKEND: str

__all__ = [
    "BACKEND",
    "SlotCounter",
    "available_backends",
    "load",
    "warn_if_fallback",
]

#: The environment variable that forces a backend.
ENV_VAR = "SLOTWORKER_SLOTS_BACKEND"

# Preference order, fastest first, and the module each backend lives in.
_MODULES: Dict[str, str] = {
    "cython": "slotworker._slots",
    "cffi": "slotworker._slots_cffi_wrap",
    "python": "slotworker._slots_py",
}

# Guards the one-time resolution and the once-only warning.
_lock = threading.Lock()
_chosen: Optional[Tuple[str, type]] = None
_fallback_reasons: Optional[List[str]] = None  # set when python is a fallback


def load(name: str) -> type:
    """Return the SlotCounter class of backend ``name``.

    Raises ValueError for a name that is not a backend, and ImportError
    (chained to the original error) for one that is not built here.
    """
    try:
        module_name = _MODULES[name]
    except KeyError:
        raise ValueError(
            f"unknown slot counter backend {name!r}; expected one of "
            f"{', '.join(_MODULES)}"
        ) from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"slotworker: the {name!r} slot counter backend is not available "
            f"({module_name}: {exc})",
            name=module_name,
        ) from exc
    return module.SlotCounter


def available_backends() -> Dict[str, type]:
    """Every backend that imports here, by name, fastest first."""
    found: Dict[str, type] = {}
    for name in _MODULES:
        try:
            found[name] = load(name)
        except ImportError:
            pass
    return found


def _resolve() -> Tuple[str, type]:
    global _chosen, _fallback_reasons
    with _lock:
        if _chosen is not None:
            return _chosen
        forced = os.environ.get(ENV_VAR, "").strip().lower()
        chosen: Tuple[str, type]
        if forced:
            if forced not in _MODULES:
                raise ImportError(
                    f"slotworker: {ENV_VAR}={forced!r} is not a slot counter "
                    f"backend; expected one of {', '.join(_MODULES)}"
                )
            chosen = (forced, load(forced))  # ImportError if not built
        else:
            reasons: List[str] = []
            for name in _MODULES:
                try:
                    chosen = (name, load(name))
                    break
                except ImportError as exc:
                    reasons.append(f"{name}: {exc.__cause__ or exc}")
            if chosen[0] == "python":
                _fallback_reasons = reasons
                # The first counter created warns (see warn_if_fallback).
                from slotworker import _slots_py

                _slots_py._on_first_counter = _warn_from_first_counter
        _chosen = chosen
        globals()["BACKEND"], globals()["SlotCounter"] = chosen
        return chosen


_warned = False


def warn_if_fallback() -> bool:
    """Warn once (RuntimeWarning) if the pure-Python fallback was selected.

    Returns whether the fallback is in use.  The worker calls this at
    start-up; the first SlotCounter created calls it too, so the warning
    comes out once whichever happens first.
    """
    return _warn_fallback(stacklevel=3)


def _warn_from_first_counter() -> None:
    # Called from _slots_py.SlotCounter.__init__: point at its caller.
    _warn_fallback(stacklevel=4)


def _warn_fallback(stacklevel: int) -> bool:
    global _warned
    _resolve()
    if _fallback_reasons is None:
        return False
    with _lock:
        if _warned:
            return True
        _warned = True
        from slotworker import _slots_py

        _slots_py._on_first_counter = None
    warnings.warn(
        "slotworker is running on the pure-Python slot counter: no compiled "
        "backend imports (" + "; ".join(_fallback_reasons) + "). "
        "Install a C compiler and reinstall slotworker for the fast path.",
        RuntimeWarning,
        stacklevel=stacklevel,
    )
    return True


def __getattr__(name: str) -> object:
    # PEP 562: BACKEND and SlotCounter are chosen on first access.
    if name == "BACKEND":
        return _resolve()[0]
    if name == "SlotCounter":
        return _resolve()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | {"BACKEND", "SlotCounter"})
