/* Simulated NVML: MIG. Mode with its pending state, GPU instances and compute instances
 * (profiles, possible placements, create with and without a placement, list, get by id,
 * destroy) and MIG device handles. The layout lives in the shared state file, so every process
 * sees it; each GPU instance has a device record of its own, which libcuda opens through a
 * MIG UUID (state.c), so instances are isolated from each other.
 *
 * Return codes as the NVML reference gives them: creating while MIG mode is not active ->
 * NOT_SUPPORTED; a placement taken or no room -> INSUFFICIENT_RESOURCES; destroying an instance
 * with processes (or a GPU instance with compute instances) -> IN_USE; enabling MIG while
 * processes hold the GPU succeeds with activationStatus IN_USE and leaves the mode pending
 * until the GPU is idle. */
#include <stdio.h>
#include <string.h>

#include "mig.h"
#include "nvml_internal.h"

static struct nvmlGpuInstance_st gi_handles[SIM_MAX_DEVICES][SIM_MIG_GIS];
static struct nvmlComputeInstance_st ci_handles[SIM_MAX_DEVICES][SIM_MIG_GIS][SIM_MIG_CIS];
static struct nvmlDevice_st mig_handles[SIM_MAX_DEVICES][SIM_MIG_GIS][SIM_MIG_CIS];

/* ---- handles ---- */

nvmlGpuInstance_t gi_handle(int dev, int gi)
{
    gi_handles[dev][gi] = (struct nvmlGpuInstance_st){dev, gi};
    return &gi_handles[dev][gi];
}

nvmlComputeInstance_t ci_handle(int dev, int gi, int ci)
{
    ci_handles[dev][gi][ci] = (struct nvmlComputeInstance_st){dev, gi, ci};
    return &ci_handles[dev][gi][ci];
}

nvmlDevice_t mig_handle(int dev, int gi, int ci)
{
    mig_handles[dev][gi][ci] = (struct nvmlDevice_st){dev, gi, ci};
    return &mig_handles[dev][gi][ci];
}

