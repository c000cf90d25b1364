/* What a launch costs in device time, per signature: the kernel (function, grid, block) or
 * graph exec, on one device record. A launch is charged its signature's estimate before it
 * runs; what it really cost is learnt from measurements (measure.c) and settled as a debt
 * (limiter.c), so the estimate only has to be good on average, never right.
 *
 * Two kinds of signature:
 *   steady    its last COST_SAMPLES samples agree (within STEADY_RATIO, or differ by host
 *             jitter or whole time slices of other contexts): the estimate is the smallest
 *             of its last ESTIMATE_OF samples; its first COST_SAMPLES launches are
 *             measured, then one in STEADY_EVERY (at most one per STEADY_MIN_GAP_NS) and
 *             at least one per STEADY_MAX_GAP_NS;
 *   variable  its samples disagree (a persistent kernel, a communication kernel whose time
 *             follows the message size, one kernel function used for work of any size): the
 *             estimate is its base (below) and every launch is measured and settled.
 *
 * Samples are own times (contention.c takes the others' turns out). The base is the least a
 * launch of the signature takes lately: it drops to any smaller own time at once and rises
 * towards larger ones by at most 1/BASE_RISE of itself per sample (next_base), so that a cost
 * that grows is followed (a doubling in a dozen samples) while samples inflated by others'
 * turns, the usual excess of a shared device, barely move it. It is the lower bound of an own
 * time, and a variable signature's price: a launch priced low is settled up by its measurement, while
 * one priced high holds the container back until a credit that cannot come while it waits.
 *
 * The table is per process, fixed size and EVICTS: a new signature takes a free slot near its
 * hash or the least recently used one there, so programs with ever new shapes (tens of
 * thousands of distinct grids) keep their hot signatures and pay nothing for the rest but
 * an estimate from the last measurement. Lock-free to read (an entry's fields are single
 * words; a torn estimate is a wrong price that the debt corrects); updates take a mutex.
 */
#include <pthread.h>

#include "limiter.h"

#define COST_SLOTS 4096 /* power of two */
#define COST_PROBES 8
#define STEADY_RATIO 1.25 /* largest / smallest recent own time of a steady signature... */
/* ... unless they differ by host jitter only. Own times have the others' turns taken out
 * already: forgiving whole slices on top let a 50x-varying kernel beside a neighbour (own
 * times 0.1 and ~2.1 ms) turn steady, its sampled launches then missed the long ones and it
 * ran at 50 % under a 30 % limit in a CI run. */
#define JITTER_NS 100000LL
#define STEADY_EVERY 8    /* a steady signature is measured once in this many launches */
#define ESTIMATE_OF 3     /* a steady estimate: the smallest of this many latest samples */
#define CALM_SAMPLES 32   /* a variable signature becomes steady after this many agreeing (more
                           * than the short launches between two long ones of a mixed pattern) */
#define BASE_RISE 16
#define USED_RESOLUTION_NS 1000000LL
#define STEADY_MIN_GAP_NS 1000000LL  /* a steady signature is measured at most this often... */
#define STEADY_MAX_GAP_NS 20000000LL /* ... and at least this often (a slow launcher's every) */

