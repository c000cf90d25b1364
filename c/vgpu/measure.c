/* Measuring launches with timing events, on the launch's own stream, per thread.
 *
 * A measured launch is bracketed by two events recorded on its stream; the device stamps them
 * when it reaches them, so their difference is the launch's device time (plus any time slice
 * the device gave another context in between, see limiter.c). Results are read back later
 * without ever waiting (cuEventQuery on the oldest measurements, at most every
 * DRAIN_EVERY_NS): no launch waits for an earlier launch's measurement. When RING
 * measurements are in flight a launch is not measured; its signature's next measurement stands
 * for it (costs.c counts the launches in between).
 *
 * Which launches: costs.c decides (unknown and variable signatures: every launch; steady
 * ones: one in STEADY_EVERY). Each thread has its own ring of events (created in the thread's
 * current context with CU_EVENT_BLOCKING_SYNC, so that nothing can spin on them; recreated
 * when the context changes, destroyed when the thread exits): no locks, no helper thread.
 */
#include <pthread.h>
#include <stdlib.h>

#include "limiter.h"

#define RING 256 /* a variable signature is measured at every launch, pipelined or not */
#define DRAIN_EVERY_NS 200000LL

enum { SAMPLE_FREE, SAMPLE_STARTED, SAMPLE_RECORDED, SAMPLE_CONSUMED };

struct vgpu_sample {
    CUevent start, end;
    CUcontext ctx; /* the context the events belong to */
    struct vgpu_cost *cost;
    int rec, state;
    uint32_t weight;
    int64_t charged_ns;
};

struct ring {
    struct vgpu_sample s[RING];
    unsigned head, count; /* oldest first */
    int64_t next_drain_ns;
};

static __thread struct ring *mine;
static pthread_key_t ring_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void destroy_events(struct vgpu_sample *s)
{
    if (s->start)
        CALL_CU(cuEventDestroy_v2, s->start);
    if (s->end)
        CALL_CU(cuEventDestroy_v2, s->end);
    s->start = s->end = NULL;
}

static void free_ring(void *p)
{
    struct ring *r = p;
    for (int i = 0; i < RING; i++)
        destroy_events(&r->s[i]);
    free(r);
}

static void make_key(void) { pthread_key_create(&ring_key, free_ring); }

/* A fork() child starts without measurements: its parent's events are not its own. */
static void forget_ring(void) { mine = NULL; }
__attribute__((constructor)) static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, forget_ring);
}

static struct ring *ring(void)
{
    if (VGPU_UNLIKELY(!mine)) {
        pthread_once(&key_once, make_key);
        mine = calloc(1, sizeof *mine);
        if (mine)
            pthread_setspecific(ring_key, mine);
    }
    return mine;
}

static CUresult record(CUevent e, const struct vgpu_launch *launch)
{
    return launch->per_thread ? CALL_CU(cuEventRecord_ptsz, e, launch->stream)
                              : CALL_CU(cuEventRecord, e, launch->stream);
}

/* Reports a finished measurement (the events are complete) and marks it consumed. */
static void report(struct vgpu_sample *s, vgpu_measured_fn done)
{
    float ms = 0;
    if (CALL_CU(cuEventElapsedTime, &ms, s->start, s->end) == CUDA_SUCCESS && ms >= 0)
        done(s->cost, s->rec, s->charged_ns, s->weight, (int64_t)((double)ms * 1e6 + 0.5));
    s->state = SAMPLE_CONSUMED;
}

static void pop(struct ring *r)
{
    r->s[r->head].state = SAMPLE_FREE;
    r->head = (r->head + 1) % RING;
    r->count--;
}

void vgpu_measure_drain(vgpu_measured_fn done, int64_t now)
{
    struct ring *r = mine;
    /* Settling can wait a little: at most one look at 16 per DRAIN_EVERY_NS keeps the queries
     * off the path of programs that launch every microsecond. Not when measurements pile up:
     * bursts of cheaply priced launches (a variable signature after a wait) outran that pace,
     * the ring filled, launches went unmeasured and a 50x-varying kernel ran away from its
     * limit (47 % at 30 in a CI run). Then everything finished is read at once. */
    int piling = r && r->count >= RING / 4;
    if (!r || !r->count || (now < r->next_drain_ns && !piling))
        return;
    r->next_drain_ns = now + DRAIN_EVERY_NS;
    for (int k = 0; r->count && (k < 16 || piling); k++) {
        struct vgpu_sample *s = &r->s[r->head];
        if (s->state == SAMPLE_RECORDED) {
            CUresult q = CALL_CU(cuEventQuery, s->end);
            if (q == CUDA_ERROR_NOT_READY)
                break;
            if (q == CUDA_SUCCESS)
                report(s, done);
        }
        pop(r); /* consumed, abandoned, or an event error: nothing more to learn */
    }
}

/* The sample's events, (re)created in the current context when needed. */
static int ready_events(struct vgpu_sample *s)
{
    CUcontext ctx = NULL;
    if (CALL_CU(cuCtxGetCurrent, &ctx) != CUDA_SUCCESS || !ctx)
        return -1;
    if (s->ctx == ctx && s->start && s->end)
        return 0;
    destroy_events(s);
    s->ctx = ctx;
    if (CALL_CU(cuEventCreate, &s->start, CU_EVENT_BLOCKING_SYNC) != CUDA_SUCCESS ||
        CALL_CU(cuEventCreate, &s->end, CU_EVENT_BLOCKING_SYNC) != CUDA_SUCCESS) {
        destroy_events(s);
        return -1;
    }
    return 0;
}

struct vgpu_sample *vgpu_measure_begin(const struct vgpu_launch *launch, struct vgpu_cost *cost,
                                       int rec, int64_t charged_ns)
{
    struct ring *r = ring();
    if (!r || r->count == RING)
        return NULL;
    struct vgpu_sample *s = &r->s[(r->head + r->count) % RING];
    if (ready_events(s) < 0 || record(s->start, launch) != CUDA_SUCCESS)
        return NULL;
    s->cost = cost;
    s->rec = rec;
    s->weight = cost ? vgpu_cost_take_weight(cost, vgpu_now_ns()) : 1;
    s->charged_ns = charged_ns;
    s->state = SAMPLE_STARTED;
    r->count++;
    return s;
}

void vgpu_measure_end(struct vgpu_sample *s, const struct vgpu_launch *launch, int launched)
{
    s->state = launched && record(s->end, launch) == CUDA_SUCCESS ? SAMPLE_RECORDED
                                                                  : SAMPLE_CONSUMED;
}
