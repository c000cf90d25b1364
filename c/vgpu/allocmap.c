/* This process's counted objects: (kind, key) -> bytes and device record, so that every free
 * returns exactly what its allocation charged. Open-addressing hash tables split into stripes,
 * each with its own mutex, so threads freeing different pointers rarely meet. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu.h"

#define STRIPES 64
#define FIRST_CAPACITY 64

enum cell_state { EMPTY = 0, USED = 1, TOMBSTONE = 2 };

struct cell {
    uintptr_t key;
    uint64_t bytes;
    int32_t rec;
    int16_t kind;
    int16_t state;
};

struct stripe {
    pthread_mutex_t lock;
    struct cell *cells;
    size_t capacity, filled; /* filled counts USED and TOMBSTONE cells */
};

static struct stripe stripes[STRIPES] = {[0 ... STRIPES - 1] = {PTHREAD_MUTEX_INITIALIZER}};

static uint64_t hash(enum vgpu_kind kind, uintptr_t key)
{
    uint64_t h = ((uint64_t)key ^ ((uint64_t)kind << 58)) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 31);
}

static int grow_locked(struct stripe *s)
{
    size_t capacity = s->capacity ? s->capacity * 2 : FIRST_CAPACITY;
    struct cell *cells = calloc(capacity, sizeof *cells);
    if (!cells)
        return -1;
    size_t live = 0;
    for (size_t i = 0; i < s->capacity; i++) {
        const struct cell *c = &s->cells[i];
        if (c->state != USED)
            continue;
        size_t j = (hash((enum vgpu_kind)c->kind, c->key) >> 6) & (capacity - 1);
        while (cells[j].state == USED)
            j = (j + 1) & (capacity - 1);
        cells[j] = *c;
        live++;
    }
    free(s->cells);
    s->cells = cells;
    s->capacity = capacity;
    s->filled = live;
    return 0;
}

/* The cell holding (kind, key), or NULL; stripe locked. */
static struct cell *find_locked(struct stripe *s, uint64_t h, enum vgpu_kind kind, uintptr_t key)
{
    if (!s->capacity)
        return NULL;
    for (size_t j = (h >> 6) & (s->capacity - 1);; j = (j + 1) & (s->capacity - 1)) {
        struct cell *c = &s->cells[j];
        if (c->state == EMPTY)
            return NULL;
        if (c->state == USED && c->key == key && c->kind == (int16_t)kind)
            return c;
    }
}

int vgpu_map_put(enum vgpu_kind kind, uintptr_t key, uint64_t bytes, int rec,
                 struct vgpu_entry *replaced)
{
    uint64_t h = hash(kind, key);
    struct stripe *s = &stripes[h & (STRIPES - 1)];
    pthread_mutex_lock(&s->lock);
    struct cell *c = find_locked(s, h, kind, key);
    int found = c != NULL;
    if (found && replaced)
        *replaced = (struct vgpu_entry){c->bytes, c->rec, c->kind};
    if (!c) {
        if ((s->filled + 1) * 2 > s->capacity && grow_locked(s) < 0) {
            pthread_mutex_unlock(&s->lock);
            return -1;
        }
        size_t j = (h >> 6) & (s->capacity - 1);
        while (s->cells[j].state == USED)
            j = (j + 1) & (s->capacity - 1);
        c = &s->cells[j];
        s->filled += c->state == EMPTY;
    }
    *c = (struct cell){key, bytes, rec, (int16_t)kind, USED};
    pthread_mutex_unlock(&s->lock);
    return found;
}

int vgpu_map_take(enum vgpu_kind kind, uintptr_t key, struct vgpu_entry *out)
{
    uint64_t h = hash(kind, key);
    struct stripe *s = &stripes[h & (STRIPES - 1)];
    pthread_mutex_lock(&s->lock);
    struct cell *c = find_locked(s, h, kind, key);
    if (c) {
        *out = (struct vgpu_entry){c->bytes, c->rec, c->kind};
        c->state = TOMBSTONE;
    }
    pthread_mutex_unlock(&s->lock);
    return c ? 0 : -1;
}

void vgpu_map_reset(void)
{
    /* Called in a forked child: other threads of the parent may have held a stripe lock, and
     * the old tables are simply abandoned. */
    for (int i = 0; i < STRIPES; i++)
        stripes[i] = (struct stripe){PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};
}
