"""The value encoding both sides of the differential tests share.

The tests and the reference server (run by runpod's interpreter) import this
same file, so schemas with classes and constraint callables, and results with
ints kept apart from floats, cross the pipe unchanged.  Containers are tagged
(``{"$d": [[k, v], ...]}``, ``{"$l": [...]}``) so that key order survives and
no user value can be mistaken for a tag. Other objects are encoded as their
class name and attributes, which decode to a comparable stand-in.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict

#: Classes a schema's ``type`` may name.
TYPES: Dict[str, Any] = {
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "list": list,
    "dict": dict,
    "NoneType": type(None),
    "object": object,
}

#: Constraint callables a schema may name; some raise on some values, which
#: is part of what is compared.
CONSTRAINTS: Dict[str, Callable[[Any], Any]] = {
    "always": lambda value: True,
    "never": lambda value: False,
    "is_none": lambda value: value is None,
    "positive": lambda value: value > 0,
    "short": lambda value: len(value) < 3,
    "identity": lambda value: value,
}

_TYPE_NAMES = {id(cls): name for name, cls in TYPES.items()}
_CONSTRAINT_NAMES = {id(fn): name for name, fn in CONSTRAINTS.items()}


def encode(value: Any) -> Any:
    """``value`` as tagged JSON-ready data."""
    if isinstance(value, dict):
        return {"$d": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, list):
        return {"$l": [encode(v) for v in value]}
    if isinstance(value, tuple):
        return {"$tu": [encode(v) for v in value]}
    if isinstance(value, type) and id(value) in _TYPE_NAMES:
        return {"$t": _TYPE_NAMES[id(value)]}
    if callable(value) and id(value) in _CONSTRAINT_NAMES:
        return {"$c": _CONSTRAINT_NAMES[id(value)]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return {"$b": value.hex()}
    if hasattr(value, "__dict__"):  # compared by class name and attributes
        return {"$obj": [type(value).__qualname__, encode(dict(vars(value)))]}
    # Memory addresses differ between processes; they are masked.
    return {"$repr": re.sub(r" at 0x[0-9a-fA-F]+", " at 0x?", repr(value))}


def decode(data: Any) -> Any:
    """The value :func:`encode` was given."""
    if isinstance(data, dict):
        if "$d" in data:
            return {decode(k): decode(v) for k, v in data["$d"]}
        if "$l" in data:
            return [decode(v) for v in data["$l"]]
        if "$tu" in data:
            return tuple(decode(v) for v in data["$tu"])
        if "$t" in data:
            return TYPES[data["$t"]]
        if "$c" in data:
            return CONSTRAINTS[data["$c"]]
        if "$b" in data:
            return bytes.fromhex(data["$b"])
        if "$obj" in data:  # not rebuilt: a comparable stand-in
            return ("<object>", data["$obj"][0], decode(data["$obj"][1]))
        if "$repr" in data:
            return ("<repr>", data["$repr"])
        raise ValueError(f"cannot decode {data!r}")
    return data
