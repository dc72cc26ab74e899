/*
 * slotcore: the slot counter behind slotworker.slots, in plain C.
 *
 * One 64-bit word holds both numbers: capacity in the high 32 bits, in_use
 * in the low 32 bits.  Every operation is a single atomic load or a
 * compare-and-swap loop on that word, so
 *   - it is thread-safe without the GIL (free-threaded CPython, PyPy, or a
 *     binding that drops the GIL), and
 *   - a snapshot of (capacity, in_use) is one load, never torn.
 * Both numbers stay <= SLOT_MAX (2**31 - 1), so adding or subtracting a
 * count of at most SLOT_MAX to the low half never carries into the high half.
 *
 * The bindings (ext/_slots.pyx for Cython, ext/slots_cffi_build.py for cffi)
 * validate their arguments and turn errors into Python exceptions; the core
 * only ever refuses a release of more slots than are in use.
 */
#ifndef SLOTCORE_H
#define SLOTCORE_H

#include <stdint.h>

#if !defined(__STDC_NO_ATOMICS__) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#  include <stdatomic.h>
#  define SLOTCORE_C11_ATOMICS 1
typedef _Atomic uint64_t slot_word;
#elif defined(__GNUC__)
/* Older gcc/clang in C99 mode: the __atomic builtins have the same model. */
typedef uint64_t slot_word;
#else
#  error "slotcore needs C11 atomics or the GCC __atomic builtins"
#endif

/* Largest capacity (and so largest in_use) a counter holds. */
#define SLOT_MAX 0x7fffffffu

typedef struct slot_counter {
    slot_word word;          /* (capacity << 32) | in_use */
} slot_counter;

/* Set capacity, zero in_use.  Returns -1 (and changes nothing) if
 * capacity > SLOT_MAX, else 0.  Not atomic with respect to other calls:
 * initialise before sharing the counter. */
int slot_init(slot_counter *c, uint64_t capacity);

/* Grant min(n, free) slots, where free = max(capacity - in_use, 0); return
 * how many were granted (0 when none are free or n == 0). */
uint32_t slot_try_acquire(slot_counter *c, uint64_t n);

/* Give back n slots.  Returns 0, or -1 if n > in_use, in which case the
 * counter is unchanged.  If in_use_seen is not NULL it receives the in_use
 * value the decision was made on (for error messages). */
int slot_release(slot_counter *c, uint64_t n, uint32_t *in_use_seen);

/* Set capacity, leaving in_use alone (it may now exceed capacity; then
 * nothing is granted until enough is released).  Returns -1 (and changes
 * nothing) if capacity > SLOT_MAX, else 0. */
int slot_resize(slot_counter *c, uint64_t capacity);

/* Read capacity and in_use together, from one load. */
void slot_snapshot(const slot_counter *c, uint32_t *capacity, uint32_t *in_use);

uint32_t slot_capacity(const slot_counter *c);
uint32_t slot_in_use(const slot_counter *c);
/* max(capacity - in_use, 0) */
uint32_t slot_free(const slot_counter *c);

#endif /* SLOTCORE_H */
