/* Simulated NVML: MIG device handles — enumerate a GPU's MIG devices, their instance ids, and
 * the way back to the GPU. Memory, processes, name and UUID of a MIG device handle are
 * answered by the ordinary device queries (nvml_device.c, nvml_monitor.c) from its GPU
 * instance's record. */
#include "nvml_internal.h"

SIM_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t h, unsigned int *isMig)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(h, &d, isMig);
    if (rc == NVML_SUCCESS)
        *isMig = h->gi >= 0;
    return rc;
}

static nvmlReturn_t instance_id(nvmlDevice_t h, unsigned int *id, int compute)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(h, &d, id);
    if (rc != NVML_SUCCESS)
        return rc;
    if (h->gi < 0)
        return NVML_ERROR_INVALID_ARGUMENT; /* a GPU has no instance id */
    struct sim_mig_gpu *m = sim_mig_of(sim_device(h->index));
    sim_lock();
    *id = compute ? m->gis[h->gi].cis[h->ci].id : m->gis[h->gi].id;
    sim_unlock();
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t h, unsigned int *id)
{
    return instance_id(h, id, 0);
}

SIM_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t h, unsigned int *id)
{
    return instance_id(h, id, 1);
}

SIM_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned int *count)
{
    struct sim_device *d;
    struct sim_mig_gpu *m;
    struct sim_mig_table t;
    nvmlReturn_t rc = mig_gpu(h, &d, &m, &t);
    if (rc == NVML_SUCCESS && !count)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *count = SIM_MIG_GIS;
    return rc;
}

SIM_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned int index,
                                                         nvmlDevice_t *mig)
{
    struct sim_device *d;
    struct sim_mig_gpu *m;
    struct sim_mig_table t;
    nvmlReturn_t rc = mig_gpu(h, &d, &m, &t);
    if (rc == NVML_SUCCESS && !mig)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    rc = NVML_ERROR_NOT_FOUND;
    unsigned int n = 0;
    sim_lock();
    for (int i = 0; i < SIM_MIG_GIS && rc != NVML_SUCCESS; i++)
        for (int c = 0; m->gis[i].live && c < SIM_MIG_CIS && rc != NVML_SUCCESS; c++)
            if (m->gis[i].cis[c].live && n++ == index) {
                *mig = mig_handle(h->index, i, c);
                rc = NVML_SUCCESS;
            }
    sim_unlock();
    return rc;
}

SIM_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig,
                                                                  nvmlDevice_t *device)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(mig, &d, device);
    if (rc == NVML_SUCCESS && mig->gi < 0)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *device = sim_nvml_handle(mig->index);
    return rc;
}
