"""Make ``import runpod`` and ``from runpod.serverless… import …`` resolve to slotworker.

:func:`install` puts a finder first on :data:`sys.meta_path` that answers for
the name ``runpod`` and every module under it:

- ``runpod`` is the ``slotworker`` package (what ``import slotworker as
  runpod`` gives);
- ``runpod.serverless`` and everything under it is the module of the same
  path under ``slotworker.serverless`` — the same module object under both
  names, so state such as registered fitness checks is shared;
- any other ``runpod`` module (the API client, the CLI, runpod's own worker
  internals) fails with a :class:`ModuleNotFoundError` that names it and says
  slotworker provides the worker side only.

It wins over a real runpod installed beside slotworker. ``slotworker run
handler.py`` installs it before it runs the script; ``import
slotworker.as_runpod`` as a script's first line does the same.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Optional, Sequence

ALIAS = "runpod"
#: runpod's top-level names that belong to its API client, not the worker.
CLIENT_NAMES = frozenset({
    "AsyncioEndpoint", "AsyncioJob", "Endpoint", "api", "endpoint", "cli", "check_credentials",
    "get_credentials", "set_credentials", "create_container_registry_auth", "create_endpoint",
    "create_pod", "create_template", "delete_container_registry_auth", "get_endpoints", "get_gpu",
    "get_gpus", "get_pod", "get_pods", "get_user", "resume_pod", "stop_pod", "terminate_pod",
    "update_container_registry_auth", "update_endpoint_template", "update_user_settings",
})

_WORKER_SIDE = ("slotworker provides runpod's worker side only (runpod.serverless: start, progress_update, "
                "register_fitness_check, utils, modules.rp_logger; runpod.RunPodLogger)")


def not_provided(name: str) -> str:
    """The message for a runpod name slotworker does not provide."""
    return f"{name} is not provided: {_WORKER_SIDE}. Install runpod itself for the rest."


class NotProvidedError(ImportError):
    """A runpod name that slotworker does not provide was imported or looked up.

    An ImportError, not an AttributeError, so that ``from runpod import
    Endpoint`` shows this message instead of Python's generic one.
    """


def missing_attribute(module: str, name: str, not_here: "frozenset[str]") -> Exception:
    """What a module's ``__getattr__`` raises for ``name``: ours for runpod names, else the usual."""
    if name in not_here:
        alias = ALIAS + module[len("slotworker"):]
        return NotProvidedError(not_provided(f"{alias}.{name}"), name=name)
    return AttributeError(f"module {module!r} has no attribute {name!r}")


def target_of(fullname: str) -> Optional[str]:
    """The slotworker module that stands for runpod module ``fullname``; None if there is none."""
    if fullname == ALIAS:
        return "slotworker"
    if fullname == f"{ALIAS}.serverless" or fullname.startswith(f"{ALIAS}.serverless."):
        return "slotworker" + fullname[len(ALIAS):]
    return None


class _SameModule(importlib.abc.Loader):
    """Loads an alias as the already-importable slotworker module itself."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        # The import system keeps the attributes the module already has
        # (__name__, __spec__, __path__), so it stays slotworker's module.
        return importlib.import_module(self.target)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module was executed under its own name."""


class RunpodFinder(importlib.abc.MetaPathFinder):
    """Answers for ``runpod`` and its submodules (see the module docstring)."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[types.ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        real = target_of(fullname)
        spec = importlib.util.find_spec(real) if real is not None else None
        if real is None or spec is None:
            raise ModuleNotFoundError(not_provided(fullname), name=fullname)
        return importlib.machinery.ModuleSpec(fullname, _SameModule(real),
                                              is_package=spec.submodule_search_locations is not None)


def installed() -> bool:
    """True when the finder is on :data:`sys.meta_path`."""
    return any(isinstance(finder, RunpodFinder) for finder in sys.meta_path)


def install() -> None:
    """Resolve ``runpod`` to slotworker from now on in this process (idempotent).

    runpod modules imported before the call are dropped from
    :data:`sys.modules`, so the next import finds slotworker's.
    """
    if installed():
        return
    for name in [n for n in sys.modules if n == ALIAS or n.startswith(ALIAS + ".")]:
        del sys.modules[name]
    sys.meta_path.insert(0, RunpodFinder())
