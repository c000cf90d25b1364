/* What the driver knows about an address (cuPointerGetAttribute(s)), and host memory the
 * application registers (page-locks) with the driver. Device pointers are host addresses in
 * this simulator, so a device pointer is also its own host pointer for managed and host memory
 * only, as on a real GPU. */
#include <string.h>

#include "cu_internal.h"

static CUcontext owner_ctx(int dev)
{
    struct CUctx_st *c = NULL;
    if (sim_require_ctx(&c) == CUDA_SUCCESS && (dev < 0 || c->dev == dev))
        return c;
    CUcontext primary = NULL;
    if (dev >= 0)
        sim_primary_ctx(&primary, dev);
    return primary;
}

/* One attribute of a known allocation; CUDA_ERROR_INVALID_VALUE when it does not apply. */
static CUresult attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr,
                          const struct sim_alloc *a)
{
    int host = a->kind == ALLOC_HOST || a->kind == ALLOC_REGISTERED;
    int dev = host ? 0 : a->dev;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = owner_ctx(a->dev); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!host && a->kind != ALLOC_MANAGED)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)(uintptr_t)ptr;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(int *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = a->base; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = a->kind == ALLOC_MANAGED; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = dev; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(int *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = a->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a->size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *(unsigned long long *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: *(int *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *(unsigned int *)data = 3; break; /* read-write */
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(void **)data = a->kind == ALLOC_POOL ? a->owner : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *(size_t *)data = a->size; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *(void **)data = (void *)a->base; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: *(unsigned long long *)data = a->base; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute_,
                                       CUdeviceptr ptr)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_alloc a;
    if (!data || sim_alloc_find((uintptr_t)ptr, &a) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    return attribute(data, attribute_, ptr, &a);
}

/* Unlike cuPointerGetAttribute, an address the driver does not know is no error: every
 * attribute reads as zero (memory type 0: not CUDA memory). */
SIM_API CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                        void **data, CUdeviceptr ptr)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!attributes || !data)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_alloc a;
    int known = sim_alloc_find((uintptr_t)ptr, &a) == 0;
    for (unsigned int i = 0; i < numAttributes; i++) {
        if (!data[i])
            continue;
        if (known && attribute(data[i], attributes[i], ptr, &a) == CUDA_SUCCESS)
            continue;
        switch (attributes[i]) { /* the zero of each attribute's type */
        case CU_POINTER_ATTRIBUTE_CONTEXT: case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        case CU_POINTER_ATTRIBUTE_BUFFER_ID: case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
            memset(data[i], 0, 8);
            break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = -2; break;
        default: memset(data[i], 0, 4); break;
        }
    }
    return CUDA_SUCCESS;
}

static CUresult host_register(void *p, size_t bytesize, unsigned int Flags)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p || bytesize == 0 || (Flags & ~0x0fu))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_alloc a;
    if (sim_alloc_find((uintptr_t)p, &a) == 0 ||
        sim_alloc_find((uintptr_t)p + bytesize - 1, &a) == 0)
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    struct sim_alloc r = {(uintptr_t)p, bytesize, 0, -1, ALLOC_REGISTERED, NULL, 0, -1};
    return sim_alloc_put(&r) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    return host_register(p, bytesize, Flags);
}

SIM_API CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return host_register(p, bytesize, Flags);
}

SIM_API CUresult cuMemHostUnregister(void *p)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_alloc a;
    if (!p || sim_alloc_take((uintptr_t)p, &a) < 0)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    if (a.kind != ALLOC_REGISTERED) {
        sim_alloc_put(&a);
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    }
    return CUDA_SUCCESS;
}

static CUresult host_device_pointer(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_alloc a;
    if (!pdptr || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_alloc_find((uintptr_t)p, &a) < 0 ||
        (a.kind != ALLOC_HOST && a.kind != ALLOC_REGISTERED))
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: the same address */
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    return host_device_pointer(pdptr, p, Flags);
}

SIM_API CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_alloc a;
    if (!pFlags || sim_alloc_find((uintptr_t)p, &a) < 0 ||
        (a.kind != ALLOC_HOST && a.kind != ALLOC_REGISTERED))
        return CUDA_ERROR_INVALID_VALUE;
    *pFlags = CU_MEMHOSTALLOC_DEVICEMAP;
    return CUDA_SUCCESS;
}

/* Managed memory never migrates in the simulator (it is device memory for its whole life), so
 * prefetches and advice are checked and accepted, with no effect. */
static CUresult managed_range(CUdeviceptr ptr, size_t count)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_alloc a;
    if (!count || sim_alloc_find((uintptr_t)ptr, &a) < 0 || a.kind != ALLOC_MANAGED ||
        (uintptr_t)ptr + count > a.base + a.size)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult prefetch(CUdeviceptr ptr, size_t count, CUstream h, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    return rc == CUDA_SUCCESS ? managed_range(ptr, count) : rc;
}

SIM_API CUresult cuMemPrefetchAsync(CUdeviceptr ptr, size_t count, CUdevice dev, CUstream h)
{
    (void)dev;
    return prefetch(ptr, count, h, 0);
}
SIM_API CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr ptr, size_t count, CUdevice dev, CUstream h)
{
    (void)dev;
    return prefetch(ptr, count, h, 1);
}
SIM_API CUresult cuMemPrefetchAsync_v2(CUdeviceptr ptr, size_t count, CUmemLocation where,
                                       unsigned int flags, CUstream h)
{
    (void)where, (void)flags;
    return prefetch(ptr, count, h, 0);
}
SIM_API CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr ptr, size_t count, CUmemLocation where,
                                            unsigned int flags, CUstream h)
{
    (void)where, (void)flags;
    return prefetch(ptr, count, h, 1);
}
SIM_API CUresult cuMemAdvise(CUdeviceptr ptr, size_t count, int advice, CUdevice dev)
{
    (void)dev;
    return advice >= 1 && advice <= 6 ? managed_range(ptr, count) : CUDA_ERROR_INVALID_VALUE;
}
SIM_API CUresult cuMemAdvise_v2(CUdeviceptr ptr, size_t count, int advice, CUmemLocation where)
{
    (void)where;
    return advice >= 1 && advice <= 6 ? managed_range(ptr, count) : CUDA_ERROR_INVALID_VALUE;
}
