/* CUDA arrays: device memory sized from the descriptor, counted like any allocation. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cu_internal.h"

struct CUarray_st {
    uint32_t magic;
    int dev;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    void *mem;
    uint64_t charged;
};

static size_t element_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT:
        return 4;
    default: return 0;
    }
}

static CUresult create_array(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    struct CUctx_st *c = NULL;
    CUresult rc = sim_require_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    size_t elem = element_bytes(d->Format);
    if (!out || !elem || d->Width == 0 ||
        (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4))
        return CUDA_ERROR_INVALID_VALUE;
    size_t h = d->Height ? d->Height : 1, z = d->Depth ? d->Depth : 1;
    size_t row = d->Width * elem * d->NumChannels;
    if (row / d->Width != elem * d->NumChannels || h > SIZE_MAX / row || z > SIZE_MAX / (row * h))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t size = sim_alloc_size(row * h * z);
    struct CUarray_st *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (sim_charge(c->dev, size) < 0) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!(a->mem = sim_map_memory(size))) {
        sim_uncharge(c->dev, size);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->magic = MAGIC_ARRAY;
    a->dev = c->dev;
    a->desc = *d;
    a->charged = size;
    *out = a;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d = {p->Width, p->Height, 0, p->Format, p->NumChannels, 0};
    return create_array(pHandle, &d);
}

SIM_API CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *p)
{
    return p ? create_array(pHandle, p) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult check_array(CUarray a)
{
    CUresult rc = sim_cu_ready();
    if (rc == CUDA_SUCCESS && (!a || a->magic != MAGIC_ARRAY))
        rc = CUDA_ERROR_INVALID_HANDLE;
    return rc;
}

SIM_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *out, CUarray a)
{
    CUresult rc = check_array(a);
    if (rc == CUDA_SUCCESS && !out)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *out = (CUDA_ARRAY_DESCRIPTOR){a->desc.Width, a->desc.Height, a->desc.Format,
                                       a->desc.NumChannels};
    return rc;
}

SIM_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *out, CUarray a)
{
    CUresult rc = check_array(a);
    if (rc == CUDA_SUCCESS && !out)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *out = a->desc;
    return rc;
}

SIM_API CUresult cuArrayDestroy(CUarray a)
{
    CUresult rc = check_array(a);
    if (rc != CUDA_SUCCESS)
        return rc;
    munmap(a->mem, a->charged);
    sim_uncharge(a->dev, a->charged);
    a->magic = MAGIC_DEAD;
    free(a);
    return CUDA_SUCCESS;
}
