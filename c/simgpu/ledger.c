/* The shared ledgers: per-process memory slots with their reaper, the device timeline's busy
 * intervals, and the XID ring. Every function here takes the state lock itself unless its
 * name ends in _locked. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hami_proc.h"
#include "sim.h"

#define REAP_INTERVAL_NS 100000000LL /* liveness checks read /proc: at most every 100 ms */

static pid_t slots_pid;                    /* the process the cached slots belong to */
static uint64_t my_start_time;
static int my_slot[SIM_MAX_RECORDS];
static int64_t last_reap[SIM_MAX_RECORDS];

void sim_slots_init(void)
{
    slots_pid = getpid();
    my_start_time = hami_proc_start_time(slots_pid);
    for (int i = 0; i < SIM_MAX_RECORDS; i++)
        my_slot[i] = -1;
}

void sim_reap_locked(struct sim_device *d, int force)
{
    int dev = (int)d->index;
    int64_t now = sim_now_ns();
    if (!force && now - last_reap[dev] < REAP_INTERVAL_NS)
        return;
    last_reap[dev] = now;
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        struct sim_proc *p = &d->procs[i];
        if (p->pid == 0 || (p->pid == slots_pid && p->pidns == sim_my_pidns()))
            continue;
        /* Same pid and same start time: the same live process (pidns.c: it may live in
         * another PID namespace) */
        if (!sim_proc_alive(p->pid, p->pidns, p->start_time))
            memset(p, 0, sizeof *p);
    }
    sim_holds_sweep_locked(d); /* a dead holder's share of shared memory moves on */
}

struct sim_self sim_self(void)
{
    if (slots_pid != getpid()) /* a forked child is a new process with its own memory */
        sim_slots_init();
    return (struct sim_self){slots_pid, my_start_time, slots_pid + sim_host_pid_offset(),
                             sim_my_pidns()};
}

struct sim_proc *sim_slot_for_locked(struct sim_device *d, const struct sim_self *who)
{
    for (int i = 0; i < SIM_MAX_PROCS; i++)
        if (d->procs[i].pid == who->pid && d->procs[i].start_time == who->start_time &&
            d->procs[i].pidns == who->pidns)
            return &d->procs[i];
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        if (d->procs[i].pid == 0) {
            memset(&d->procs[i], 0, sizeof d->procs[i]);
            memset(d->bins.proc_ns[i], 0, sizeof d->bins.proc_ns[i]); /* a new process */
            d->procs[i].pid = who->pid;
            d->procs[i].start_time = who->start_time;
            d->procs[i].host_pid = who->host_pid;
            d->procs[i].pidns = who->pidns;
            return &d->procs[i];
        }
    }
    return NULL;
}

/* This process's slot on `d`, claimed on first use (or made for it by another process that
 * passed it a charge: holds.c); NULL when all slots are taken. */
struct sim_proc *sim_my_slot_locked(struct sim_device *d)
{
    int dev = (int)d->index;
    struct sim_self me = sim_self();
    int i = my_slot[dev];
    if (i >= 0 && d->procs[i].pid == me.pid && d->procs[i].start_time == me.start_time &&
        d->procs[i].pidns == me.pidns)
        return &d->procs[i];
    for (int pass = 0; pass < 2; pass++) {
        struct sim_proc *p = sim_slot_for_locked(d, &me);
        if (p) {
            my_slot[dev] = (int)(p - d->procs);
            return p;
        }
        sim_reap_locked(d, 1);
    }
    return NULL;
}

static void release_if_idle(struct sim_proc *p)
{
    if (p->used_bytes == 0 && p->contexts == 0)
        memset(p, 0, sizeof *p);
}

void sim_slot_sub_locked(struct sim_proc *p, uint64_t bytes)
{
    p->used_bytes -= bytes < p->used_bytes ? bytes : p->used_bytes;
    release_if_idle(p);
}

uint64_t sim_used_locked(const struct sim_device *d)
{
    uint64_t used = 0;
    for (int i = 0; i < SIM_MAX_PROCS; i++)
        if (d->procs[i].pid)
            used += sim_reported(d->procs[i].used_bytes);
    return used;
}

int sim_charge(int dev, uint64_t bytes)
{
    struct sim_device *d = sim_device(dev);
    if (!d)
        return -1;
    sim_lock();
    sim_reap_locked(d, 0);
    if (sim_used_locked(d) + sim_reported(bytes) > d->total_bytes) {
        sim_reap_locked(d, 1); /* a process may have died since the last check */
        if (sim_used_locked(d) + sim_reported(bytes) > d->total_bytes) {
            sim_unlock();
            return -1;
        }
    }
    struct sim_proc *p = sim_my_slot_locked(d);
    if (p)
        p->used_bytes += bytes;
    sim_unlock();
    return p ? 0 : -1;
}

void sim_uncharge(int dev, uint64_t bytes)
{
    struct sim_device *d = sim_device(dev);
    if (!d)
        return;
    sim_lock();
    struct sim_proc *p = sim_my_slot_locked(d);
    if (p)
        sim_slot_sub_locked(p, bytes);
    sim_unlock();
}

