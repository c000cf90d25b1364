/* MIG in the simulated driver: the profile tables of the MIG-capable models (mig_profiles.c)
 * and the shared-state operations both libraries use (mig_state.c). The NVML entry points are
 * in nvml_mig.c; libcuda only resolves MIG UUIDs into device records (state.c's view).
 *
 * Units as NVML reports them: a GPU instance's placement is in memory slices (8 per GPU), its
 * profile's sliceCount in compute slices (7 per GPU); a compute instance's placement is in
 * compute slices of its GPU instance. */
#ifndef HAMI_SIM_MIG_H
#define HAMI_SIM_MIG_H

#include <stdint.h>

#include "sim_state.h"

#define SIM_MIG_MEMORY_SLICES 8
#define SIM_MIG_COMPUTE_SLICES 7
#define SIM_MIG_MAX_PLACEMENTS 7
#define SIM_MIG_DISABLE 0
#define SIM_MIG_ENABLE 1

struct sim_mig_profile {
    uint32_t index;          /* NVML_GPU_INSTANCE_PROFILE_* (what GetGpuInstanceProfileInfo takes) */
    uint32_t id;             /* the profile's unique id (what CreateGpuInstance takes) */
    const char *name;        /* "1g.5gb" */
    uint32_t compute_slices; /* sliceCount */
    uint32_t instances;      /* instanceCount: at most this many at once */
    uint32_t sms;
    uint64_t memory_mib;
    uint32_t media;          /* the "+me" variant: the GPU's one set of media engines */
    uint32_t size;           /* memory slices each placement occupies */
    uint32_t count;          /* placements */
    uint32_t starts[SIM_MIG_MAX_PLACEMENTS];
};

/* The MIG profiles of a device (NULL: the model has no MIG), with memory scaled down when the
 * simulated device was configured with less memory than the real product has. */
struct sim_mig_table {
    const char *model;
    int count;
    struct sim_mig_profile profiles[8];
};
/* Fills `out` for a device; 0, or -1 when the model is not MIG-capable. */
int sim_mig_table_of(const struct sim_device *d, struct sim_mig_table *out);
const struct sim_mig_profile *sim_mig_by_index(const struct sim_mig_table *t, uint32_t index);
const struct sim_mig_profile *sim_mig_by_id(const struct sim_mig_table *t, uint32_t id);

/* Compute-instance profiles: NVML_COMPUTE_INSTANCE_PROFILE_{1,2,3,4,7}_SLICE = 0..4. */
#define SIM_MIG_CI_PROFILES 5
uint32_t sim_mig_ci_slices(uint32_t ci_profile);
/* Placements (starts) of a compute-instance profile inside a GPU instance of `slices`
 * compute slices; returns the count (0: the profile does not fit). */
int sim_mig_ci_starts(uint32_t ci_profile, uint32_t slices, uint32_t *starts);

/* ---- shared state (mig_state.c); the caller holds the state lock unless noted ---- */
struct sim_state *sim_state_map(void);
struct sim_mig_gpu *sim_mig_of(const struct sim_device *d); /* NULL for a GPU instance */
struct sim_device *sim_mig_record(int record);
/* The GPU a GPU instance's record belongs to; NULL for a GPU (or a gone instance). */
struct sim_device *sim_mig_parent(const struct sim_device *d);
/* Applies a pending mode once no process holds the GPU. */
void sim_mig_settle_locked(struct sim_device *d);
/* Processes holding a device record (the dead reaped first). */
int sim_busy_procs_locked(struct sim_device *d);
/* The GPU instance a MIG UUID names: *gpu (record index of the physical GPU), *gi, *ci. */
int sim_mig_find_uuid_locked(const char *uuid, int *gpu, int *gi, int *ci);

/* Where a device's processes are: a GPU in MIG mode's are in its GPU instances' records
 * (NVML lists them with their instance ids), any other record's in itself. Returns how many
 * records (at most SIM_MIG_GIS) were written to `out`. */
struct sim_mig_part {
    struct sim_device *record;
    uint32_t gi_id, ci_id; /* 0xFFFFFFFF: no MIG */
};
int sim_mig_parts_locked(struct sim_device *d, struct sim_mig_part *out);

#endif /* HAMI_SIM_MIG_H */
