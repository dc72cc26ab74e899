/* slotcore: see slotcore.h for the contract. */
#include "slotcore.h"

#define CAP_OF(w)   ((uint32_t)((w) >> 32))
#define USED_OF(w)  ((uint32_t)((w) & 0xffffffffu))
#define PACK(cap, used) (((uint64_t)(cap) << 32) | (uint64_t)(used))

/* Acquire on loads and release on stores: a slot handed back by release()
 * happens-before the try_acquire() that is granted it, so whatever the
 * slot guards is handed over with it. */
#ifdef SLOTCORE_C11_ATOMICS
#  define LOAD(c) atomic_load_explicit(&(c)->word, memory_order_acquire)
#  define STORE(c, v) atomic_store_explicit(&(c)->word, (v), memory_order_release)
#  define CAS(c, expected_ptr, desired) \
    atomic_compare_exchange_weak_explicit(&(c)->word, (expected_ptr), (desired), \
                                          memory_order_acq_rel, memory_order_acquire)
#else
#  define LOAD(c) __atomic_load_n(&(c)->word, __ATOMIC_ACQUIRE)
#  define STORE(c, v) __atomic_store_n(&(c)->word, (v), __ATOMIC_RELEASE)
#  define CAS(c, expected_ptr, desired) \
    __atomic_compare_exchange_n(&(c)->word, (expected_ptr), (desired), 1, \
                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
#endif

/* LOAD takes a pointer to non-const; the readers below only load. */
#define MUT(c) ((slot_counter *)(c))

int slot_init(slot_counter *c, uint64_t capacity)
{
    if (capacity > SLOT_MAX)
        return -1;
    STORE(c, PACK(capacity, 0));
    return 0;
}

uint32_t slot_try_acquire(slot_counter *c, uint64_t n)
{
    uint64_t w = LOAD(c);
    for (;;) {
        uint32_t cap = CAP_OF(w), used = USED_OF(w);
        uint32_t free_ = used < cap ? cap - used : 0;
        uint32_t grant = n < free_ ? (uint32_t)n : free_;
        if (grant == 0)
            return 0;
        /* used + grant <= cap <= SLOT_MAX: no carry into the capacity half. */
        if (CAS(c, &w, w + grant))
            return grant;
        /* w now holds the current word; retry with it. */
    }
}

int slot_release(slot_counter *c, uint64_t n, uint32_t *in_use_seen)
{
    uint64_t w = LOAD(c);
    for (;;) {
        uint32_t used = USED_OF(w);
        if (n > used) {
            if (in_use_seen)
                *in_use_seen = used;
            return -1;
        }
        if (n == 0 || CAS(c, &w, w - n)) {
            if (in_use_seen)
                *in_use_seen = used;
            return 0;
        }
    }
}

int slot_resize(slot_counter *c, uint64_t capacity)
{
    uint64_t w;
    if (capacity > SLOT_MAX)
        return -1;
    w = LOAD(c);
    while (!CAS(c, &w, PACK(capacity, USED_OF(w))))
        ;
    return 0;
}

void slot_snapshot(const slot_counter *c, uint32_t *capacity, uint32_t *in_use)
{
    uint64_t w = LOAD(MUT(c));
    *capacity = CAP_OF(w);
    *in_use = USED_OF(w);
}

uint32_t slot_capacity(const slot_counter *c)
{
    return CAP_OF(LOAD(MUT(c)));
}

uint32_t slot_in_use(const slot_counter *c)
{
    return USED_OF(LOAD(MUT(c)));
}

uint32_t slot_free(const slot_counter *c)
{
    uint64_t w = LOAD(MUT(c));
    uint32_t cap = CAP_OF(w), used = USED_OF(w);
    return used < cap ? cap - used : 0;
}
