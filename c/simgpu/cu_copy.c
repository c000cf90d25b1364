/* Copies and sets. Data moves at call time (kernels never touch memory in the simulator);
 * synchronous variants first wait for the context's queued work, as copies on the legacy
 * default stream do. The _ptds/_ptsz variants differ only in what stream 0 means. */
#include <string.h>

#include "cu_internal.h"

/* Validates the context (and the stream for async calls) and waits where required. */
static CUresult prepare(int async, CUstream h, int per_thread)
{
    struct CUctx_st *c = NULL;
    CUresult rc = sim_require_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (async) {
        struct CUstream_st *s = NULL;
        return sim_stream(h, per_thread, &s);
    }
    sim_ctx_wait(c);
    return CUDA_SUCCESS;
}

static CUresult copy(void *dst, const void *src, size_t n, int async, CUstream h, int pt)
{
    CUresult rc = prepare(async, h, pt);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (n && (!dst || !src))
        return CUDA_ERROR_INVALID_VALUE;
    if (n)
        memmove(dst, src, n);
    return CUDA_SUCCESS;
}

static CUresult set(CUdeviceptr dst, unsigned int value, unsigned int width, size_t n, int async,
                    CUstream h, int pt)
{
    CUresult rc = prepare(async, h, pt);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (n && !dst)
        return CUDA_ERROR_INVALID_VALUE;
    if (width == 1) {
        memset((void *)(uintptr_t)dst, (int)(value & 0xff), n);
    } else if (width == 2) {
        uint16_t *p = (uint16_t *)(uintptr_t)dst;
        for (size_t i = 0; i < n; i++)
            p[i] = (uint16_t)value;
    } else {
        uint32_t *p = (uint32_t *)(uintptr_t)dst;
        for (size_t i = 0; i < n; i++)
            p[i] = value;
    }
    return CUDA_SUCCESS;
}

#define DPTR(x) ((void *)(uintptr_t)(x))

/* Each API in its legacy (pt = 0) and per-thread (pt = 1) flavour. */
#define COPY_PAIR(name, ptname, dsttype, srctype, dstexpr, srcexpr)                           \
    SIM_API CUresult name(dsttype dst, srctype src, size_t n)                                 \
    {                                                                                         \
        return copy(dstexpr, srcexpr, n, 0, NULL, 0);                                         \
    }                                                                                         \
    SIM_API CUresult ptname(dsttype dst, srctype src, size_t n)                               \
    {                                                                                         \
        return copy(dstexpr, srcexpr, n, 0, NULL, 1);                                         \
    }

#define COPY_ASYNC_PAIR(name, ptname, dsttype, srctype, dstexpr, srcexpr)                     \
    SIM_API CUresult name(dsttype dst, srctype src, size_t n, CUstream h)                     \
    {                                                                                         \
        return copy(dstexpr, srcexpr, n, 1, h, 0);                                            \
    }                                                                                         \
    SIM_API CUresult ptname(dsttype dst, srctype src, size_t n, CUstream h)                   \
    {                                                                                         \
        return copy(dstexpr, srcexpr, n, 1, h, 1);                                            \
    }

COPY_PAIR(cuMemcpy, cuMemcpy_ptds, CUdeviceptr, CUdeviceptr, DPTR(dst), DPTR(src))
COPY_PAIR(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds, CUdeviceptr, const void *, DPTR(dst), src)
COPY_PAIR(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds, void *, CUdeviceptr, dst, DPTR(src))
COPY_PAIR(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds, CUdeviceptr, CUdeviceptr, DPTR(dst), DPTR(src))
COPY_ASYNC_PAIR(cuMemcpyAsync, cuMemcpyAsync_ptsz, CUdeviceptr, CUdeviceptr, DPTR(dst), DPTR(src))
COPY_ASYNC_PAIR(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz, CUdeviceptr, const void *,
                DPTR(dst), src)
COPY_ASYNC_PAIR(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz, void *, CUdeviceptr, dst,
                DPTR(src))
