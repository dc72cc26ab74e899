"""The reference side of the differential tests: runpod 1.12.0 behind a pipe.

Run by runpod's interpreter (``SLOTWORKER_RUNPOD_PYTHON``). Reads one JSON
request a line from stdin and answers one JSON line on the original stdout;
anything runpod prints goes to stderr instead, so it cannot break the
protocol. Requests:

- ``{"op": "call", "module": m, "func": f, "args": [...], "kwargs": {...},
  "cwd": dir or null, "env": {name: value or null}}``: call ``m.f`` with the
  decoded arguments, in ``cwd`` with ``env`` applied (both restored after).
  Answers ``{"value": ..., "args_after": [...]}`` or ``{"exc": [type, text],
  "args_after": [...]}``; ``args_after`` shows what the call did to its
  arguments (the validator decodes text rules in place).
- ``{"op": "api", "module": m, "name": n}``: the public attributes of ``m.n``
  and, for the callable ones, their parameters.
- ``{"op": "describe", "module": m}``: see :func:`describe`.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
from typing import Any, Dict

from _codec import decode, encode


def _call(request: Dict[str, Any]) -> Dict[str, Any]:
    func = getattr(importlib.import_module(request["module"]), request["func"])
    args = [decode(a) for a in request.get("args", [])]
    kwargs = {k: decode(v) for k, v in request.get("kwargs", {}).items()}
    saved_env = {name: os.environ.get(name) for name in request.get("env", {})}
    saved_cwd = os.getcwd()
    for name, value in request.get("env", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if request.get("cwd"):
        os.chdir(request["cwd"])
    try:
        try:
            answer: Dict[str, Any] = {"value": encode(func(*args, **kwargs))}
        except Exception as exc:  # the exception is the answer
            answer = {"exc": [type(exc).__name__, str(exc)]}
        answer["args_after"] = [encode(a) for a in args]
        return answer
    finally:
        os.chdir(saved_cwd)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def parameters(func: Any) -> Any:
    """A callable's parameters as ``[[name, kind, default repr], ...]``."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    return [[p.name, p.kind.name, None if p.default is p.empty else repr(p.default)]
            for p in sig.parameters.values()]


def api(obj: Any) -> Dict[str, Any]:
    """Public names of ``obj`` mapped to their parameters (None: not callable)."""
    return {name: parameters(getattr(obj, name)) if callable(getattr(obj, name)) else None
            for name in dir(obj) if not name.startswith("_")}


_FOREIGN_IGNORED = {"TYPE_CHECKING"}


def describe(module: Any) -> Dict[str, Any]:
    """The public names of ``module`` that are its own (not imported library
    names): ``{"kind": "class", "members": ...}``, ``{"kind": "callable",
    "params": ...}`` or ``{"kind": "value"}``. Names brought in from other
    modules of the same package (runpod's or slotworker's) count as its own.
    """
    package = module.__name__.split(".")[0]
    described: Dict[str, Any] = {}
    for name in dir(module):
        if name.startswith("_") or name in _FOREIGN_IGNORED:
            continue
        value = getattr(module, name)
        if inspect.ismodule(value):
            continue
        origin = getattr(value, "__module__", None) or ""
        if (callable(value) or origin == "typing") and origin.split(".")[0] != package:
            continue
        if inspect.isclass(value):
            described[name] = {"kind": "class", "members": api(value)}
        elif callable(value):
            described[name] = {"kind": "callable", "params": parameters(value)}
        else:
            described[name] = {"kind": "value"}
    return described


def main() -> None:
    # Answers go out on a private copy of the pipe; fd 1 and sys.stdout are
    # pointed at stderr, so nothing runpod prints can land in between.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "call":
            answer = _call(request)
        elif request["op"] == "api":
            answer = {"value": api(getattr(importlib.import_module(request["module"]), request["name"]))}
        elif request["op"] == "describe":
            answer = {"value": describe(importlib.import_module(request["module"]))}
        else:
            answer = {"exc": ["ValueError", f"unknown op {request['op']!r}"]}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