void sim_context_count(int dev, int delta)
{
    struct sim_device *d = sim_device(dev);
    if (!d)
        return;
    sim_lock();
    struct sim_proc *p = sim_my_slot_locked(d);
    if (p) {
        if (delta < 0 && p->contexts < (uint32_t)-delta)
            p->contexts = 0;
        else
            p->contexts += (uint32_t)delta;
        release_if_idle(p);
    }
    sim_unlock();
}

uint64_t sim_device_used(int dev)
{
    struct sim_device *d = sim_device(dev);
    if (!d)
        return 0;
    sim_lock();
    sim_reap_locked(d, 0);
    uint64_t used = sim_used_locked(d);
    sim_unlock();
    return used;
}

/* Adds [start, end) of process slot `slot` (-1: none) to the time bins. */
static void bins_add_locked(struct sim_busy_bins *b, int slot, int64_t start, int64_t end)
{
    for (int64_t t = start; t < end;) {
        int64_t bin = t / SIM_BUSY_BIN_NS, next = (bin + 1) * SIM_BUSY_BIN_NS;
        int i = (int)(bin % SIM_BUSY_BINS);
        if (b->bin[i] != bin) { /* a slot last used SIM_BUSY_BINS bins ago or more */
            b->bin[i] = bin;
            b->device_ns[i] = 0;
            for (int p = 0; p < SIM_MAX_PROCS; p++)
                b->proc_ns[p][i] = 0;
        }
        int64_t span = (end < next ? end : next) - t;
        b->device_ns[i] += (uint32_t)span;
        if (slot >= 0)
            b->proc_ns[slot][i] += (uint32_t)span;
        t += span;
    }
}

void sim_busy_add_locked(struct sim_device *d, int32_t pid, int64_t start, int64_t end)
{
    if (end > d->busy_until_ns)
        d->busy_until_ns = end;
    int slot = -1;
    for (int i = 0; i < SIM_MAX_PROCS && slot < 0; i++)
        if (d->procs[i].pid == pid)
            slot = i;
    if (end > start)
        bins_add_locked(&d->bins, slot, start, end);
    struct sim_busy *last = d->busy_count ? &d->busy[(d->busy_count - 1) % SIM_BUSY_RING] : NULL;
    if (last && last->pid == pid && last->end_ns == start) {
        last->end_ns = end; /* back-to-back kernels of one process: one interval */
        return;
    }
    struct sim_busy *b = &d->busy[d->busy_count % SIM_BUSY_RING];
    b->start_ns = start;
    b->end_ns = end;
    b->pid = pid;
    d->busy_count++;
}

int64_t sim_busy_binned_ns_locked(const struct sim_device *d, int64_t from, int64_t to,
                                  int32_t pid)
{
    int slot = -1;
    for (int i = 0; pid && i < SIM_MAX_PROCS && slot < 0; i++)
        if (d->procs[i].pid == pid)
            slot = i;
    if (pid && slot < 0)
        return 0;
    double total = 0;
    for (int64_t bin = from / SIM_BUSY_BIN_NS; bin * SIM_BUSY_BIN_NS < to; bin++) {
        int i = (int)(bin % SIM_BUSY_BINS);
        if (d->bins.bin[i] != bin)
            continue;
        int64_t lo = bin * SIM_BUSY_BIN_NS, hi = lo + SIM_BUSY_BIN_NS;
        int64_t in = (hi < to ? hi : to) - (lo > from ? lo : from); /* the window's part */
        uint32_t busy = slot >= 0 ? d->bins.proc_ns[slot][i] : d->bins.device_ns[i];
        total += (double)busy * (double)in / (double)SIM_BUSY_BIN_NS; /* busy spread evenly */
    }
    return (int64_t)total;
}

int64_t sim_busy_ns_locked(const struct sim_device *d, int64_t from, int64_t to, int32_t pid)
{
    int64_t total = 0;
    uint64_t n = d->busy_count < SIM_BUSY_RING ? d->busy_count : SIM_BUSY_RING;
    /* Newest first; intervals start in timeline order, so stop once one ends before `from`. */
    for (uint64_t k = 0; k < n; k++) {
        const struct sim_busy *b = &d->busy[(d->busy_count - 1 - k) % SIM_BUSY_RING];
        if (b->end_ns <= from)
            break;
        if (pid && b->pid != pid)
            continue;
        int64_t s = b->start_ns > from ? b->start_ns : from;
        int64_t e = b->end_ns < to ? b->end_ns : to;
        if (e > s)
            total += e - s;
    }
    return total;
}

int sim_inject_xid(int dev, uint64_t xid)
{
    struct sim_device *d = sim_device(dev);
    if (!d)
        return -1;
    sim_lock();
    uint64_t seq = ++d->xid_count;
    struct sim_xid *x = &d->xids[(seq - 1) % SIM_XID_RING];
    x->seq = seq;
    x->xid = xid;
    x->time_ns = sim_now_ns();
    sim_unlock();
    return 0;
}
