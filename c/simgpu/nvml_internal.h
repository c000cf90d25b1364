/* Objects and helpers shared by the simulated NVML's files. */
#ifndef HAMI_SIM_NVML_INTERNAL_H
#define HAMI_SIM_NVML_INTERNAL_H

#include "hami_nvml.h"
#include "sim.h"

/* A device handle is the address of one of these; it only carries the index. */
struct nvmlDevice_st {
    int index;
};

/* The device behind a handle, or why there is none (uninitialised, bad handle). */
nvmlReturn_t sim_nvml_device(nvmlDevice_t h, struct sim_device **out);
nvmlDevice_t sim_nvml_handle(int index);
/* sim_nvml_device, and NVML_ERROR_INVALID_ARGUMENT when the output pointer `out_arg` is NULL. */
nvmlReturn_t sim_nvml_device_arg(nvmlDevice_t h, struct sim_device **out, const void *out_arg);

#endif /* HAMI_SIM_NVML_INTERNAL_H */
