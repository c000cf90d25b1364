/* Simulated NVML: compute instances (profiles, placements, create, destroy, list, info) and
 * MIG device handles. A compute instance is a MIG device with a UUID of its own; the first
 * compute instance of a GPU instance names its device record, which is what CUDA opens. */
#include <stdio.h>
#include <string.h>

#include "nvml_internal.h"

static void profile_name(const struct sim_mig_gi *gi, const struct sim_mig_table *t,
                         uint32_t slices, char *name)
{
    const struct sim_mig_profile *p = sim_mig_by_id(t, gi->profile_id);
    if (slices == gi->compute_slices)
        snprintf(name, NVML_DEVICE_NAME_V2_BUFFER_SIZE, "MIG %s", p ? p->name : "?");
    else
        snprintf(name, NVML_DEVICE_NAME_V2_BUFFER_SIZE, "MIG %uc.%s", slices, p ? p->name : "?");
}

static nvmlReturn_t ci_profile(nvmlGpuInstance_t g, unsigned int profile, unsigned int eng,
                               nvmlComputeInstanceProfileInfo_t *info, char *name)
{
    struct sim_device *d;
    struct sim_mig_table t;
    uint32_t starts[SIM_MIG_COMPUTE_SLICES];
    if (!info || eng != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED ||
        profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    sim_lock();
    struct sim_mig_gi *gi = live_gi(g, &d, &t);
    nvmlReturn_t rc = gi ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
    int n = gi ? sim_mig_ci_starts(profile, gi->compute_slices, starts) : 0;
    if (gi && !n)
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS) {
        uint32_t k = sim_mig_ci_slices(profile);
        *info = (nvmlComputeInstanceProfileInfo_t){
            .id = profile, .sliceCount = k, .instanceCount = (unsigned int)n,
            .multiprocessorCount = gi->sms * k / gi->compute_slices,
            .sharedCopyEngineCount = gi->compute_slices};
        if (name)
            profile_name(gi, &t, k, name);
    }
    sim_unlock();
    return rc;
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t g, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_t *info)
{
    return ci_profile(g, profile, engProfile, info, NULL);
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t g, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_v2_t *info)
{
    nvmlComputeInstanceProfileInfo_t v1;
    if (info && info->version != nvmlComputeInstanceProfileInfo_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t rc = ci_profile(g, profile, engProfile, info ? &v1 : NULL,
                                 info ? info->name : NULL);
    if (rc == NVML_SUCCESS)
        memcpy(&info->id, &v1, sizeof v1); /* the same fields, after `version` */
    return rc;
}

static int ci_free(const struct sim_mig_gi *gi, uint32_t start, uint32_t size)
{
    for (int c = 0; c < SIM_MIG_CIS; c++)
        if (gi->cis[c].live && start < gi->cis[c].start + gi->cis[c].size &&
            gi->cis[c].start < start + size)
            return 0;
    return 1;
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(
    nvmlGpuInstance_t g, unsigned int profileId, nvmlComputeInstancePlacement_t *placements,
    unsigned int *count)
{
    struct sim_device *d;
    struct sim_mig_table t;
    uint32_t starts[SIM_MIG_COMPUTE_SLICES];
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    sim_lock();
    struct sim_mig_gi *gi = live_gi(g, &d, &t);
    int n = gi ? sim_mig_ci_starts(profileId, gi->compute_slices, starts) : 0;
    sim_unlock();
    if (!gi || !n)
        return gi ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
    if (placements && *count < (unsigned int)n) {
        *count = (unsigned int)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; placements && i < n; i++)
        placements[i] = (nvmlComputeInstancePlacement_t){starts[i], sim_mig_ci_slices(profileId)};
    *count = (unsigned int)n;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
    nvmlGpuInstance_t g, unsigned int profileId, unsigned int *count)
{
    struct sim_device *d;
    struct sim_mig_table t;
    uint32_t starts[SIM_MIG_COMPUTE_SLICES], k = sim_mig_ci_slices(profileId);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    sim_lock();
    struct sim_mig_gi *gi = live_gi(g, &d, &t);
    int n = gi ? sim_mig_ci_starts(profileId, gi->compute_slices, starts) : 0;
    unsigned int free = 0, last_end = 0;
    for (int i = 0; i < n; i++)
        if (ci_free(gi, starts[i], k) && starts[i] >= last_end) {
            free++;
            last_end = starts[i] + k;
        }
    sim_unlock();
    if (!gi)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = free;
    return n ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* The record's UUID follows its first live compute instance (CUDA names it by that). */
static void name_record(struct sim_mig_gi *gi)
{
    struct sim_device *rec = sim_mig_record(gi->record);
    rec->uuid[0] = '\0';
    for (int c = SIM_MIG_CIS - 1; c >= 0; c--)
        if (gi->cis[c].live)
            memcpy(rec->uuid, gi->cis[c].uuid, sizeof rec->uuid);
}

static nvmlReturn_t create_ci(nvmlGpuInstance_t g, unsigned int profileId,
                              const nvmlComputeInstancePlacement_t *placement,
                              nvmlComputeInstance_t *out)
{
    struct sim_device *d;
    struct sim_mig_table t;
    uint32_t starts[SIM_MIG_COMPUTE_SLICES], k = sim_mig_ci_slices(profileId);
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    sim_lock();
    struct sim_mig_gi *gi = live_gi(g, &d, &t);
    int n = gi ? sim_mig_ci_starts(profileId, gi->compute_slices, starts) : 0, slot = -1;
    nvmlReturn_t rc = !gi ? NVML_ERROR_INVALID_ARGUMENT : !n ? NVML_ERROR_NOT_SUPPORTED
                                                            : NVML_ERROR_INSUFFICIENT_RESOURCES;
    uint32_t start = 0;
    for (int i = 0; i < n && slot < 0; i++) {
        if (placement && (placement->start != starts[i] || placement->size != k))
            continue;
        if (!ci_free(gi, starts[i], k))
            continue;
        for (int c = SIM_MIG_CIS - 1; c >= 0; c--)
            if (!gi->cis[c].live)
                slot = c;
        start = starts[i];
    }
    if (slot >= 0) {
        struct sim_mig_gpu *m = sim_mig_of(d);
        uint32_t id = 0;
        for (int c = 0; c < SIM_MIG_CIS; c++) /* the lowest id not in use */
            for (int x = 0; x < SIM_MIG_CIS; x++)
                if (gi->cis[x].live && gi->cis[x].id == id)
                    id++, c = -1;
        char key[SIM_UUID_LEN + 64];
        snprintf(key, sizeof key, "%s/mig/%llu/%u/%d", d->uuid,
                 (unsigned long long)m->serial++, gi->id, slot);
        struct sim_mig_ci *ci = &gi->cis[slot];
        *ci = (struct sim_mig_ci){.live = 1, .id = id, .profile_id = profileId,
                                  .start = start, .size = k,
                                  .sms = gi->sms * k / gi->compute_slices};
        sim_uuid_of(ci->uuid, sizeof ci->uuid, "MIG", key);
        name_record(gi);
        *out = ci_handle(g->dev, g->gi, slot);
        rc = NVML_SUCCESS;
    }
    sim_unlock();
    return rc;
}

SIM_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t g,
                                                          unsigned int profileId,
                                                          nvmlComputeInstance_t *ci)
{
    return create_ci(g, profileId, NULL, ci);
}

SIM_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(
    nvmlGpuInstance_t g, unsigned int profileId, const nvmlComputeInstancePlacement_t *placement,
    nvmlComputeInstance_t *ci)
{
    return placement ? create_ci(g, profileId, placement, ci) : NVML_ERROR_INVALID_ARGUMENT;
}

SIM_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t c)
{
    struct sim_device *d;
    struct sim_mig_table t;
    struct sim_mig_gi *gi;
    nvmlReturn_t rc = NVML_SUCCESS;
    sim_lock();
    struct sim_mig_ci *ci = live_ci(c, &gi, &d, &t);
    if (!ci)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (sim_busy_procs_locked(sim_mig_record(gi->record)) > 0)
        rc = NVML_ERROR_IN_USE; /* processes run on it */
    else {
        memset(ci, 0, sizeof *ci);
        name_record(gi);
    }
    sim_unlock();
    return rc;
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t g,
                                                        unsigned int profileId,
                                                        nvmlComputeInstance_t *cis,
                                                        unsigned int *count)
{
    struct sim_device *d;
    struct sim_mig_table t;
    if (!cis || !count || profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    sim_lock();
    struct sim_mig_gi *gi = live_gi(g, &d, &t);
    for (int c = 0; gi && c < SIM_MIG_CIS; c++)
        if (gi->cis[c].live && gi->cis[c].profile_id == profileId)
            cis[n++] = ci_handle(g->dev, g->gi, c);
    sim_unlock();
    *count = n;
    return gi ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t g, unsigned int id,
                                                           nvmlComputeInstance_t *out)
{
    struct sim_device *d;
    struct sim_mig_table t;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = NVML_ERROR_NOT_FOUND;
    sim_lock();
    struct sim_mig_gi *gi = live_gi(g, &d, &t);
    for (int c = 0; gi && c < SIM_MIG_CIS; c++)
        if (gi->cis[c].live && gi->cis[c].id == id) {
            *out = ci_handle(g->dev, g->gi, c);
            rc = NVML_SUCCESS;
        }
    sim_unlock();
    return gi ? rc : NVML_ERROR_INVALID_ARGUMENT;
}

static nvmlReturn_t ci_info(nvmlComputeInstance_t c, nvmlComputeInstanceInfo_t *info)
{
    struct sim_device *d;
    struct sim_mig_table t;
    struct sim_mig_gi *gi;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    sim_lock();
    struct sim_mig_ci *ci = live_ci(c, &gi, &d, &t);
    if (ci)
        *info = (nvmlComputeInstanceInfo_t){
            .device = sim_nvml_handle(c->dev), .gpuInstance = gi_handle(c->dev, c->gi),
            .id = ci->id, .profileId = ci->profile_id, .placement = {ci->start, ci->size}};
    sim_unlock();
    return ci ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

SIM_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t c,
                                                   nvmlComputeInstanceInfo_t *info)
{
    return ci_info(c, info);
}

SIM_API nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t c,
                                                nvmlComputeInstanceInfo_t *info)
{
    return ci_info(c, info);
}
