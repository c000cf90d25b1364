/* cuInit, what the container sees (cuMemGetInfo, cuDeviceTotalMem) and the counted
 * allocations: cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged (VMM: cu_vmm.c). Each charge is the
 * driver's own rounding of the request (512 B up to 1 MiB, 2 MiB pages above), and each free
 * returns exactly what its allocation charged (allocmap.c). */
#include "vgpu.h"

CUresult hook_cuInit(unsigned int Flags)
{
    CUresult rc = CALL_CU(cuInit, Flags);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* Map the shared file and take this process's slot now, not at the first allocation. */
    if (vgpu_accounting_ready() != CUDA_SUCCESS || vgpu_claim_slot() < 0)
        return VGPU_REFUSED_CU;
    return CUDA_SUCCESS;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

CUresult hook_cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = CALL_CU(cuDeviceTotalMem_v2, bytes, dev);
    struct vgpu_usage u;
    if (rc == CUDA_SUCCESS && vgpu_usage_of(vgpu_record_of_ordinal(dev), &u) == 0 && u.limit)
        *bytes = (size_t)min_u64(u.limit, *bytes);
    return rc;
}

CUresult hook_cuMemGetInfo_v2(size_t *free, size_t *total)
{
    CUresult rc = CALL_CU(cuMemGetInfo_v2, free, total);
    if (rc != CUDA_SUCCESS)
        return rc;
    vgpu_pools_reconcile();
    int rec = vgpu_current_record(&rc);
    vgpu_footprint_refresh(rec); /* the container's view includes what the driver spent */
    struct vgpu_usage u;
    if (vgpu_usage_of(rec, &u) < 0 || !u.limit)
        return CUDA_SUCCESS; /* no limit: the physical view */
    uint64_t limit = min_u64(u.limit, *total);
    uint64_t left = u.used < limit ? limit - u.used : 0;
    *total = (size_t)limit;
    *free = (size_t)min_u64(left, *free);
    return CUDA_SUCCESS;
}

/* cuMemAlloc and cuMemAllocManaged: charge, allocate, record. */
static CUresult alloc_counted(CUdeviceptr *dptr, size_t bytes, int managed, unsigned int flags)
{
    CUresult rc;
    int rec = vgpu_current_record(&rc);
    if (!dptr || bytes == 0) /* let the driver give its own answer */
        rec = -1;
    VGPU_CREATE_COUNTED(KIND_MEMORY, rec, vgpu_driver_size(bytes), dptr,
                        managed ? CALL_CU(cuMemAllocManaged, dptr, bytes, flags)
                                : CALL_CU(cuMemAlloc_v2, dptr, bytes));
}

CUresult hook_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return alloc_counted(dptr, bytesize, 0, 0);
}

CUresult hook_cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    /* Counted for its whole life: where the pages live is the driver's choice. */
    return alloc_counted(dptr, bytesize, 1, flags);
}

CUresult hook_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                 size_t Height, unsigned int ElementSizeBytes)
{
    CUresult rc;
    int rec = vgpu_current_record(&rc);
    if (rec < 0 || !dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
        WidthInBytes > UINT64_MAX / Height / 2)
        return CALL_CU(cuMemAllocPitch_v2, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    /* Reserve the usual pitch (512 B aligned rows), then settle on the driver's real pitch. */
    uint64_t guess = vgpu_driver_size((WidthInBytes + 511) / 512 * 512 * (uint64_t)Height);
    if ((rc = vgpu_count_begin(rec, guess)) != CUDA_SUCCESS)
        return rc;
    rc = CALL_CU(cuMemAllocPitch_v2, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (rc != CUDA_SUCCESS)
        return vgpu_count_end(rc, KIND_MEMORY, 0, rec, guess);
    uint64_t real = vgpu_driver_size((uint64_t)*pPitch * Height);
    if (real > guess && vgpu_count_begin(rec, real - guess) != CUDA_SUCCESS) {
        CALL_CU(cuMemFree_v2, *dptr);
        return vgpu_count_end(CUDA_ERROR_OUT_OF_MEMORY, KIND_MEMORY, 0, rec, guess);
    }
    if (real < guess)
        vgpu_uncharge(rec, guess - real);
    return vgpu_count_end(CUDA_SUCCESS, KIND_MEMORY, (uintptr_t)*dptr, rec, real);
}

CUresult hook_cuMemFree_v2(CUdeviceptr dptr)
{
    struct vgpu_entry e;
    int had = vgpu_map_take(KIND_MEMORY, (uintptr_t)dptr, &e) == 0;
    CUresult rc = CALL_CU(cuMemFree_v2, dptr);
    if (!had) /* maybe stream-ordered memory freed synchronously: re-read the pools */
        vgpu_pools_reconcile();
    return vgpu_count_release(rc, KIND_MEMORY, (uintptr_t)dptr, had, &e);
}
