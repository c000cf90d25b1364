/* The accounting on the shared file: process slots, device records, check-and-reserve.
 *
 * Atomicity: a charge checks the device's used_bytes against its limit and adds to it and to
 * this process's slot in ONE critical section of the robust process-shared mutex, so N
 * processes racing at the limit can never hold more than the limit together.
 *
 * Crash safety (see vgpu_shared.h): the slots are the truth and used_bytes is derived. A
 * process killed inside the critical section leaves the mutex EOWNERDEAD; the next locker
 * recomputes used_bytes from the slots and carries on, and the dead process's slot is freed by
 * the next liveness sweep, which runs before any refusal and at most every 100 ms otherwise.
 * Sweeps read /proc outside the lock and take it only to free a dead slot.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hami_proc.h"
#include "vgpu.h"

static struct vgpu_shared *shm;
static int my_slot = -1;
static int slot_released; /* after exit started: no more accounting */
static pid_t my_pid;
static uint64_t my_start;
static int my_priority, stop_in_lock;
static pthread_mutex_t claim_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t my_generation; /* changes of this process's slot, for consistent reads */

/* Whether the process of a slot still lives. When /proc cannot show it, existence is all
 * that can be seen, and a process that may be alive is never swept. */
static int alive(pid_t pid, uint64_t start)
{
    uint64_t now = 0;
    switch (hami_proc_start(pid, &now)) {
    case 1: return !start || now == start;
    case 0: return 0;
    default: return kill(pid, 0) == 0 || errno == EPERM;
    }
}

static pthread_mutex_t *shared_mutex(void) { return (pthread_mutex_t *)(void *)shm->header.lock; }

/* With the lock held after its owner died: used_bytes again equals the sum of the slots. */
static void repair_locked(void)
{
    for (int d = 0; d < VGPU_MAX_DEVICES; d++) {
        uint64_t sum = 0;
        for (int i = 0; i < VGPU_MAX_PROCS; i++)
            if (shm->procs[i].pid)
                sum += shm->procs[i].used[d];
        shm->devices[d].used_bytes = sum;
    }
}

static int lock(void)
{
    int rc = pthread_mutex_lock(shared_mutex());
    if (rc == EOWNERDEAD) {
        repair_locked();
        pthread_mutex_consistent(shared_mutex());
        vgpu_log(VGPU_LOG_WARN, "a process died holding the accounting lock; totals were "
                 "recomputed from the process slots");
        return 0;
    }
    if (rc != 0)
        vgpu_log(VGPU_LOG_ERROR, "the accounting lock is unusable: %s", strerror(rc));
    return rc == 0 ? 0 : -1;
}

static void unlock(void) { pthread_mutex_unlock(shared_mutex()); }

static void after_fork_in_child(void)
{
    /* The child owns none of the parent's memory; it claims its own slot when it counts. */
    my_slot = -1;
    my_pid = 0;
    vgpu_map_reset();
}

int vgpu_ledger_init(struct vgpu_shared *s, int priority, int stop)
{
    shm = s;
    my_priority = priority;
    stop_in_lock = stop;
    pthread_atfork(NULL, NULL, after_fork_in_child);
    return 0;
}

/* Frees slot i and takes its bytes out of the device totals; lock held. */
static void free_slot_locked(int i)
{
    struct vgpu_proc *p = &shm->procs[i];
    for (int d = 0; d < VGPU_MAX_DEVICES; d++) {
        uint64_t *used = &shm->devices[d].used_bytes;
        *used -= p->used[d] < *used ? p->used[d] : *used;
        p->used[d] = 0;
    }
    p->start_time = 0;
    __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
}

void vgpu_reap(int force)
{
    int64_t now = vgpu_now_ns();
    int64_t last = __atomic_load_n(&shm->header.last_reap_ns, __ATOMIC_RELAXED);
    if (!force && now - last < VGPU_REAP_INTERVAL_NS)
        return;
    /* One sweeper per interval across the container; a forced sweep always runs. */
    if (!__atomic_compare_exchange_n(&shm->header.last_reap_ns, &last, now, 0, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED) && !force)
        return;
    for (int i = 0; i < VGPU_MAX_PROCS; i++) {
        pid_t pid = __atomic_load_n(&shm->procs[i].pid, __ATOMIC_ACQUIRE);
        uint64_t start = __atomic_load_n(&shm->procs[i].start_time, __ATOMIC_RELAXED);
        if (!pid || i == my_slot || alive(pid, start))
            continue;
        if (lock() < 0)
            return;
        if (shm->procs[i].pid == pid && shm->procs[i].start_time == start)
            free_slot_locked(i);
        unlock();
    }
}

