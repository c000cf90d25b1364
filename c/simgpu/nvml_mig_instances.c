/* Simulated NVML: GPU instances — create (with or without a placement), destroy, list, get by
 * id, info. Each new instance takes a free device record (sim_state.mig_records), zeroed, with
 * the instance's memory and SMs: libcuda opens it through the instance's MIG UUID. */
#include <stdio.h>
#include <string.h>

#include "nvml_internal.h"

/* The placement an instance gets when none is asked for: the highest free one for 1g and 3g
 * profiles, the lowest for the others (what HAMi's scheduler assumes the driver does). */
static int pick_start(const struct sim_mig_gpu *m, const struct sim_mig_profile *p, uint32_t *start)
{
    int high = p->compute_slices == 1 || p->compute_slices == 3;
    for (uint32_t k = 0; k < p->count; k++) {
        uint32_t s = p->starts[high ? p->count - 1 - k : k];
        if (slices_free(m, s, p->size)) {
            *start = s;
            return 0;
        }
    }
    return -1;
}

static int free_record(void)
{
    struct sim_state *s = sim_state_map();
    for (int r = 0; s && r < SIM_MIG_RECORDS; r++)
        if (!s->mig_used[r])
            return r;
    return -1;
}

static uint32_t free_gi_id(const struct sim_mig_gpu *m)
{
    for (uint32_t id = 1;; id++) {
        int taken = 0;
        for (int i = 0; i < SIM_MIG_GIS; i++)
            taken |= m->gis[i].live && m->gis[i].id == id;
        if (!taken)
            return id;
    }
}

/* A fresh device record for the instance: its own memory, SMs, processes and timeline. */
static void init_record(struct sim_device *rec, int record, const struct sim_device *gpu,
                        const struct sim_mig_profile *p)
{
    memset(rec, 0, sizeof *rec);
    rec->total_bytes = p->memory_mib << 20;
    rec->index = (uint32_t)(SIM_MAX_DEVICES + record);
    rec->sms = p->sms;
    snprintf(rec->name, sizeof rec->name, "%.*s MIG %s", SIM_NAME_LEN - 24, gpu->name, p->name);
    rec->cc_major = gpu->cc_major;
    rec->cc_minor = gpu->cc_minor;
    rec->pci_bus = gpu->pci_bus;
    rec->numa_node = gpu->numa_node;
}

static nvmlReturn_t create(nvmlDevice_t h, unsigned int profileId,
                           const nvmlGpuInstancePlacement_t *placement, nvmlGpuInstance_t *out)
{
    struct sim_device *d;
    struct sim_mig_gpu *m;
    struct sim_mig_table t;
    nvmlReturn_t rc = mig_gpu(h, &d, &m, &t);
    if (rc != NVML_SUCCESS)
        return rc;
    const struct sim_mig_profile *p = sim_mig_by_id(&t, profileId);
    if (!out || !p)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t start = 0;
    int valid = !placement;
    for (uint32_t k = 0; placement && k < p->count; k++)
        valid |= placement->start == p->starts[k] && placement->size == p->size;
    if (!valid)
        return NVML_ERROR_INVALID_ARGUMENT; /* not one of the profile's possible placements */
    sim_lock();
    sim_mig_settle_locked(d);
    int slot = -1, record = free_record();
    for (int i = SIM_MIG_GIS - 1; i >= 0; i--)
        if (!m->gis[i].live)
            slot = i;
    if (m->mode_current != SIM_MIG_ENABLE)
        rc = NVML_ERROR_NOT_SUPPORTED;
    else if (instances_of(m, p->id) >= (int)p->instances || slot < 0 || record < 0)
        rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    else if (placement && !slices_free(m, placement->start, placement->size))
        rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    else if (placement)
        start = placement->start;
    else if (pick_start(m, p, &start) < 0)
        rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (rc == NVML_SUCCESS) {
        init_record(sim_mig_record(record), record, d, p);
        sim_state_map()->mig_used[record] = 1;
        m->gis[slot] = (struct sim_mig_gi){
            .live = 1, .id = free_gi_id(m), .profile_id = p->id, .start = start,
            .size = p->size, .record = record, .memory_bytes = p->memory_mib << 20,
            .sms = p->sms, .compute_slices = p->compute_slices};
        m->serial++;
        *out = gi_handle(h->index, slot);
    }
    sim_unlock();
    return rc;
}

SIM_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t h, unsigned int profileId,
                                                 nvmlGpuInstance_t *gpuInstance)
{
    return create(h, profileId, NULL, gpuInstance);
}

SIM_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t h, unsigned int profileId, const nvmlGpuInstancePlacement_t *placement,
    nvmlGpuInstance_t *gpuInstance)
{
    if (!placement)
        return NVML_ERROR_INVALID_ARGUMENT;
    return create(h, profileId, placement, gpuInstance);
}

SIM_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t g)
{
    struct sim_device *d;
    struct sim_mig_table t;
    nvmlReturn_t rc = NVML_SUCCESS;
    sim_lock();
    struct sim_mig_gi *gi = live_gi(g, &d, &t);
    if (!gi)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    for (int c = 0; gi && c < SIM_MIG_CIS; c++)
        if (gi->cis[c].live)
            rc = NVML_ERROR_IN_USE; /* compute instances first */
    if (rc == NVML_SUCCESS && sim_busy_procs_locked(sim_mig_record(gi->record)) > 0)
        rc = NVML_ERROR_IN_USE;
    if (rc == NVML_SUCCESS) {
        sim_state_map()->mig_used[gi->record] = 0;
        memset(gi, 0, sizeof *gi);
    }
    sim_unlock();
    return rc;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t h, unsigned int profileId,
                                               nvmlGpuInstance_t *gpuInstances,
                                               unsigned int *count)
{
    struct sim_device *d;
    struct sim_mig_gpu *m;
    struct sim_mig_table t;
    nvmlReturn_t rc = mig_gpu(h, &d, &m, &t);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count || !gpuInstances || !sim_mig_by_id(&t, profileId))
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    sim_lock();
    for (int i = 0; i < SIM_MIG_GIS; i++)
        if (m->gis[i].live && m->gis[i].profile_id == profileId)
            gpuInstances[n++] = gi_handle(h->index, i);
    sim_unlock();
    *count = n;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t h, unsigned int id,
                                                  nvmlGpuInstance_t *gpuInstance)
{
    struct sim_device *d;
    struct sim_mig_gpu *m;
    struct sim_mig_table t;
    nvmlReturn_t rc = mig_gpu(h, &d, &m, &t);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!gpuInstance)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = NVML_ERROR_NOT_FOUND;
    sim_lock();
    for (int i = 0; i < SIM_MIG_GIS; i++)
        if (m->gis[i].live && m->gis[i].id == id) {
            *gpuInstance = gi_handle(h->index, i);
            rc = NVML_SUCCESS;
        }
    sim_unlock();
    return rc;
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t g, nvmlGpuInstanceInfo_t *info)
{
    struct sim_device *d;
    struct sim_mig_table t;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    sim_lock();
    struct sim_mig_gi *gi = live_gi(g, &d, &t);
    if (gi)
        *info = (nvmlGpuInstanceInfo_t){.device = sim_nvml_handle(g->dev), .id = gi->id,
                                        .profileId = gi->profile_id,
                                        .placement = {gi->start, gi->size}};
    sim_unlock();
    return gi ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}
