/* The container's compute budget on one device (struct vgpu_compute in the shared file).
 *
 * GCRA, the token bucket written as one timestamp: `tat` is the instant at which everything
 * charged so far is paid for at L% of wall time. A charge of c ns of device time moves it by
 * c * 100 / L. A launch may start while tat <= now (the container has credit); tat is never
 * allowed to lag more than VGPU_LIMITER_BURST_NS behind now, which is the bucket's capacity.
 * One 64-bit word updated by compare-and-swap: every process of the container draws from it,
 * nobody holds a lock on it, and a process that dies leaves at most its last charges in it,
 * which expire as time passes (nothing leaks).
 *
 * Waiting: a thread that finds the budget spent sleeps (clock_nanosleep, absolute time) until
 * tat + VGPU_LIMITER_RESUME_NS, i.e. until 15 ms of credit exist, so every sleep lasts at least
 * that long: no polling, at most 67 timed wake-ups per second. One thread per process sleeps
 * on the clock; the process's other launching threads queue behind it on a mutex.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "limiter.h"

static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;

/* A fork() child has only the forking thread: a gate another thread held is free there. */
static void reset_gate(void) { pthread_mutex_init(&gate, NULL); }
__attribute__((constructor)) static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, reset_gate);
}

static void sleep_until(int64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000LL), (long)(t % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void count_wait(struct vgpu_compute_figures *f, int64_t slept)
{
    __atomic_fetch_add(&f->waits, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&f->waited_ns, (uint64_t)slept, __ATOMIC_RELAXED);
}

int64_t vgpu_bucket_wait(struct vgpu_compute *c, int64_t now)
{
    if (__atomic_load_n(&c->tat_ns, __ATOMIC_ACQUIRE) <= now)
        return now;
    /* Not cancellable while holding the gate: a cancelled sleeper must not strand it. */
    int cancel_state;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
    pthread_mutex_lock(&gate);
    for (;;) {
        now = vgpu_now_ns();
        int64_t tat = __atomic_load_n(&c->tat_ns, __ATOMIC_ACQUIRE);
        if (tat <= now)
            break;
        sleep_until(tat + VGPU_LIMITER_RESUME_NS);
        int64_t slept = vgpu_now_ns() - now;
        count_wait(&c->figures, slept);
        count_wait(vgpu_my_figures(), slept);
    }
    pthread_mutex_unlock(&gate);
    pthread_setcancelstate(cancel_state, NULL);
    return now;
}

/* Adds a charge to a set of figures and closes the share window when it is over. */
static void figures_add(struct vgpu_compute_figures *f, int64_t device_ns, int launches,
                        int64_t now)
{
    __atomic_fetch_add(&f->charged_ns, (uint64_t)device_ns, __ATOMIC_RELAXED);
    if (launches)
        __atomic_fetch_add(&f->launches, (uint64_t)launches, __ATOMIC_RELAXED);
    int64_t start = __atomic_load_n(&f->window_start_ns, __ATOMIC_RELAXED);
    if ((start == 0 || now - start >= VGPU_LIMITER_WINDOW_NS) &&
        __atomic_compare_exchange_n(&f->window_start_ns, &start, now, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
        /* This caller closed the window; charges racing with it land in the next one. */
        int64_t in = (int64_t)__atomic_exchange_n(&f->window_charged_ns, 0, __ATOMIC_RELAXED);
        if (start) {
            int64_t span = now - start;
            int64_t ppm = in <= 0 ? 0 : (int64_t)((double)in * 1e6 / (double)span);
            __atomic_store_n(&f->share_ppm, (uint32_t)(ppm > 2000000 ? 2000000 : ppm),
                             __ATOMIC_RELAXED);
            __atomic_store_n(&f->window_ms, (uint32_t)(span / 1000000), __ATOMIC_RELAXED);
            __atomic_store_n(&f->share_at_ns, now, __ATOMIC_RELEASE);
        }
    }
    __atomic_fetch_add(&f->window_charged_ns, (uint64_t)device_ns, __ATOMIC_RELAXED);
}

void vgpu_bucket_charge(struct vgpu_compute *c, int64_t device_ns, uint32_t pct, int64_t now,
                        int launches)
{
    int64_t wall = device_ns * 100 / (int64_t)pct, floor = now - VGPU_LIMITER_BURST_NS;
    int64_t old = __atomic_load_n(&c->tat_ns, __ATOMIC_RELAXED), next;
    do
        next = (old > floor ? old : floor) + wall;
    while (!__atomic_compare_exchange_n(&c->tat_ns, &old, next, 1, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED));
    figures_add(&c->figures, device_ns, launches, now);
    figures_add(vgpu_my_figures(), device_ns, launches, now);
}
