/* CUDA arrays and mipmapped arrays: device memory sized from the descriptor (every level of a
 * mipmapped array, each level half the previous one in every dimension, at least 1), counted
 * like any allocation. */
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

/* A mipmapped array: every level in one backing allocation. */
struct CUmipmappedArray_st {
    uint32_t magic;
    int dev;
    unsigned int levels;
    void *mem;
    uint64_t charged;
};

/* Bytes of one level of an array (0 when the descriptor is invalid or overflows). */
static uint64_t level_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int level)
{
    size_t elem = hami_array_format_bytes(d->Format);
    if (!elem || d->Width == 0 || level >= 64 ||
        (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4))
        return 0;
    size_t w = d->Width >> level, h = (d->Height ? d->Height : 1) >> level,
           z = (d->Depth ? d->Depth : 1) >> level;
    w = w ? w : 1;
    h = h ? h : 1;
    z = z ? z : 1;
    size_t row = w * elem * d->NumChannels;
    if (row / w != elem * d->NumChannels || h > SIZE_MAX / row || z > SIZE_MAX / (row * h))
        return 0;
    return row * h * z;
}

/* Charges the current context's device for `size` bytes and maps them. */
static CUresult alloc_backing(uint64_t size, int *dev, void **mem)
{
    struct CUctx_st *c = NULL;
    CUresult rc = sim_require_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (sim_charge(c->dev, size) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!(*mem = sim_map_memory(size))) {
        sim_uncharge(c->dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dev = c->dev;
    return CUDA_SUCCESS;
}

static CUresult create_array(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t bytes = level_bytes(d, 0);
    if (!out || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUarray_st *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t size = sim_alloc_size(bytes);
    rc = alloc_backing(size, &a->dev, &a->mem);
    if (rc != CUDA_SUCCESS) {
        free(a);
        return rc;
    }
    a->magic = MAGIC_ARRAY;
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

SIM_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                        const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pHandle || !desc || levels == 0 || levels > 64)
        return CUDA_ERROR_INVALID_VALUE;
    size_t longest = desc->Width > desc->Height ? desc->Width : desc->Height;
    longest = longest > desc->Depth ? longest : desc->Depth;
    if (levels > 1 && (longest >> (levels - 1)) == 0) /* more levels than halvings */
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = 0;
    for (unsigned int l = 0; l < levels; l++) {
        uint64_t b = level_bytes(desc, l);
        if (!b || bytes + b < bytes)
            return CUDA_ERROR_INVALID_VALUE;
        bytes += b;
    }
    struct CUmipmappedArray_st *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t size = sim_alloc_size(bytes);
    rc = alloc_backing(size, &m->dev, &m->mem);
    if (rc != CUDA_SUCCESS) {
        free(m);
        return rc;
    }
    m->magic = MAGIC_MIPMAP;
    m->levels = levels;
    m->charged = size;
    *pHandle = m;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray m)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!m || m->magic != MAGIC_MIPMAP)
        return CUDA_ERROR_INVALID_HANDLE;
    munmap(m->mem, m->charged);
    sim_uncharge(m->dev, m->charged);
    m->magic = MAGIC_DEAD;
    free(m);
    return CUDA_SUCCESS;
}
