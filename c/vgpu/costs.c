/* What a launch costs in device time, per signature: the kernel (function, grid, block) or
 * graph exec, on one device record. The cost of a launch is only known after it ran, so each
 * launch is charged its signature's estimate, and sampled launches are timed (measure.c).
 *
 * The estimate is the SMALLEST of the signature's last COST_SAMPLES measured durations.
 * Timing events around a kernel can only measure too much, never too little: under contention
 * the pair may include time another container's work held the device (or, on a time-sliced
 * GPU, its time slices). The smallest recent sample is the one least disturbed; a kernel that
 * really became longer is followed after COST_SAMPLES samples.
 *
 * The table is per process, fixed size, lock-free to read: an entry's key is written once,
 * with release order, after its estimate was set to "unknown"; estimates are single words.
 * Updates (rare: one per finished measurement) take a process-local mutex.
 */
#include <pthread.h>

#include "limiter.h"

#define COST_SLOTS 4096 /* power of two */
#define COST_PROBES 32
#define COST_SAMPLES 8

struct vgpu_cost {
    uint64_t key; /* 0: free */
    int64_t estimate; /* ns; -1 until measured */
    int64_t samples[COST_SAMPLES];
    uint32_t count;
};

static struct vgpu_cost table[COST_SLOTS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

/* A fork() child has only the forking thread: the lock another thread held is free there. */
static void reset_lock(void) { pthread_mutex_init(&table_lock, NULL); }
__attribute__((constructor)) static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, reset_lock);
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 29);
}

uint64_t vgpu_cost_key(const struct vgpu_launch *launch, int rec)
{
    /* A graph's cost is that of its exec, whatever route launched it. */
    uint64_t h = mix((uint64_t)rec, launch->kind == LAUNCH_GRAPH ? 1 : 2);
    h = mix(h, (uint64_t)(uintptr_t)launch->code);
    for (int i = 0; i < 3; i++)
        h = mix(mix(h, launch->grid[i]), launch->block[i]);
    return h ? h : 1;
}

struct vgpu_cost *vgpu_cost_of(uint64_t key)
{
    for (uint64_t i = 0; i < COST_PROBES; i++) {
        struct vgpu_cost *e = &table[(key + i) & (COST_SLOTS - 1)];
        uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
        if (k == 0) {
            pthread_mutex_lock(&table_lock); /* two threads must not add one key twice */
            k = e->key;
            if (k == 0) {
                e->estimate = -1;
                e->count = 0;
                __atomic_store_n(&e->key, key, __ATOMIC_RELEASE);
                k = key;
            }
            pthread_mutex_unlock(&table_lock);
        }
        if (k == key)
            return e;
    }
    return NULL; /* full around here: such launches are always measured and corrected */
}

int64_t vgpu_cost_estimate(const struct vgpu_cost *c)
{
    return __atomic_load_n(&c->estimate, __ATOMIC_RELAXED);
}

void vgpu_cost_sample(struct vgpu_cost *c, int64_t ns)
{
    pthread_mutex_lock(&table_lock);
    c->samples[c->count++ % COST_SAMPLES] = ns < 0 ? 0 : ns;
    uint32_t n = c->count < COST_SAMPLES ? c->count : COST_SAMPLES;
    int64_t least = c->samples[0];
    for (uint32_t i = 1; i < n; i++)
        least = c->samples[i] < least ? c->samples[i] : least;
    __atomic_store_n(&c->estimate, least, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&table_lock);
}
