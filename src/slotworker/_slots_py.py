"""Pure-Python slot counter: the reference behaviour and the fallback.

This module defines what a SlotCounter does; the compiled backends
(``slotworker._slots``, Cython, and ``slotworker._slots_cffi_wrap``, cffi)
replace it with the same API, the same limits and the same error messages,
and ``tests/test_slots.py`` runs one suite against all of them.  Use it
through :mod:`slotworker.slots`, which picks the fastest backend built.
"""

from __future__ import annotations

import threading
from operator import index as _index
from typing import Callable, Optional, Tuple

BACKEND = "python"

#: Largest capacity a counter holds (the C core packs capacity and in_use
#: into one 64-bit word, 32 bits each).
SLOT_MAX = 0x7FFFFFFF

#: Called (once, then cleared) by the first SlotCounter created, when
#: slotworker.slots chose this module because nothing compiled imports.
#: A hook rather than an import of slotworker.slots keeps this module
#: free of the selector, as heapq is free of _heapq.
_on_first_counter: Optional[Callable[[], None]] = None


def _capacity_arg(capacity: int) -> int:
    capacity = _index(capacity)
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    if capacity > SLOT_MAX:
        raise ValueError(f"capacity must be <= {SLOT_MAX}, got {capacity}")
    return capacity


def _count_arg(n: int) -> int:
    # The class check skips operator.index for plain ints, the common case.
    if n.__class__ is not int:
        n = _index(n)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return n


def _release_error(n: int, in_use: int) -> ValueError:
    return ValueError(f"cannot release {n} slots: only {in_use} in use")


class SlotCounter:
    """A counter of ``capacity`` slots, ``in_use`` of them taken.

    Thread-safe: every method runs under one ``threading.Lock``.
    ``try_acquire`` never blocks and never grants more than is free;
    ``release`` never lets ``in_use`` go below zero.
    """

    __slots__ = ("_lock", "_capacity", "_in_use")

    def __init__(self, capacity: int) -> None:
        self._capacity = _capacity_arg(capacity)
        self._in_use = 0
        self._lock = threading.Lock()
        hook = _on_first_counter
        if hook is not None:
            hook()

    @property
    def capacity(self) -> int:
        """The number of slots."""
        return self._capacity

    @property
    def in_use(self) -> int:
        """The number of slots granted and not yet released."""
        return self._in_use

    @property
    def free(self) -> int:
        """``max(capacity - in_use, 0)``: what ``try_acquire`` could grant now."""
        with self._lock:
            free = self._capacity - self._in_use
        return free if free > 0 else 0

    def try_acquire(self, n: int = 1) -> int:
        """Grant ``min(n, free)`` slots at once and return how many (maybe 0)."""
        if n.__class__ is not int or n < 0:
            n = _count_arg(n)
        with self._lock:
            free = self._capacity - self._in_use
            grant = n if n < free else free
            if grant <= 0:
                return 0
            self._in_use += grant
        return grant

    def release(self, n: int = 1) -> None:
        """Give back ``n`` slots; ValueError, changing nothing, if ``n > in_use``."""
        if n.__class__ is not int or n < 0:
            n = _count_arg(n)
        with self._lock:
            in_use = self._in_use
            if n > in_use:
                raise _release_error(n, in_use)
            self._in_use = in_use - n

    def resize(self, capacity: int) -> None:
        """Set the capacity; ``in_use`` is kept, even above the new capacity."""
        capacity = _capacity_arg(capacity)
        with self._lock:
            self._capacity = capacity

    def snapshot(self) -> Tuple[int, int]:
        """``(capacity, in_use)``, read together."""
        with self._lock:
            return (self._capacity, self._in_use)

    def __repr__(self) -> str:
        capacity, in_use = self.snapshot()
        return (
            f"<{type(self).__name__} backend={BACKEND!r} "
            f"capacity={capacity} in_use={in_use}>"
        )
