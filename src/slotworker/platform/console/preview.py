"""Bounded text of a value, for the console's job list.

A string is shown as it is; any other value as its JSON text. A job's
output may be megabytes (an image as base64): the console shows the first
few thousand characters, and encodes no more of the value than that (plus
at most the one leaf that crosses the limit).
"""

from __future__ import annotations

import json
from typing import Any, Optional, Tuple

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=True)


def preview(value: Any, limit: int) -> Tuple[str, bool]:
    """The text of `value` cut to `limit` characters, and whether it was cut:
    a string as it is, anything else as JSON."""
    if isinstance(value, str):
        return value[:limit], len(value) > limit
    parts = []
    size = 0
    # iterencode yields the text piece by piece, so a long list stops being
    # encoded once the limit is reached.
    for piece in _ENCODER.iterencode(value):
        parts.append(piece)
        size += len(piece)
        if size > limit:
            return "".join(parts)[:limit], True
    return "".join(parts), False


def optional_preview(value: Any, present: bool, limit: int) -> Tuple[Optional[str], bool]:
    """`preview` of a value that may be absent: (None, False) when not `present`."""
    if not present:
        return None, False
    return preview(value, limit)
