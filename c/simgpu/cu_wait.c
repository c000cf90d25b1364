/* The process's side of the shared device timeline (timeline.h): queueing kernels, event
 * records and cross-stream waits on this process's lanes, reading event times, and waiting.
 *
 * Waiting: the device is played forward by whoever calls, so a waiting thread computes the
 * earliest time its work can be done (its lane's queue, ignoring other processes), waits
 * until then and looks again; other processes' time slices only make it look again later.
 * Like the real driver, a wait spins (the caller's CPU is busy all along) unless the event was
 * created with CU_EVENT_BLOCKING_SYNC, or the context with CU_CTX_SCHED_BLOCKING_SYNC, in
 * which case the thread sleeps. */
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "cu_internal.h"
#include "timeline.h"

#define SIM_CTX_SCHED_BLOCKING_SYNC 0x04 /* CU_CTX_SCHED_BLOCKING_SYNC in cuda.h */
#define RECHECK_NS 100000LL              /* a wait blocked by others looks again this often */
#define CLOCK_NS 5000000LL               /* the device clock's tick, see below */

int sim_ctx_spins(const struct CUctx_st *c) { return !(c->flags & SIM_CTX_SCHED_BLOCKING_SYNC); }

static void wait_until(int64_t t, int spin)
{
    if (!spin) {
        sim_sleep_until(t);
        return;
    }
    while (sim_now_ns() < t)
        sched_yield(); /* a spinning driver wait: CPU time of the caller */
}

/* The device's timeline played to now, locked; NULL (unlocked) when there is none. */
static struct sim_tl_device *lock_now(int dev)
{
    struct sim_tl_device *t = sim_tl(dev);
    if (!t)
        return NULL;
    sim_lock();
    sim_tl_advance(dev, t, sim_now_ns());
    return t;
}

/* The same for a query, which must stay cheap however often a program polls: NULL while
 * another process holds the lock (the query then says "not ready", as a real one may while
 * the device is busy, and the poller looks again). */
static struct sim_tl_device *try_now(int dev)
{
    struct sim_tl_device *t = sim_tl(dev);
    if (!t || sim_trylock() < 0)
        return NULL;
    sim_tl_advance(dev, t, sim_now_ns());
    return t;
}

static int bind(struct sim_tl_device *t, struct CUstream_st *s)
{
    int blocking = s != &s->ctx->null_stream && !(s->flags & CU_STREAM_NON_BLOCKING);
    return sim_tl_lane_locked(t, &s->lane, &s->lane_gen, (uint64_t)(uintptr_t)s->ctx, blocking);
}

static void append(struct sim_tl_lane *l, struct sim_tl_op op)
{
    struct sim_tl_op *last = l->tail > l->head ? &l->ops[(l->tail - 1) % SIM_TL_OPS] : NULL;
    if (op.kind == SIM_TL_KERNEL && last && last->kind == SIM_TL_KERNEL && last->sms == op.sms) {
        last->ns += op.ns; /* back-to-back kernels of one shape: one operation */
        return;
    }
    l->ops[l->tail % SIM_TL_OPS] = op;
    l->tail++;
}

static void wait_for_lane(struct sim_tl_lane *l, const struct sim_tl_device *t, int lane)
{
    append(l, (struct sim_tl_op){.kind = SIM_TL_WAIT, .wait_lane = lane,
                                 .wait_seq = t->lanes[lane].tail, .wait_gen = t->lanes[lane].gen});
}

/* The legacy stream waits for the context's blocking streams, and they wait for it. */
static void legacy_waits(struct sim_tl_device *t, struct CUstream_st *s, struct sim_tl_lane *l)
{
    struct CUstream_st *null = &s->ctx->null_stream;
    if (s == null) {
        for (uint32_t i = 0; i < t->lanes_used; i++) {
            const struct sim_tl_lane *o = &t->lanes[i];
            if (o != l && o->pid == l->pid && o->tag == l->tag && o->blocking &&
                o->tail > o->head)
                wait_for_lane(l, t, (int)i);
        }
    } else if (l->blocking && null->lane_gen && t->lanes[null->lane].gen == null->lane_gen &&
               t->lanes[null->lane].pid == l->pid &&
               t->lanes[null->lane].tail > t->lanes[null->lane].head) {
        wait_for_lane(l, t, null->lane);
    }
}