COPY_ASYNC_PAIR(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz, CUdeviceptr, CUdeviceptr,
                DPTR(dst), DPTR(src))

#define SET_PAIR(name, ptname, type, width)                                                   \
    SIM_API CUresult name(CUdeviceptr dst, type v, size_t n)                                  \
    {                                                                                         \
        return set(dst, v, width, n, 0, NULL, 0);                                             \
    }                                                                                         \
    SIM_API CUresult ptname(CUdeviceptr dst, type v, size_t n)                                \
    {                                                                                         \
        return set(dst, v, width, n, 0, NULL, 1);                                             \
    }

#define SET_ASYNC_PAIR(name, ptname, type, width)                                             \
    SIM_API CUresult name(CUdeviceptr dst, type v, size_t n, CUstream h)                      \
    {                                                                                         \
        return set(dst, v, width, n, 1, h, 0);                                                \
    }                                                                                         \
    SIM_API CUresult ptname(CUdeviceptr dst, type v, size_t n, CUstream h)                    \
    {                                                                                         \
        return set(dst, v, width, n, 1, h, 1);                                                \
    }

SET_PAIR(cuMemsetD8_v2, cuMemsetD8_v2_ptds, unsigned char, 1)
SET_PAIR(cuMemsetD16_v2, cuMemsetD16_v2_ptds, unsigned short, 2)
SET_PAIR(cuMemsetD32_v2, cuMemsetD32_v2_ptds, unsigned int, 4)
SET_ASYNC_PAIR(cuMemsetD8Async, cuMemsetD8Async_ptsz, unsigned char, 1)
SET_ASYNC_PAIR(cuMemsetD16Async, cuMemsetD16Async_ptsz, unsigned short, 2)
SET_ASYNC_PAIR(cuMemsetD32Async, cuMemsetD32Async_ptsz, unsigned int, 4)

/* 2D copies: rows of WidthInBytes, each side at its own pitch. Arrays are not modelled as
 * copy endpoints (see docs/simgpu.md). */
static const uint8_t *endpoint(CUmemorytype type, const void *host, CUdeviceptr dev)
{
    switch (type) {
    case CU_MEMORYTYPE_HOST: return host;
    case CU_MEMORYTYPE_DEVICE: case CU_MEMORYTYPE_UNIFIED: return DPTR(dev);
    default: return NULL;
    }
}

static CUresult copy2d(const CUDA_MEMCPY2D *p, int async, CUstream h, int pt)
{
    CUresult rc = prepare(async, h, pt);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
        sim_driver_log("cuMemcpy2D: copies to or from arrays are not modelled by the simulated "
                       "driver");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    const uint8_t *src = endpoint(p->srcMemoryType, p->srcHost, p->srcDevice);
    uint8_t *dst = (uint8_t *)endpoint(p->dstMemoryType, p->dstHost, p->dstDevice);
    if (!p->WidthInBytes || !p->Height)
        return CUDA_SUCCESS;
    if (!src || !dst || (p->Height > 1 && (p->srcPitch < p->WidthInBytes + p->srcXInBytes ||
                                           p->dstPitch < p->WidthInBytes + p->dstXInBytes)))
        return CUDA_ERROR_INVALID_VALUE;
    src += p->srcY * p->srcPitch + p->srcXInBytes;
    dst += p->dstY * p->dstPitch + p->dstXInBytes;
    for (size_t row = 0; row < p->Height; row++)
        memmove(dst + row * p->dstPitch, src + row * p->srcPitch, p->WidthInBytes);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { return copy2d(p, 0, NULL, 0); }
SIM_API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p) { return copy2d(p, 0, NULL, 1); }
SIM_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p) { return copy2d(p, 0, NULL, 0); }
SIM_API CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p)
{
    return copy2d(p, 0, NULL, 1);
}
SIM_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream h) { return copy2d(p, 1, h, 0); }
SIM_API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream h)
{
    return copy2d(p, 1, h, 1);
}
