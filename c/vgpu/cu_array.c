/* CUDA arrays and mipmapped arrays: device memory sized from their descriptors (width x
 * height x depth x channels x element size, every level of a mipmap, each level halving every
 * dimension down to 1), rounded as the driver rounds allocations. */
#include "vgpu.h"

/* Bytes per channel of a format; the largest one for formats the header does not list, so an
 * unknown format is over-counted rather than escaping the limit. */
static uint64_t element_bytes(CUarray_format f)
{
    size_t bytes = hami_array_format_bytes(f);
    return bytes ? bytes : 16;
}

/* Bytes of `levels` levels of an array; 0 when the descriptor is empty or absurd (the driver
 * then refuses it). */
static uint64_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels)
{
    uint64_t total = 0, per = element_bytes(d->Format) * (d->NumChannels ? d->NumChannels : 1);
    for (unsigned int l = 0; l < levels && l < 64; l++) {
        uint64_t w = d->Width >> l, h = (d->Height ? d->Height : 1) >> l,
                 z = (d->Depth ? d->Depth : 1) >> l;
        w = w ? w : 1;
        h = h ? h : 1;
        z = z ? z : 1;
        if (d->Width == 0 || w > (1ULL << 24) || h > (1ULL << 24) || z > (1ULL << 24))
            return 0;
        total += w * h * z * per;
    }
    return vgpu_driver_size(total);
}

/* The record to charge an object of `bytes` to: the current context's device; -1 (not
 * counted, the driver answers alone) without a handle to write or with nothing to count. */
static int record_for(const void *handle, uint64_t bytes)
{
    CUresult rc;
    int rec = vgpu_current_record(&rc);
    return handle && bytes ? rec : -1;
}

CUresult hook_cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *p)
{
    uint64_t bytes = 0;
    if (p) {
        CUDA_ARRAY3D_DESCRIPTOR d = {p->Width, p->Height, 0, p->Format, p->NumChannels, 0};
        bytes = array_bytes(&d, 1);
    }
    VGPU_CREATE_COUNTED(KIND_ARRAY, record_for(pHandle, bytes), bytes, pHandle,
                        CALL_CU(cuArrayCreate_v2, pHandle, p));
}

CUresult hook_cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *p)
{
    uint64_t bytes = p ? array_bytes(p, 1) : 0;
    VGPU_CREATE_COUNTED(KIND_ARRAY, record_for(pHandle, bytes), bytes, pHandle,
                        CALL_CU(cuArray3DCreate_v2, pHandle, p));
}

CUresult hook_cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *p,
                                     unsigned int levels)
{
    uint64_t bytes = p ? array_bytes(p, levels) : 0;
    VGPU_CREATE_COUNTED(KIND_MIPMAP, record_for(pHandle, bytes), bytes, pHandle,
                        CALL_CU(cuMipmappedArrayCreate, pHandle, p, levels));
}

CUresult hook_cuArrayDestroy(CUarray hArray)
{
    VGPU_RELEASE_COUNTED(KIND_ARRAY, hArray, CALL_CU(cuArrayDestroy, hArray));
}

CUresult hook_cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    VGPU_RELEASE_COUNTED(KIND_MIPMAP, h, CALL_CU(cuMipmappedArrayDestroy, h));
}
