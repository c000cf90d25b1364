/* Memory more than one process can reach: VMM memory exported as a file descriptor and
 * cuMemAlloc memory behind a legacy IPC handle. The physical memory lives while any process
 * holds it (a handle, an import, a mapping) and is charged to exactly one live holder: its
 * maker while it holds it, then the holder that has held it longest. docs/simgpu.md ("Memory
 * more than one process holds") says what a real driver is known to do and what is assumed.
 * The rows live in the shared state (sim_state.holds), so the reaper of any process passes a
 * dead holder's charge on. */
#include <string.h>

#include "sim.h"

static struct sim_hold *table(void)
{
    struct sim_state *s = sim_state_map();
    return s ? s->holds : NULL;
}

int sim_record_of(const struct sim_device *d)
{
    struct sim_state *s = sim_state_map();
    if (!s || !d)
        return -1;
    if (d >= s->devices && d < s->devices + SIM_MAX_DEVICES)
        return (int)(d - s->devices);
    if (d >= s->mig_records && d < s->mig_records + SIM_MIG_RECORDS)
        return SIM_MAX_DEVICES + (int)(d - s->mig_records);
    return -1;
}

int sim_ordinal_of_record(int record)
{
    for (int i = 0; i < sim_device_count(); i++)
        if (sim_record_of(sim_device(i)) == record)
            return i;
    return -1;
}

static int alive(const struct sim_hold *h)
{
    return sim_proc_alive(h->pid, h->pidns, h->start_time);
}

static struct sim_self holder(const struct sim_hold *h)
{
    return (struct sim_self){h->pid, h->start_time, h->host_pid, h->pidns};
}

static int same_memory(const struct sim_hold *h, uint64_t ino, int record)
{
    return h->pid && h->ino == ino && h->record == record;
}

/* The live holder of the memory that has held it longest, other than `skip`; NULL if none. */
static struct sim_hold *heir_locked(struct sim_hold *t, uint64_t ino, int record,
                                    const struct sim_hold *skip)
{
    struct sim_hold *best = NULL;
    for (int i = 0; i < SIM_MAX_HOLDS; i++) {
        struct sim_hold *h = &t[i];
        if (h != skip && same_memory(h, ino, record) && alive(h) &&
            (!best || h->since_ns < best->since_ns))
            best = h;
    }
    return best;
}

static int charged_locked(const struct sim_hold *t, uint64_t ino, int record)
{
    for (int i = 0; i < SIM_MAX_HOLDS; i++)
        if (same_memory(&t[i], ino, record) && t[i].charged && alive(&t[i]))
            return 1;
    return 0;
}

/* Puts the memory on holder h's slot (found, or made for it). */
static void charge_locked(struct sim_device *d, struct sim_hold *h, uint64_t bytes)
{
    struct sim_self who = holder(h);
    struct sim_proc *p = sim_slot_for_locked(d, &who);
    if (p)
        p->used_bytes += bytes;
    h->bytes = bytes;
    h->charged = p != NULL;
}

static struct sim_hold *mine_locked(struct sim_hold *t, uint64_t ino, int record,
                                    const struct sim_self *me)
{
    for (int i = 0; i < SIM_MAX_HOLDS; i++)
        if (same_memory(&t[i], ino, record) && t[i].pid == me->pid &&
            t[i].start_time == me->start_time && t[i].pidns == me->pidns)
            return &t[i];
    return NULL;
}

int sim_hold_add(int dev, uint64_t ino, uint64_t bytes, int charged)
{
    struct sim_device *d = sim_device(dev);
    struct sim_hold *t = table();
    if (!d || !t || !ino)
        return -1;
    int record = sim_record_of(d), rc = -1;
    struct sim_self me = sim_self();
    sim_lock();
    struct sim_hold *h = mine_locked(t, ino, record, &me);
    if (h) {
        h->refs++;
        rc = 0;
    }
    for (int i = 0; i < SIM_MAX_HOLDS && rc < 0; i++) {
        if (t[i].pid)
            continue;
        /* memory counted to no one (its maker gone; a descriptor kept it alive) is charged
         * to whoever takes it now */
        int orphan = !charged && !charged_locked(t, ino, record);
        t[i] = (struct sim_hold){.ino = ino, .bytes = bytes, .start_time = me.start_time,
                                 .pid = me.pid, .host_pid = me.host_pid, .record = record,
                                 .charged = (uint32_t)(charged != 0), .refs = 1,
                                 .pidns = me.pidns, .since_ns = sim_now_ns()};
        if (orphan)
            charge_locked(d, &t[i], bytes);
        rc = 0;
    }
    sim_unlock();
    return rc;
}

int sim_hold_drop(int dev, uint64_t ino)
{
    struct sim_device *d = sim_device(dev);
    struct sim_hold *t = table();
    if (!d || !t || !ino)
        return 0;
    int record = sim_record_of(d);
    struct sim_self me = sim_self();
    sim_lock();
    struct sim_hold *h = mine_locked(t, ino, record, &me);
    if (h && --h->refs == 0) {
        if (h->charged) {
            struct sim_proc *p = sim_slot_for_locked(d, &me);
            if (p)
                sim_slot_sub_locked(p, h->bytes);
            struct sim_hold *heir = heir_locked(t, ino, record, h);
            if (heir && !heir->charged)
                charge_locked(d, heir, h->bytes);
        }
        memset(h, 0, sizeof *h);
    }
    sim_unlock();
    return h != NULL;
}

void sim_holds_sweep_locked(struct sim_device *d)
{
    struct sim_hold *t = table();
    int record = sim_record_of(d);
    for (int i = 0; t && i < SIM_MAX_HOLDS; i++) {
        struct sim_hold *h = &t[i];
        if (!h->pid || h->record != record || alive(h))
            continue;
        if (h->charged) {
            /* the dead holder's slot goes now, not at the next reap, so the memory is never
             * counted twice */
            for (int k = 0; k < SIM_MAX_PROCS; k++)
                if (d->procs[k].pid == h->pid && d->procs[k].start_time == h->start_time &&
                    d->procs[k].pidns == h->pidns)
                    memset(&d->procs[k], 0, sizeof d->procs[k]);
            struct sim_hold *heir = heir_locked(t, h->ino, record, h);
            if (heir && !heir->charged)
                charge_locked(d, heir, h->bytes);
        }
        memset(h, 0, sizeof *h);
    }
}
