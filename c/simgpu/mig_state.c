/* MIG in the shared state: where a GPU's MIG state and its instances' device records live,
 * which processes hold a record, the pending mode, and MIG UUID lookup. Both libraries. */
#include <string.h>

#include "mig.h"
#include "sim.h"

struct sim_mig_gpu *sim_mig_of(const struct sim_device *d)
{
    struct sim_state *s = sim_state_map();
    if (!s || !d || d->index >= SIM_MAX_DEVICES)
        return NULL;
    return &s->mig[d->index];
}

struct sim_device *sim_mig_record(int record)
{
    struct sim_state *s = sim_state_map();
    return s && record >= 0 && record < SIM_MIG_RECORDS ? &s->mig_records[record] : NULL;
}

int sim_busy_procs_locked(struct sim_device *d)
{
    int n = 0;
    sim_reap_locked(d, 1);
    for (int i = 0; i < SIM_MAX_PROCS; i++)
        n += d->procs[i].pid != 0;
    return n;
}

void sim_mig_settle_locked(struct sim_device *d)
{
    /* The driver resets the GPU into the pending mode once nothing holds it (real GPUs: at
     * the next reset, which nvidia-smi triggers when the GPU is idle). */
    struct sim_mig_gpu *m = sim_mig_of(d);
    if (m && m->mode_pending != m->mode_current && sim_busy_procs_locked(d) == 0)
        m->mode_current = m->mode_pending;
}

int sim_mig_find_uuid_locked(const char *uuid, int *gpu, int *gi, int *ci)
{
    struct sim_state *s = sim_state_map();
    if (!s || strncmp(uuid, "MIG-", 4) != 0)
        return -1;
    for (uint32_t g = 0; g < s->header.device_count; g++)
        for (int i = 0; i < SIM_MIG_GIS; i++) {
            const struct sim_mig_gi *x = &s->mig[g].gis[i];
            for (int c = 0; x->live && c < SIM_MIG_CIS; c++)
                if (x->cis[c].live && strcmp(x->cis[c].uuid, uuid) == 0) {
                    *gpu = (int)g;
                    *gi = i;
                    *ci = c;
                    return 0;
                }
        }
    return -1;
}

/* The GPU instance owning a record, or NULL; its GPU's record index in *gpu. */
static struct sim_mig_gi *gi_of_record(const struct sim_device *d, int *gpu)
{
    struct sim_state *s = sim_state_map();
    if (!s || d->index < SIM_MAX_DEVICES)
        return NULL;
    int record = (int)d->index - SIM_MAX_DEVICES;
    for (uint32_t g = 0; g < s->header.device_count; g++)
        for (int i = 0; i < SIM_MIG_GIS; i++)
            if (s->mig[g].gis[i].live && s->mig[g].gis[i].record == record) {
                *gpu = (int)g;
                return &s->mig[g].gis[i];
            }
    return NULL;
}

struct sim_device *sim_mig_parent(const struct sim_device *d)
{
    int gpu = 0;
    struct sim_state *s = sim_state_map();
    return s && gi_of_record(d, &gpu) ? &s->devices[gpu] : NULL;
}

static uint32_t first_ci_id(const struct sim_mig_gi *gi)
{
    for (int c = 0; c < SIM_MIG_CIS; c++)
        if (gi->cis[c].live)
            return gi->cis[c].id;
    return 0xFFFFFFFFu;
}

int sim_mig_parts_locked(struct sim_device *d, struct sim_mig_part *out)
{
    struct sim_mig_gpu *m = sim_mig_of(d);
    int gpu = 0, n = 0;
    if (m && m->mode_current == SIM_MIG_ENABLE) {
        for (int i = 0; i < SIM_MIG_GIS; i++)
            if (m->gis[i].live)
                out[n++] = (struct sim_mig_part){sim_mig_record(m->gis[i].record), m->gis[i].id,
                                                 first_ci_id(&m->gis[i])};
        return n;
    }
    struct sim_mig_gi *gi = gi_of_record(d, &gpu);
    out[0] = (struct sim_mig_part){d, gi ? gi->id : 0xFFFFFFFFu,
                                   gi ? first_ci_id(gi) : 0xFFFFFFFFu};
    return 1;
}