/* The device clock: while this process has work queued, a thread plays its devices forward
 * every CLOCK_NS, as a real device runs whether or not anyone calls the driver, so that the
 * busy log (NVML utilization, hami_sim's BusyRecorder) never lags by more than a tick. */
static uint32_t clock_devices; /* bit per device with work queued; the thread runs while set */
static pthread_mutex_t clock_lock = PTHREAD_MUTEX_INITIALIZER;
static int clock_running;

static void reset_clock(void)
{
    pthread_mutex_init(&clock_lock, NULL);
    clock_running = 0;
    clock_devices = 0;
}
__attribute__((constructor)) static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, reset_clock);
}

/* Plays a device forward; whether this process still has work queued there. */
static int tick(int dev)
{
    struct sim_tl_device *t = lock_now(dev);
    if (!t)
        return 0;
    int32_t me = getpid();
    int busy = 0;
    for (uint32_t i = 0; i < t->lanes_used && !busy; i++)
        busy = t->lanes[i].pid == me && t->lanes[i].tail > t->lanes[i].head;
    sim_unlock();
    return busy;
}

static void *clock_thread(void *arg)
{
    (void)arg;
    for (;;) {
        sim_sleep_until(sim_now_ns() + CLOCK_NS);
        pthread_mutex_lock(&clock_lock);
        uint32_t devs = clock_devices;
        clock_devices = 0;
        pthread_mutex_unlock(&clock_lock);
        uint32_t still = 0;
        for (int d = 0; d < SIM_MAX_DEVICES; d++)
            if ((devs >> d & 1) && tick(d))
                still |= 1u << d;
        pthread_mutex_lock(&clock_lock);
        clock_devices |= still;
        if (!clock_devices) {
            clock_running = 0;
            pthread_mutex_unlock(&clock_lock);
            return NULL;
        }
        pthread_mutex_unlock(&clock_lock);
    }
}

static void start_clock(int dev)
{
    pthread_mutex_lock(&clock_lock);
    clock_devices |= 1u << dev;
    if (!clock_running) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        clock_running = pthread_create(&th, &attr, clock_thread, NULL) == 0;
        pthread_attr_destroy(&attr);
    }
    pthread_mutex_unlock(&clock_lock);
}

/* Queues an operation; the lane's seq after it through *seq. Waits while the lane is full. */
static CUresult push(struct CUstream_st *s, struct sim_tl_op op, uint64_t *seq)
{
    int dev = s->ctx->dev;
    for (;;) {
        struct sim_tl_device *t = lock_now(dev);
        if (!t)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (bind(t, s) < 0) {
            sim_unlock();
            return CUDA_ERROR_OUT_OF_MEMORY; /* more streams with work than lanes */
        }
        struct sim_tl_lane *l = &t->lanes[s->lane];
        /* Room for the operation and the legacy stream's waits (one per lane at most). */
        uint64_t room = s == &s->ctx->null_stream ? t->lanes_used + 1 : 2;
        if (l->tail - l->head + room < SIM_TL_OPS) {
            legacy_waits(t, s, l);
            append(l, op);
            *seq = l->tail;
            sim_unlock();
            if (!(__atomic_load_n(&clock_devices, __ATOMIC_RELAXED) >> dev & 1))
                start_clock(dev);
            return CUDA_SUCCESS;
        }
        int64_t until = sim_tl_lower_bound_locked(t, s->lane, l->head + 1);
        sim_unlock();
        wait_until(until > sim_now_ns() + RECHECK_NS ? until : sim_now_ns() + RECHECK_NS, 0);
    }
}

CUresult sim_tl_kernel(struct CUstream_st *s, int64_t ns, uint32_t sms)
{
    uint64_t seq;
    return push(s, (struct sim_tl_op){.kind = SIM_TL_KERNEL, .ns = ns, .sms = sms}, &seq);
}

CUresult sim_tl_record(struct CUstream_st *s, struct CUevent_st *e)
{
    CUresult rc = push(s, (struct sim_tl_op){.kind = SIM_TL_EVENT}, &e->seq);
    if (rc == CUDA_SUCCESS) {
        e->dev = s->ctx->dev;
        e->lane = s->lane;
        e->gen = s->lane_gen;
        e->recorded = 1;
        e->stamped = 0;
    }
    return rc;
}

CUresult sim_tl_wait_event(struct CUstream_st *s, const struct CUevent_st *e)
{
    if (!e->recorded || e->stamped || e->dev != s->ctx->dev)
        return CUDA_SUCCESS; /* nothing to wait for (another device's event: done by then) */
    uint64_t seq;
    return push(s, (struct sim_tl_op){.kind = SIM_TL_WAIT, .wait_lane = e->lane,
                                      .wait_seq = e->seq, .wait_gen = e->gen}, &seq);
}

