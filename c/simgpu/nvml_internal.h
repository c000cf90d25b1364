/* Objects and helpers shared by the simulated NVML's files. */
#ifndef HAMI_SIM_NVML_INTERNAL_H
#define HAMI_SIM_NVML_INTERNAL_H

#include "hami_nvml.h"
#include "sim.h"

/* A device handle is the address of one of these: a GPU (gi < 0) by its index in this
 * process's view, or a MIG device (nvml_mig.c) by its GPU, GPU-instance and compute-instance
 * slots. */
struct nvmlDevice_st {
    int index;
    int gi, ci;
};

/* The device behind a handle, or why there is none (uninitialised, bad handle). */
nvmlReturn_t sim_nvml_device(nvmlDevice_t h, struct sim_device **out);
nvmlDevice_t sim_nvml_handle(int index);
/* The GPU a handle belongs to (itself, or a MIG device's parent). */
nvmlReturn_t sim_nvml_gpu(nvmlDevice_t h, struct sim_device **out);
/* nvml_mig.c: the record behind a MIG device handle (NVML_ERROR_INVALID_ARGUMENT when `h` is
 * none or its instance is gone); the MIG device a MIG UUID names among visible GPUs. */
nvmlReturn_t sim_nvml_mig_device(nvmlDevice_t h, struct sim_device **out);
nvmlReturn_t sim_nvml_mig_by_uuid(const char *uuid, nvmlDevice_t *out);
/* A MIG device handle's own UUID (its compute instance's), NULL for a GPU handle. */
const char *sim_nvml_mig_uuid(nvmlDevice_t h);
/* sim_nvml_device, and NVML_ERROR_INVALID_ARGUMENT when the output pointer `out_arg` is NULL. */
nvmlReturn_t sim_nvml_device_arg(nvmlDevice_t h, struct sim_device **out, const void *out_arg);

/* ---- MIG handles and helpers shared by nvml_mig*.c ---- */
#include "mig.h"
struct nvmlGpuInstance_st {
    int dev, gi; /* GPU by index in this view, GPU-instance slot */
};
struct nvmlComputeInstance_st {
    int dev, gi, ci;
};
nvmlGpuInstance_t gi_handle(int dev, int gi);
nvmlComputeInstance_t ci_handle(int dev, int gi, int ci);
nvmlDevice_t mig_handle(int dev, int gi, int ci);
/* The GPU behind a GPU handle, its MIG state and profile table (NOT_SUPPORTED: no MIG). */
nvmlReturn_t mig_gpu(nvmlDevice_t h, struct sim_device **d, struct sim_mig_gpu **m,
                     struct sim_mig_table *t);
/* Live instances behind handles (NULL when gone); the caller holds the lock. */
struct sim_mig_gi *live_gi(nvmlGpuInstance_t g, struct sim_device **d, struct sim_mig_table *t);
struct sim_mig_ci *live_ci(nvmlComputeInstance_t c, struct sim_mig_gi **gi,
                           struct sim_device **d, struct sim_mig_table *t);
/* Memory slices [start, start + size) free; instances of a profile; caller holds the lock. */
int slices_free(const struct sim_mig_gpu *m, uint32_t start, uint32_t size);
int instances_of(const struct sim_mig_gpu *m, uint32_t profile_id);

#endif /* HAMI_SIM_NVML_INTERNAL_H */