/* Takes a free slot without the lock (start-up never waits for other processes): a compare-
 * and-swap of its pid from 0. Free slots hold no bytes (free_slot_locked zeroes them before it
 * clears the pid), so a claimed slot is consistent from its first instant. The search starts
 * at a place that depends on the pid, so processes starting together rarely race for a slot. */
static int take_slot(void)
{
    for (int k = 0; k < VGPU_MAX_PROCS; k++) {
        int i = (int)(((unsigned)my_pid + (unsigned)k) % VGPU_MAX_PROCS);
        struct vgpu_proc *p = &shm->procs[i];
        int32_t expected = 0;
        if (__atomic_load_n(&p->pid, __ATOMIC_RELAXED) != 0 ||
            !__atomic_compare_exchange_n(&p->pid, &expected, my_pid, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_RELAXED))
            continue;
        p->priority = my_priority;
        p->host_pid = 0;
        memset(&p->compute, 0, sizeof p->compute); /* figures of a previous owner */
        __atomic_store_n(&p->start_time, my_start, __ATOMIC_RELEASE);
        return i;
    }
    return -1;
}

int vgpu_claim_slot(void)
{
    if (__atomic_load_n(&my_slot, __ATOMIC_ACQUIRE) >= 0)
        return 0;
    pthread_mutex_lock(&claim_lock);
    if (!my_pid) {
        my_pid = getpid();
        my_start = hami_proc_start_time(my_pid);
    }
    for (int attempt = 0; my_slot < 0 && attempt < 2; attempt++) {
        if (attempt == 1)
            vgpu_reap(1); /* full: some of them may be dead */
        __atomic_store_n(&my_slot, take_slot(), __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&claim_lock);
    if (my_slot < 0)
        vgpu_log(VGPU_LOG_ERROR, "all %d process slots of the shared file are taken by live "
                 "processes", VGPU_MAX_PROCS);
    return my_slot >= 0 ? 0 : -1;
}

/* Adds to the device total and this process's slot; lock held. */
static void add_locked(int rec, uint64_t bytes)
{
    struct vgpu_device *d = &shm->devices[rec];
    d->used_bytes += bytes;
    if (d->used_bytes > d->peak_bytes)
        d->peak_bytes = d->used_bytes;
    if (VGPU_UNLIKELY(stop_in_lock)) { /* test hook: be "killed mid-update", total ahead */
        stop_in_lock = 0;
        raise(SIGSTOP);
    }
    shm->procs[my_slot].used[rec] += bytes;
    __atomic_add_fetch(&my_generation, 1, __ATOMIC_RELEASE);
}

int vgpu_charge(int rec, uint64_t bytes)
{
    if (bytes == 0 || slot_released)
        return 0;
    if (my_slot < 0 && vgpu_claim_slot() < 0)
        return -1;
    vgpu_reap(0);
    for (int attempt = 0; attempt < 2; attempt++) {
        if (attempt == 1)
            vgpu_reap(1); /* a process may have died since the last sweep */
        if (lock() < 0)
            return -1;
        struct vgpu_device *d = &shm->devices[rec];
        uint64_t limit = d->limit_bytes;
        int fits = !limit || (bytes <= limit && d->used_bytes <= limit - bytes);
        if (fits)
            add_locked(rec, bytes);
        else if (attempt == 1)
            d->refusals++;
        unlock();
        if (fits)
            return 0;
    }
    return -1;
}

void vgpu_charge_anyway(int rec, uint64_t bytes)
{
    if (bytes == 0 || slot_released || (my_slot < 0 && vgpu_claim_slot() < 0) || lock() < 0)
        return;
    add_locked(rec, bytes);
    unlock();
}

void vgpu_uncharge(int rec, uint64_t bytes)
{
    if (bytes == 0 || my_slot < 0 || slot_released || lock() < 0)
        return;
    uint64_t *mine = &shm->procs[my_slot].used[rec], *total = &shm->devices[rec].used_bytes;
    uint64_t take = bytes < *mine ? bytes : *mine; /* never below what this process holds */
    *mine -= take;
    *total -= take < *total ? take : *total;
    __atomic_add_fetch(&my_generation, 1, __ATOMIC_RELEASE);
    unlock();
}

int vgpu_usage_of(int rec, struct vgpu_usage *out)
{
    if (rec < 0 || rec >= VGPU_MAX_DEVICES)
        return -1;
    vgpu_reap(0);
    const struct vgpu_device *d = &shm->devices[rec];
    out->total = __atomic_load_n(&d->total_bytes, __ATOMIC_RELAXED);
    out->limit = __atomic_load_n(&d->limit_bytes, __ATOMIC_RELAXED);
    out->used = __atomic_load_n(&d->used_bytes, __ATOMIC_RELAXED);
    return 0;
}

struct vgpu_device *vgpu_device_at(int rec) { return &shm->devices[rec]; }

uint64_t vgpu_ledger_generation(void) { return __atomic_load_n(&my_generation, __ATOMIC_ACQUIRE); }

uint64_t vgpu_my_used(int rec)
{
    if (my_slot < 0 || slot_released || rec < 0 || rec >= VGPU_MAX_DEVICES)
        return 0;
    return __atomic_load_n(&shm->procs[my_slot].used[rec], __ATOMIC_RELAXED);
}

void vgpu_ledger_set_host_pid(int32_t host_pid)
{
    if ((my_slot >= 0 || vgpu_claim_slot() == 0) && !slot_released)
        __atomic_store_n(&shm->procs[my_slot].host_pid, host_pid, __ATOMIC_RELAXED);
}

int vgpu_ledger_processes(int32_t *pids, int32_t *host_pids, int max)
{
    int n = 0;
    vgpu_reap(0);
    for (int i = 0; i < VGPU_MAX_PROCS && n < max; i++) {
        int32_t pid = __atomic_load_n(&shm->procs[i].pid, __ATOMIC_ACQUIRE);
        int32_t host = __atomic_load_n(&shm->procs[i].host_pid, __ATOMIC_RELAXED);
        if (pid && host) {
            pids[n] = pid;
            host_pids[n++] = host;
        }
    }
    return n;
}

struct vgpu_compute_figures *vgpu_my_figures(void)
{
    static struct vgpu_compute_figures nowhere; /* no slot: counted nowhere */
    if (slot_released || (my_slot < 0 && vgpu_claim_slot() < 0))
        return &nowhere;
    return &shm->procs[my_slot].compute;
}

int vgpu_ledger_find(const char *uuid)
{
    for (int i = 0; i < VGPU_MAX_DEVICES; i++)
        if (strncmp(shm->devices[i].uuid, uuid, VGPU_UUID_LEN) == 0)
            return i;
    return -1;
}

int vgpu_ledger_register(const char *uuid, uint64_t total, uint64_t limit, uint32_t sm,
                         uint64_t *limit_out)
{
    if (lock() < 0)
        return -1;
    int rec = vgpu_ledger_find(uuid);
    for (int i = 0; rec < 0 && i < VGPU_MAX_DEVICES; i++) {
        struct vgpu_device *d = &shm->devices[i];
        if (d->uuid[0])
            continue;
        d->total_bytes = total;
        d->limit_bytes = limit;
        d->sm_limit = sm;
        snprintf(d->uuid, sizeof d->uuid, "%s", uuid);
        rec = i;
    }
    if (rec >= 0 && limit_out)
        *limit_out = shm->devices[rec].limit_bytes;
    unlock();
    return rec;
}

/* A process that exits normally gives its slot back at once (the driver frees its memory).
 * A slot that holds nothing is freed without the lock, so processes ending together (as they
 * started) do not queue for it. */
__attribute__((destructor)) static void release_slot_at_exit(void)
{
    if (!shm || my_slot < 0 || getpid() != my_pid)
        return;
    slot_released = 1;
    struct vgpu_proc *p = &shm->procs[my_slot];
    int holds = 0;
    for (int d = 0; d < VGPU_MAX_DEVICES; d++)
        holds |= __atomic_load_n(&p->used[d], __ATOMIC_RELAXED) != 0;
    if (!holds) {
        __atomic_store_n(&p->start_time, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
    } else if (lock() == 0) {
        free_slot_locked(my_slot);
        unlock();
    }
}