int sim_tl_event_done(struct CUevent_st *e, int query)
{
    if (!e->recorded || e->stamped)
        return 1;
    if (!sim_tl(e->dev))
        return 1;
    struct sim_tl_device *t = query ? try_now(e->dev) : lock_now(e->dev);
    if (!t)
        return 0;
    const struct sim_tl_lane *l = &t->lanes[e->lane];
    if (l->gen != e->gen) { /* its stream went and drained: done, at an unknown time */
        e->stamped = 1;
        e->t_ns = t->now;
    } else if (l->head >= e->seq) {
        e->stamped = 1;
        e->t_ns = l->head - e->seq < SIM_TL_DONE ? l->done_at[(e->seq - 1) % SIM_TL_DONE]
                                                 : t->now;
    }
    sim_unlock();
    return e->stamped;
}

/* Waits until lane `lane` (generation `gen`) has completed `seq` operations. */
static void wait_lane(int dev, int lane, uint32_t gen, uint64_t seq, int spin)
{
    for (;;) {
        struct sim_tl_device *t = lock_now(dev);
        if (!t)
            return;
        const struct sim_tl_lane *l = &t->lanes[lane];
        if (l->gen != gen || l->head >= seq) {
            sim_unlock();
            return;
        }
        int64_t until = sim_tl_lower_bound_locked(t, lane, seq);
        sim_unlock();
        int64_t soonest = sim_now_ns() + RECHECK_NS;
        wait_until(until > soonest ? until : soonest, spin);
    }
}

int sim_tl_stream_idle(struct CUstream_st *s)
{
    if (!s->lane_gen || !sim_tl(s->ctx->dev))
        return 1;
    struct sim_tl_device *t = try_now(s->ctx->dev);
    if (!t)
        return 0;
    const struct sim_tl_lane *l = &t->lanes[s->lane];
    int idle = l->gen != s->lane_gen || l->head >= l->tail;
    sim_unlock();
    return idle;
}

void sim_tl_sync_stream(struct CUstream_st *s, int spin)
{
    if (s == &s->ctx->null_stream) {
        sim_tl_sync_ctx(s->ctx, spin); /* the legacy stream waits for every blocking stream */
        return;
    }
    struct sim_tl_device *t = s->lane_gen ? lock_now(s->ctx->dev) : NULL;
    if (!t)
        return;
    uint64_t tail = t->lanes[s->lane].tail;
    sim_unlock();
    wait_lane(s->ctx->dev, s->lane, s->lane_gen, tail, spin);
}

void sim_tl_sync_event(struct CUevent_st *e, int spin)
{
    if (e->recorded && !e->stamped)
        wait_lane(e->dev, e->lane, e->gen, e->seq, spin);
}

void sim_tl_sync_ctx(struct CUctx_st *c, int spin)
{
    int32_t me = getpid();
    for (;;) {
        struct sim_tl_device *t = lock_now(c->dev);
        if (!t)
            return;
        int lane = -1;
        for (uint32_t i = 0; i < t->lanes_used && lane < 0; i++) {
            const struct sim_tl_lane *l = &t->lanes[i];
            if (l->pid == me && l->tag == (uint64_t)(uintptr_t)c && l->tail > l->head)
                lane = (int)i;
        }
        uint32_t gen = lane >= 0 ? t->lanes[lane].gen : 0;
        uint64_t tail = lane >= 0 ? t->lanes[lane].tail : 0;
        sim_unlock();
        if (lane < 0)
            return;
        wait_lane(c->dev, lane, gen, tail, spin);
    }
}

void sim_tl_forget(struct CUstream_st *s, struct CUctx_st *c)
{
    int dev = s ? s->ctx->dev : c->dev;
    struct sim_tl_device *t = lock_now(dev);
    if (!t)
        return;
    int32_t me = getpid();
    for (uint32_t i = 0; i < t->lanes_used; i++) {
        struct sim_tl_lane *l = &t->lanes[i];
        if (l->pid != me)
            continue;
        if (s ? (s->lane_gen && (int)i == s->lane && l->gen == s->lane_gen)
              : l->tag == (uint64_t)(uintptr_t)c)
            l->orphan = 1;
    }
    sim_unlock();
}
