"""cffi slot counter: a thin class over ``slotworker._slots_cffi``.

The compiled module (built from ext/slots_cffi_build.py and ext/slotcore.c)
holds the lock-free C core; this class gives it the API, limits and error
messages of ``slotworker._slots_py``, the reference.  It exists for PyPy,
where Cython is not built and the JIT makes cffi calls nearly free, and as a
cross-check of the core on CPython.  Importing this module raises
ImportError when the extension was not built or cffi's runtime is missing.
"""

from __future__ import annotations

from typing import Tuple

from slotworker._slots_cffi import ffi, lib  # ImportError: not built
from slotworker._slots_py import _capacity_arg, _count_arg, _release_error

BACKEND = "cffi"
SLOT_MAX = lib.SLOT_MAX

# More than any counter holds: a count past 64 bits is clamped to it, so
# try_acquire grants what is free and release refuses.
_HUGE = 0xFFFFFFFFFFFFFFFF

# Bound once: attribute lookups on ``lib`` are the slow part on CPython.
_new = ffi.new
_NULL = ffi.NULL
_init = lib.slot_init
_try_acquire = lib.slot_try_acquire
_release = lib.slot_release
_resize = lib.slot_resize
_capacity = lib.slot_capacity
_in_use = lib.slot_in_use
_free = lib.slot_free


class SlotCounter:
    """A counter of ``capacity`` slots, ``in_use`` of them taken.

    Thread-safe without the GIL (the C core is a CAS loop on one word).
    ``try_acquire`` never blocks and never grants more than is free;
    ``release`` never lets ``in_use`` go below zero.
    """

    __slots__ = ("_c",)

    def __init__(self, capacity: int) -> None:
        c = _new("slot_counter *")
        _init(c, _capacity_arg(capacity))
        self._c = c

    @property
    def capacity(self) -> int:
        """The number of slots."""
        return _capacity(self._c)

    @property
    def in_use(self) -> int:
        """The number of slots granted and not yet released."""
        return _in_use(self._c)

    @property
    def free(self) -> int:
        """``max(capacity - in_use, 0)``: what ``try_acquire`` could grant now."""
        return _free(self._c)

    def try_acquire(self, n: int = 1) -> int:
        """Grant ``min(n, free)`` slots at once and return how many (maybe 0)."""
        if n.__class__ is not int or n < 0:
            n = _count_arg(n)
        if n > _HUGE:
            n = _HUGE
        return _try_acquire(self._c, n)

    def release(self, n: int = 1) -> None:
        """Give back ``n`` slots; ValueError, changing nothing, if ``n > in_use``."""
        if n.__class__ is not int or n < 0:
            n = _count_arg(n)
        if _release(self._c, n if n <= _HUGE else _HUGE, _NULL) != 0:
            # The refused call changed nothing; read in_use for the message.
            raise _release_error(n, _in_use(self._c))

    def resize(self, capacity: int) -> None:
        """Set the capacity; ``in_use`` is kept, even above the new capacity."""
        _resize(self._c, _capacity_arg(capacity))

    def snapshot(self) -> Tuple[int, int]:
        """``(capacity, in_use)``, read together."""
        out = _new("uint32_t[2]")
        lib.slot_snapshot(self._c, out, out + 1)
        return (out[0], out[1])

    def __repr__(self) -> str:
        capacity, in_use = self.snapshot()
        return (
            f"<{type(self).__name__} backend={BACKEND!r} "
            f"capacity={capacity} in_use={in_use}>"
        )
