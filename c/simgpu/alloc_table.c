/* This process's live allocations: an open-addressing hash table keyed by base address. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"

#define TOMBSTONE ((uintptr_t)1) /* no real allocation starts at address 1 */

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_alloc *slots;
static size_t capacity, used; /* used counts live entries and tombstones */

static size_t hash(uintptr_t base) { return (size_t)((base >> 9) * 0x9e3779b97f4a7c15ULL); }

static int grow_locked(void)
{
    size_t new_cap = capacity ? capacity * 2 : 1024;
    struct sim_alloc *fresh = calloc(new_cap, sizeof *fresh);
    if (!fresh)
        return -1;
    size_t live = 0; /* tombstones are dropped */
    for (size_t i = 0; i < capacity; i++) {
        if (slots[i].base <= TOMBSTONE)
            continue;
        size_t j = hash(slots[i].base) & (new_cap - 1);
        while (fresh[j].base)
            j = (j + 1) & (new_cap - 1);
        fresh[j] = slots[i];
        live++;
    }
    free(slots);
    slots = fresh;
    capacity = new_cap;
    used = live;
    return 0;
}

int sim_alloc_put(const struct sim_alloc *a)
{
    pthread_mutex_lock(&table_lock);
    if ((used + 1) * 2 > capacity && grow_locked() < 0) {
        pthread_mutex_unlock(&table_lock);
        return -1;
    }
    size_t j = hash(a->base) & (capacity - 1);
    while (slots[j].base > TOMBSTONE)
        j = (j + 1) & (capacity - 1);
    if (slots[j].base == 0)
        used++;
    slots[j] = *a;
    pthread_mutex_unlock(&table_lock);
    return 0;
}

int sim_alloc_take(uintptr_t base, struct sim_alloc *out)
{
    int rc = -1;
    pthread_mutex_lock(&table_lock);
    if (capacity && base > TOMBSTONE) {
        for (size_t j = hash(base) & (capacity - 1); slots[j].base; j = (j + 1) & (capacity - 1)) {
            if (slots[j].base == base) {
                *out = slots[j];
                memset(&slots[j], 0, sizeof slots[j]);
                slots[j].base = TOMBSTONE;
                rc = 0;
                break;
            }
        }
    }
    pthread_mutex_unlock(&table_lock);
    return rc;
}

int sim_alloc_find(uintptr_t addr, struct sim_alloc *out)
{
    int rc = -1;
    pthread_mutex_lock(&table_lock);
    for (size_t j = 0; j < capacity; j++) {
        const struct sim_alloc *a = &slots[j];
        if (a->base > TOMBSTONE && addr >= a->base && addr < a->base + a->size) {
            *out = *a;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&table_lock);
    return rc;
}
