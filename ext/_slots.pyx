# cython: language_level=3, freethreading_compatible=True, auto_pickle=False
# cython: binding=False, embedsignature=True
"""Cython slot counter: ``slotworker._slots``, a binding of ext/slotcore.c.

Same API, limits and error messages as ``slotworker._slots_py`` (the
reference).  The C core is lock-free (a CAS loop on one 64-bit word), so this
class is safe without the GIL, and the module declares itself
free-threading compatible.

The GIL is *not* released around the core calls: each is a few nanoseconds,
while dropping and re-taking the GIL costs far more and, with several threads,
invites a switch on every call (bench/test_bench_slots.py measures both).
"""

from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.stdint cimport uint32_t, uint64_t
from operator import index as _index

cdef extern from "slotcore.h" nogil:
    ctypedef struct slot_counter:
        pass
    uint32_t SLOT_MAX
    int slot_init(slot_counter *c, uint64_t capacity)
    uint32_t slot_try_acquire(slot_counter *c, uint64_t n)
    int slot_release(slot_counter *c, uint64_t n, uint32_t *in_use_seen)
    int slot_resize(slot_counter *c, uint64_t capacity)
    void slot_snapshot(const slot_counter *c, uint32_t *capacity, uint32_t *in_use)
    uint32_t slot_capacity(const slot_counter *c)
    uint32_t slot_in_use(const slot_counter *c)
    uint32_t slot_free(const slot_counter *c)

BACKEND = "cython"
_SLOT_MAX = SLOT_MAX

# A count wider than 64 bits is clamped to this: it is more than any
# counter holds, so try_acquire grants what is free and release refuses.
cdef uint64_t _HUGE = 0xffffffffffffffff


cdef uint64_t _count_arg(object n) except? 0xffffffffffffffff:
    cdef int overflow = 0
    cdef long long v
    if type(n) is not int:
        n = _index(n)
    v = PyLong_AsLongLongAndOverflow(n, &overflow)
    if overflow > 0:
        return _HUGE
    if overflow < 0 or v < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return <uint64_t>v


cdef uint64_t _capacity_arg(object capacity) except? 0xffffffffffffffff:
    capacity = _index(capacity)
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    if capacity > SLOT_MAX:
        raise ValueError(f"capacity must be <= {SLOT_MAX}, got {capacity}")
    return <uint64_t>capacity


cdef class SlotCounter:
    """A counter of ``capacity`` slots, ``in_use`` of them taken.

    Thread-safe without the GIL.  ``try_acquire`` never blocks and never
    grants more than is free; ``release`` never lets ``in_use`` go below zero.
    """

    cdef slot_counter _c

    def __cinit__(self, capacity):
        slot_init(&self._c, _capacity_arg(capacity))

    @property
    def capacity(self):
        """The number of slots."""
        return slot_capacity(&self._c)

    @property
    def in_use(self):
        """The number of slots granted and not yet released."""
        return slot_in_use(&self._c)

    @property
    def free(self):
        """``max(capacity - in_use, 0)``: what ``try_acquire`` could grant now."""
        return slot_free(&self._c)

    def try_acquire(self, n=1):
        """Grant ``min(n, free)`` slots at once and return how many (maybe 0)."""
        return slot_try_acquire(&self._c, _count_arg(n))

    def release(self, n=1):
        """Give back ``n`` slots; ValueError, changing nothing, if ``n > in_use``."""
        cdef uint32_t seen = 0
        if slot_release(&self._c, _count_arg(n), &seen) != 0:
            raise ValueError(f"cannot release {_index(n)} slots: only {seen} in use")

    def resize(self, capacity):
        """Set the capacity; ``in_use`` is kept, even above the new capacity."""
        slot_resize(&self._c, _capacity_arg(capacity))

    def snapshot(self):
        """``(capacity, in_use)``, read together."""
        cdef uint32_t cap, used
        slot_snapshot(&self._c, &cap, &used)
        return (cap, used)

    def __repr__(self):
        cdef uint32_t cap, used
        slot_snapshot(&self._c, &cap, &used)
        return f"<{type(self).__name__} backend='cython' capacity={cap} in_use={used}>"
