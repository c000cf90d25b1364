/* Device, managed and host allocations. Device pointers are host addresses of anonymous
 * MAP_NORESERVE mappings: data round-trips, and a 40 GB device costs nothing until touched. */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cu_internal.h"

uint64_t sim_alloc_size(size_t bytes)
{
    return bytes <= SIM_SMALL_LIMIT ? sim_round_up(bytes, SIM_SMALL_ALIGN)
                                    : sim_round_up(bytes, SIM_GRANULARITY);
}

void *sim_map_memory(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Charges the device, maps host memory and records the allocation. */
static CUresult device_alloc(CUdeviceptr *dptr, size_t bytes, enum sim_alloc_kind kind)
{
    struct CUctx_st *c = NULL;
    CUresult rc = sim_require_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dptr || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = sim_capture_check()) != CUDA_SUCCESS) /* synchronous allocation */
        return rc;
    uint64_t size = sim_alloc_size(bytes);
    if (size < bytes || sim_charge(c->dev, size) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = sim_map_memory(size);
    struct sim_alloc a = {(uintptr_t)p, size, size, c->dev, kind, NULL, 0, -1};
    if (!p || sim_alloc_put(&a) < 0) {
        if (p)
            munmap(p, size);
        sim_uncharge(c->dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return device_alloc(dptr, bytesize, ALLOC_DEVICE);
}

SIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes)
{
    if (!pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = sim_round_up(WidthInBytes, SIM_SMALL_ALIGN);
    if (Height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = device_alloc(dptr, pitch * Height, ALLOC_DEVICE);
    if (rc == CUDA_SUCCESS)
        *pPitch = pitch;
    return rc;
}

SIM_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    /* Counted as device memory for its whole life: the simulator has no page migration. */
    return device_alloc(dptr, bytesize, ALLOC_MANAGED);
}

static CUresult host_alloc(void **pp, size_t bytes)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pp || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t size = sim_round_up(bytes, 4096);
    void *p = sim_map_memory(size);
    struct sim_alloc a = {(uintptr_t)p, size, 0, -1, ALLOC_HOST, NULL, 0, -1};
    if (!p || sim_alloc_put(&a) < 0) {
        if (p)
            munmap(p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return host_alloc(pp, bytesize); }

SIM_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                            CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, bytesize);
}

/* Frees a device, managed or host allocation starting at `base`. */
static CUresult free_alloc(uintptr_t base, int host)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (base == 0)
        return CUDA_SUCCESS;
    if ((rc = sim_capture_check()) != CUDA_SUCCESS) /* synchronous free */
        return rc;
    struct sim_alloc a;
    if (sim_alloc_take(base, &a) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((a.kind == ALLOC_HOST) != host) {
        sim_alloc_put(&a); /* wrong kind of free: leave the allocation alone */
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (a.kind == ALLOC_IPC) {
        sim_alloc_put(&a); /* opened from an IPC handle: cuIpcCloseMemHandle frees it */
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (a.kind == ALLOC_POOL) {
        sim_pool_release(&a);
        return CUDA_SUCCESS;
    }
    munmap((void *)a.base, a.size);
    if (a.ino) /* exported: importers may still hold it, and the charge passes to them */
        close(a.fd);
    if (a.charged && !(a.ino && sim_hold_drop(a.dev, a.ino)))
        sim_uncharge(a.dev, a.charged);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemFree_v2(CUdeviceptr dptr) { return free_alloc((uintptr_t)dptr, 0); }
SIM_API CUresult cuMemFreeHost(void *p) { return free_alloc((uintptr_t)p, 1); }

SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_alloc a;
    if (sim_alloc_find((uintptr_t)dptr, &a) < 0 || a.kind == ALLOC_HOST ||
        a.kind == ALLOC_REGISTERED)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = (CUdeviceptr)a.base;
    if (psize)
        *psize = a.size;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    struct CUctx_st *c = NULL;
    CUresult rc = sim_require_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!free || !total)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t cap = sim_device(c->dev)->total_bytes, used = sim_device_used(c->dev);
    *total = cap;
    *free = used < cap ? cap - used : 0;
    return CUDA_SUCCESS;
}