struct vgpu_cost {
    uint64_t key;          /* 0: free */
    int64_t estimate;      /* ns; -1 until measured */
    int64_t samples[COST_SAMPLES]; /* own times */
    int64_t measured[ESTIMATE_OF]; /* the latest measurements, as measured */
    uint32_t count;
    int variable;
    uint32_t calm;         /* agreeing samples in a row since it last disagreed */
    int64_t base;          /* the least it takes lately (see the top); -1 before a sample */
    uint32_t since_sample; /* launches since the last measured one */
    int64_t sampled_ns;    /* when the last measured launch started */
    int64_t used;          /* time of a recent lookup (to the millisecond): for eviction */
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

static void claim(struct vgpu_cost *e, uint64_t key, int64_t now)
{
    __atomic_store_n(&e->key, 0, __ATOMIC_RELEASE);
    e->estimate = -1;
    e->count = 0;
    e->variable = 0;
    e->calm = 0;
    e->base = -1;
    e->since_sample = 0;
    e->sampled_ns = 0;
    e->used = now;
    __atomic_store_n(&e->key, key, __ATOMIC_RELEASE);
}

struct vgpu_cost *vgpu_cost_of(uint64_t key, int64_t now)
{
    for (uint64_t i = 0; i < COST_PROBES; i++) {
        struct vgpu_cost *e = &table[(key + i) & (COST_SLOTS - 1)];
        if (__atomic_load_n(&e->key, __ATOMIC_ACQUIRE) == key) {
            if (__atomic_load_n(&e->used, __ATOMIC_RELAXED) < now - USED_RESOLUTION_NS)
                __atomic_store_n(&e->used, now, __ATOMIC_RELAXED); /* a write per ms, not per launch */
            return e;
        }
    }
    /* New, or evicted a while ago: a free slot near its hash, else the least recently used
     * one there. A measurement in flight for an evicted signature lands on the new one: one
     * sample of another kernel, which the debt settles like any wrong estimate. */
    pthread_mutex_lock(&table_lock);
    struct vgpu_cost *victim = NULL;
    for (uint64_t i = 0; i < COST_PROBES; i++) {
        struct vgpu_cost *e = &table[(key + i) & (COST_SLOTS - 1)];
        if (e->key == key) { /* another thread added it meanwhile */
            victim = e;
            break;
        }
        if (!victim || (victim->key && (!e->key || e->used < victim->used)))
            victim = e;
    }
    if (victim->key != key)
        claim(victim, key, now);
    pthread_mutex_unlock(&table_lock);
    return victim;
}

int vgpu_cost_due(struct vgpu_cost *c, int64_t now)
{
    uint32_t n = __atomic_add_fetch(&c->since_sample, 1, __ATOMIC_RELAXED);
    if (vgpu_cost_estimate(c) < 0 || vgpu_cost_variable(c) || c->count < COST_SAMPLES)
        return 1;
    int64_t gap = now - __atomic_load_n(&c->sampled_ns, __ATOMIC_RELAXED);
    return gap >= STEADY_MAX_GAP_NS || (n >= STEADY_EVERY && gap >= STEADY_MIN_GAP_NS);
}

uint32_t vgpu_cost_take_weight(struct vgpu_cost *c, int64_t now)
{
    __atomic_store_n(&c->sampled_ns, now, __ATOMIC_RELAXED);
    uint32_t n = __atomic_exchange_n(&c->since_sample, 0, __ATOMIC_RELAXED);
    return n ? n : 1;
}

int64_t vgpu_cost_estimate(const struct vgpu_cost *c)
{
    return __atomic_load_n(&c->estimate, __ATOMIC_RELAXED);
}

int vgpu_cost_variable(const struct vgpu_cost *c)
{
    return __atomic_load_n(&c->variable, __ATOMIC_RELAXED);
}

int64_t vgpu_cost_base(const struct vgpu_cost *c)
{
    return __atomic_load_n(&c->base, __ATOMIC_RELAXED);
}

/* The base after a sample (see the top): down to the own time at once, up by at most
 * 1/BASE_RISE of itself towards the own time, or towards the latest measurements' least when
 * all of them exceed the base by less than others' turns are made of (contention.c): a cost
 * that grows while the device is shared, which the own time (bounded below by the base)
 * cannot show. */
static int64_t next_base(int64_t base, int64_t own, int64_t clean)
{
    if (base < 0 || own < base)
        return own;
    int64_t target = clean > own && vgpu_contention_grew(clean - base) ? clean : own;
    int64_t rise = base / BASE_RISE + 1;
    return target - base < rise ? target : base + rise;
}

void vgpu_cost_sample(struct vgpu_cost *c, int64_t measured, int64_t own)
{
    own = own < 0 ? 0 : own;
    pthread_mutex_lock(&table_lock);
    c->measured[c->count % ESTIMATE_OF] = measured;
    c->samples[c->count++ % COST_SAMPLES] = own;
    uint32_t n = c->count < COST_SAMPLES ? c->count : COST_SAMPLES;
    int64_t least = c->samples[0], most = c->samples[0], recent = own, clean = measured;
    for (uint32_t i = 0; i < n; i++) {
        least = c->samples[i] < least ? c->samples[i] : least;
        most = c->samples[i] > most ? c->samples[i] : most;
    }
    for (uint32_t i = 1; i < ESTIMATE_OF && i < n; i++) { /* follows a growing cost sooner */
        int64_t v = c->samples[(c->count - 1 - i) % COST_SAMPLES];
        recent = v < recent ? v : recent;
        v = c->measured[(c->count - 1 - i) % ESTIMATE_OF];
        clean = v < clean ? v : clean;
    }
    __atomic_store_n(&c->base, next_base(c->base, own, clean), __ATOMIC_RELAXED);
    /* Once variable, a signature stays so until it agreed for CALM_SAMPLES samples: a
     * pattern like 19 short launches and one long one must not look steady in between. */
    if (n >= 2 && (double)most > STEADY_RATIO * (double)least &&
        most - least > JITTER_NS)
        c->calm = 0, c->variable = 1;
    else if (c->variable && ++c->calm >= CALM_SAMPLES)
        c->variable = 0;
    __atomic_store_n(&c->estimate, c->variable ? c->base : recent, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&table_lock);
}