/* The GPU behind a GPU handle, with its MIG state and profile table. */
nvmlReturn_t mig_gpu(nvmlDevice_t h, struct sim_device **d, struct sim_mig_gpu **m,
                            struct sim_mig_table *t)
{
    nvmlReturn_t rc = sim_nvml_device(h, d);
    if (rc != NVML_SUCCESS)
        return rc;
    if (h->gi >= 0)
        return NVML_ERROR_INVALID_ARGUMENT; /* a MIG device is not a GPU */
    if (sim_mig_table_of(*d, t) < 0 || !(*m = sim_mig_of(*d)))
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* A live GPU instance behind its handle; the caller holds the lock. */
struct sim_mig_gi *live_gi(nvmlGpuInstance_t g, struct sim_device **d,
                                  struct sim_mig_table *t)
{
    if (!g || g < &gi_handles[0][0] || g >= &gi_handles[0][0] + SIM_MAX_DEVICES * SIM_MIG_GIS)
        return NULL;
    struct sim_mig_gpu *m;
    if (mig_gpu(sim_nvml_handle(g->dev), d, &m, t) != NVML_SUCCESS)
        return NULL;
    return m->gis[g->gi].live ? &m->gis[g->gi] : NULL;
}

struct sim_mig_ci *live_ci(nvmlComputeInstance_t c, struct sim_mig_gi **gi,
                                  struct sim_device **d, struct sim_mig_table *t)
{
    if (!c || c < &ci_handles[0][0][0] ||
        c >= &ci_handles[0][0][0] + SIM_MAX_DEVICES * SIM_MIG_GIS * SIM_MIG_CIS)
        return NULL;
    *gi = live_gi(gi_handle(c->dev, c->gi), d, t);
    return *gi && (*gi)->cis[c->ci].live ? &(*gi)->cis[c->ci] : NULL;
}

nvmlReturn_t sim_nvml_mig_device(nvmlDevice_t h, struct sim_device **out)
{
    if (h < &mig_handles[0][0][0] ||
        h >= &mig_handles[0][0][0] + SIM_MAX_DEVICES * SIM_MIG_GIS * SIM_MIG_CIS)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct sim_device *d;
    struct sim_mig_table t;
    sim_lock();
    struct sim_mig_gi *gi = live_gi(gi_handle(h->index, h->gi), &d, &t);
    int ok = gi && gi->cis[h->ci].live;
    *out = ok ? sim_mig_record(gi->record) : NULL;
    sim_unlock();
    return ok ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

const char *sim_nvml_mig_uuid(nvmlDevice_t h)
{
    if (h->gi < 0)
        return NULL;
    struct sim_mig_gpu *m = sim_mig_of(sim_device(h->index));
    return m ? m->gis[h->gi].cis[h->ci].uuid : NULL;
}

nvmlReturn_t sim_nvml_mig_by_uuid(const char *uuid, nvmlDevice_t *out)
{
    int gpu, gi, ci;
    nvmlReturn_t rc = NVML_ERROR_NOT_FOUND;
    sim_lock();
    if (sim_mig_find_uuid_locked(uuid, &gpu, &gi, &ci) == 0)
        for (int i = 0; i < sim_device_count(); i++)
            if ((int)sim_device(i)->index == gpu) {
                *out = mig_handle(i, gi, ci);
                rc = NVML_SUCCESS;
            }
    sim_unlock();
    return rc;
}

/* ---- mode ---- */

SIM_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int *current,
                                          unsigned int *pending)
{
    struct sim_device *d;
    struct sim_mig_gpu *m;
    struct sim_mig_table t;
    nvmlReturn_t rc = mig_gpu(h, &d, &m, &t);
    if (rc == NVML_SUCCESS && (!current || !pending))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    sim_lock();
    sim_mig_settle_locked(d);
    *current = m->mode_current;
    *pending = m->mode_pending;
    sim_unlock();
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t h, unsigned int mode,
                                          nvmlReturn_t *activationStatus)
{
    struct sim_device *d;
    struct sim_mig_gpu *m;
    struct sim_mig_table t;
    nvmlReturn_t rc = mig_gpu(h, &d, &m, &t);
    if (rc == NVML_SUCCESS && (!activationStatus || mode > SIM_MIG_ENABLE))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    sim_lock();
    for (int i = 0; i < SIM_MIG_GIS && mode == SIM_MIG_DISABLE; i++)
        if (m->gis[i].live)
            rc = NVML_ERROR_IN_USE; /* its instances must be destroyed first */
    if (rc == NVML_SUCCESS) {
        m->mode_pending = mode;
        sim_mig_settle_locked(d);
        *activationStatus = m->mode_current == mode ? NVML_SUCCESS : NVML_ERROR_IN_USE;
    }
    sim_unlock();
    return rc;
}

/* ---- GPU-instance profiles and placements ---- */

static void fill_profile(const struct sim_mig_profile *p, nvmlGpuInstanceProfileInfo_t *info)
{
    *info = (nvmlGpuInstanceProfileInfo_t){
        .id = p->id, .sliceCount = p->compute_slices, .instanceCount = p->instances,
        .multiprocessorCount = p->sms, .copyEngineCount = p->compute_slices,
        .decoderCount = p->compute_slices > 1 ? p->compute_slices / 2 + 1 : p->media,
        .jpegCount = p->media || p->compute_slices == 7, .ofaCount = p->media ||
        p->compute_slices == 7, .memorySizeMB = p->memory_mib};
}

static nvmlReturn_t profile_info(nvmlDevice_t h, unsigned int index,
                                 nvmlGpuInstanceProfileInfo_t *info, char *name)
{
    struct sim_device *d;
    struct sim_mig_gpu *m;
    struct sim_mig_table t;
    nvmlReturn_t rc = mig_gpu(h, &d, &m, &t);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!info || index >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct sim_mig_profile *p = sim_mig_by_index(&t, index);
    if (!p)
        return NVML_ERROR_NOT_SUPPORTED;
    fill_profile(p, info);
    if (name)
        snprintf(name, NVML_DEVICE_NAME_V2_BUFFER_SIZE, "MIG %s", p->name);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t h, unsigned int profile,
                                                         nvmlGpuInstanceProfileInfo_t *info)
{
    return profile_info(h, profile, info, NULL);
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t h, unsigned int profile,
                                                          nvmlGpuInstanceProfileInfo_v2_t *info)
{
    nvmlGpuInstanceProfileInfo_t v1;
    if (info && info->version != nvmlGpuInstanceProfileInfo_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t rc = profile_info(h, profile, info ? &v1 : NULL, info ? info->name : NULL);
    if (rc == NVML_SUCCESS) {
        info->id = v1.id;
        memcpy(&info->isP2pSupported, &v1.isP2pSupported,
               offsetof(nvmlGpuInstanceProfileInfo_t, memorySizeMB) -
                   offsetof(nvmlGpuInstanceProfileInfo_t, isP2pSupported));
        info->memorySizeMB = v1.memorySizeMB;
    }
    return rc;
}

static int overlaps(uint32_t s1, uint32_t n1, uint32_t s2, uint32_t n2)
{
    return s1 < s2 + n2 && s2 < s1 + n1;
}

/* Whether memory slices [start, start + size) are free on the GPU; caller holds the lock. */
int slices_free(const struct sim_mig_gpu *m, uint32_t start, uint32_t size)
{
    for (int i = 0; i < SIM_MIG_GIS; i++)
        if (m->gis[i].live && overlaps(start, size, m->gis[i].start, m->gis[i].size))
            return 0;
    return 1;
}

int instances_of(const struct sim_mig_gpu *m, uint32_t profile_id)
{
    int n = 0;
    for (int i = 0; i < SIM_MIG_GIS; i++)
        n += m->gis[i].live && m->gis[i].profile_id == profile_id;
    return n;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t h, unsigned int profileId, nvmlGpuInstancePlacement_t *placements,
    unsigned int *count)
{
    struct sim_device *d;
    struct sim_mig_gpu *m;
    struct sim_mig_table t;
    nvmlReturn_t rc = mig_gpu(h, &d, &m, &t);
    if (rc != NVML_SUCCESS)
        return rc;
    const struct sim_mig_profile *p = sim_mig_by_id(&t, profileId);
    if (!count || !p)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (placements) {
        if (*count < p->count) {
            *count = p->count;
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        for (uint32_t i = 0; i < p->count; i++)
            placements[i] = (nvmlGpuInstancePlacement_t){p->starts[i], p->size};
    }
    *count = p->count;
    return NVML_SUCCESS;
}

/* How many more instances of `p` fit, placing each at the first free placement. */
static unsigned int remaining(struct sim_mig_gpu *m, const struct sim_mig_profile *p)
{
    struct sim_mig_gpu trial = *m;
    int left = (int)p->instances - instances_of(m, p->id), n = 0, slot = 0;
    for (uint32_t i = 0; i < p->count && n < left; i++) {
        if (!slices_free(&trial, p->starts[i], p->size))
            continue;
        while (slot < SIM_MIG_GIS && trial.gis[slot].live)
            slot++;
        if (slot == SIM_MIG_GIS)
            break;
        trial.gis[slot] = (struct sim_mig_gi){.live = 1, .start = p->starts[i], .size = p->size};
        n++;
    }
    return (unsigned int)n;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t h,
                                                               unsigned int profileId,
                                                               unsigned int *count)
{
    struct sim_device *d;
    struct sim_mig_gpu *m;
    struct sim_mig_table t;
    nvmlReturn_t rc = mig_gpu(h, &d, &m, &t);
    if (rc != NVML_SUCCESS)
        return rc;
    const struct sim_mig_profile *p = sim_mig_by_id(&t, profileId);
    if (!count || !p)
        return NVML_ERROR_INVALID_ARGUMENT;
    sim_lock();
    sim_mig_settle_locked(d);
    *count = m->mode_current == SIM_MIG_ENABLE ? remaining(m, p) : 0;
    sim_unlock();
    return NVML_SUCCESS;
}
