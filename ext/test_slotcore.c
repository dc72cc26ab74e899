/*
 * Threaded check of slotcore without Python (and so without any GIL):
 *
 *   cc -O2 -pthread -Iext ext/test_slotcore.c ext/slotcore.c -o /tmp/t && /tmp/t
 *   cc -O1 -g -fsanitize=thread -pthread -Iext ext/test_slotcore.c ext/slotcore.c -o /tmp/t && /tmp/t
 *
 * THREADS threads each do PAIRS acquire/release pairs on one counter while
 * another thread resizes it; every grant must fit what was asked, the
 * grants held at once (a shared atomic tally) must never exceed the largest
 * capacity, and the counter must end with nothing in use.
 */
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "slotcore.h"

#define THREADS 8
#define PAIRS 200000
#define MAX_CAP 4

static slot_counter counter;
static atomic_int held;      /* grants held by all threads, counted by them */
static atomic_int failures;
static atomic_int running;

static void *user(void *arg)
{
    uint64_t want = 1 + (uintptr_t)arg % 3;
    for (int i = 0; i < PAIRS; i++) {
        uint32_t got = slot_try_acquire(&counter, want);
        if (got > want)
            atomic_fetch_add(&failures, 1);
        if (got == 0)
            continue;
        /* The tally rises after the grant and falls before the release, so
         * it never overstates what is held: it can never pass MAX_CAP. */
        if (atomic_fetch_add(&held, (int)got) + (int)got > MAX_CAP)
            atomic_fetch_add(&failures, 1);
        atomic_fetch_sub(&held, (int)got);
        if (slot_release(&counter, got, NULL) != 0)
            atomic_fetch_add(&failures, 1);
    }
    atomic_fetch_sub(&running, 1);
    return NULL;
}

static void *resizer(void *arg)
{
    (void)arg;
    for (uint64_t i = 0; atomic_load(&running) > 0; i++)
        slot_resize(&counter, i % (MAX_CAP + 1));
    slot_resize(&counter, MAX_CAP);
    return NULL;
}

int main(void)
{
    pthread_t users[THREADS], r;
    uint32_t cap, used, seen = 99;

    assert(slot_init(&counter, (uint64_t)SLOT_MAX + 1) == -1);
    assert(slot_init(&counter, MAX_CAP) == 0);
    assert(slot_release(&counter, 1, &seen) == -1 && seen == 0);
    assert(slot_try_acquire(&counter, UINT64_MAX) == MAX_CAP);
    assert(slot_resize(&counter, 1) == 0 && slot_free(&counter) == 0);
    assert(slot_release(&counter, MAX_CAP, NULL) == 0);
    assert(slot_resize(&counter, MAX_CAP) == 0);

    atomic_store(&running, THREADS);
    for (uintptr_t i = 0; i < THREADS; i++)
        pthread_create(&users[i], NULL, user, (void *)i);
    pthread_create(&r, NULL, resizer, NULL);
    for (int i = 0; i < THREADS; i++)
        pthread_join(users[i], NULL);
    pthread_join(r, NULL);

    slot_snapshot(&counter, &cap, &used);
    printf("slotcore: %d threads x %d pairs: failures=%d capacity=%u in_use=%u\n",
           THREADS, PAIRS, atomic_load(&failures), cap, used);
    return (atomic_load(&failures) == 0 && cap == MAX_CAP && used == 0) ? 0 : 1;
}
