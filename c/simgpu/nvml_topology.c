/* Where a device sits: its handle by PCI bus ID, and its links to other devices. Simulated
 * devices have no NVLink and no fabric (a PCIe-only machine): those queries say not
 * supported, as NVML does on such GPUs; clients (PyTorch's out-of-memory report among them)
 * only need the functions to exist and answer. */
#include <stdio.h>

#include "nvml_internal.h"

static nvmlReturn_t handle_by_bus_id(const char *bus_id, nvmlDevice_t *device)
{
    nvmlDevice_t first = sim_nvml_handle(0);
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device(first, &d); /* initialised? */
    if (rc == NVML_ERROR_UNINITIALIZED)
        return rc;
    if (!bus_id || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int domain = 0, bus = 0, dev = 0, function = 0;
    if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &function) != 4 &&
        sscanf(bus_id, "%x:%x.%x", &bus, &dev, &function) != 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < sim_device_count(); i++) {
        if (domain == 0 && dev == 0 && function == 0 && sim_device(i)->pci_bus == bus) {
            *device = sim_nvml_handle(i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *id, nvmlDevice_t *device)
{
    return handle_by_bus_id(id, device);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *id, nvmlDevice_t *device)
{
    return handle_by_bus_id(id, device);
}

SIM_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t h, unsigned int link,
                                                         nvmlPciInfo_t *pci)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(h, &d, pci);
    (void)link;
    return rc == NVML_SUCCESS ? NVML_ERROR_NOT_SUPPORTED : rc;
}

SIM_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t h, unsigned int link,
                                                         nvmlIntNvLinkDeviceType_t *type)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(h, &d, type);
    (void)link;
    return rc == NVML_SUCCESS ? NVML_ERROR_NOT_SUPPORTED : rc;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t h, nvmlGpuFabricInfoV_t *info)
{
    struct sim_device *d;
    nvmlReturn_t rc = sim_nvml_device_arg(h, &d, info);
    return rc == NVML_SUCCESS ? NVML_ERROR_NOT_SUPPORTED : rc;
}
