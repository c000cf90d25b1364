/* The one list of the symbols libvgpu.so hooks, and of the real ones it only calls.
 *
 * Each list generates, in exports.c, the enum of symbols, the name table, the table of the real
 * driver's functions (resolved with the real dlsym from the real libraries), the table of hook
 * addresses that dlsym and cuGetProcAddress hand out, and the exported wrappers themselves:
 *
 *   X(SYMBOL, (PARAMETERS), (ARGUMENTS))
 *
 * SYMBOL is the real exported name (its prototype in c/include/hami_cuda_api.h or hami_nvml.h
 * must match PARAMETERS, or the wrapper does not compile); the hook's body is
 * `hook_<SYMBOL>(ARGUMENTS)`, written in the file for its topic. tests/shim checks that every
 * CUDA symbol here is a row of the versioned entry-point table (hami_cuda_procs_table.h) and
 * that libvgpu.so exports exactly these symbols (plus dlsym).
 *
 * To hook one more function: add its row to the right list, write hook_<SYMBOL> (call the real
 * one with CALL_CU / CALL_NVML), and, for a CUDA API the table lacks, add the API to
 * c/tools/gen_cuda_procs.py and regenerate the table.
 */
#ifndef HAMI_VGPU_HOOKS_H
#define HAMI_VGPU_HOOKS_H

#include "hami_cuda.h"
#include "hami_nvml.h"

/* The parameters of cuLaunchKernel and cuLaunchCooperativeKernel (`more`: what follows
 * kernelParams, i.e. cuLaunchKernel's `extra`). */
#define VGPU_KERNEL_PARAMS(more...)                                                            \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,        \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                   \
     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams more)
#define VGPU_KERNEL_ARGS(more...)                                                              \
    (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, \
     kernelParams more)

/* Routing: they hand out hooks, so they work even when the shim has failed closed. */
#define VGPU_CUDA_ROUTES(X)                                                                    \
    X(cuGetProcAddress, (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags),     \
      (symbol, pfn, cudaVersion, flags))                                                       \
    X(cuGetProcAddress_v2,                                                                     \
      (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,                      \
       CUdriverProcAddressQueryResult *symbolStatus),                                          \
      (symbol, pfn, cudaVersion, flags, symbolStatus))

/* Gated: each returns the fail-closed error once the configuration was refused. */
#define VGPU_CUDA_HOOKS(X)                                                                     \
    /* initialisation and what the container sees */                                           \
    X(cuInit, (unsigned int Flags), (Flags))                                                    \
    X(cuDeviceTotalMem_v2, (size_t *bytes, CUdevice dev), (bytes, dev))                         \
    X(cuMemGetInfo_v2, (size_t *free, size_t *total), (free, total))                            \
    /* counted allocations (cu_memory.c) */                                                     \
    X(cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytesize), (dptr, bytesize))                    \
    X(cuMemAllocPitch_v2,                                                                      \
      (CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,                  \
       unsigned int ElementSizeBytes),                                                          \
      (dptr, pPitch, WidthInBytes, Height, ElementSizeBytes))                                   \
    X(cuMemAllocManaged, (CUdeviceptr *dptr, size_t bytesize, unsigned int flags),              \
      (dptr, bytesize, flags))                                                                  \
    X(cuMemFree_v2, (CUdeviceptr dptr), (dptr))                                                 \
    X(cuMemCreate,                                                                             \
      (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,     \
       unsigned long long flags),                                                              \
      (handle, size, prop, flags))                                                             \
    X(cuMemRelease, (CUmemGenericAllocationHandle handle), (handle))                            \
    /* VMM: memory stays counted until its last mapping goes (cu_vmm.c) */                     \
    X(cuMemMap,                                                                                \
      (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,       \
       unsigned long long flags),                                                              \
      (ptr, size, offset, handle, flags))                                                      \
    X(cuMemUnmap, (CUdeviceptr ptr, size_t size), (ptr, size))                                  \
    /* arrays (cu_array.c) */                                                                   \
    X(cuArrayCreate_v2, (CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray),        \
      (pHandle, pAllocateArray))                                                               \
    X(cuArray3DCreate_v2, (CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray),    \
      (pHandle, pAllocateArray))                                                               \
    X(cuArrayDestroy, (CUarray hArray), (hArray))                                               \
    X(cuMipmappedArrayCreate,                                                                  \
      (CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,          \
       unsigned int numMipmapLevels),                                                          \
      (pHandle, pMipmappedArrayDesc, numMipmapLevels))                                          \
    X(cuMipmappedArrayDestroy, (CUmipmappedArray hMipmappedArray), (hMipmappedArray))           \
    /* stream-ordered allocation and the points where pools shrink (cu_pool.c) */               \
    X(cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream),                  \
      (dptr, bytesize, hStream))                                                               \
    X(cuMemAllocAsync_ptsz, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream),             \
      (dptr, bytesize, hStream))                                                               \
    X(cuMemAllocFromPoolAsync,                                                                 \
      (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream),               \
      (dptr, bytesize, pool, hStream))                                                         \
    X(cuMemAllocFromPoolAsync_ptsz,                                                            \
      (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream),               \
      (dptr, bytesize, pool, hStream))                                                         \
    X(cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream))                    \
    X(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream))               \
    X(cuMemPoolCreate, (CUmemoryPool *pool, const CUmemPoolProps *poolProps),                   \
      (pool, poolProps))                                                                       \
    X(cuMemPoolDestroy, (CUmemoryPool pool), (pool))                                            \
    X(cuMemPoolTrimTo, (CUmemoryPool pool, size_t minBytesToKeep), (pool, minBytesToKeep))      \
    X(cuStreamSynchronize, (CUstream hStream), (hStream))                                       \
    X(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream))                                  \
    X(cuCtxSynchronize, (void), ())                                                             \
    X(cuCtxSynchronize_v2, (CUcontext ctx), (ctx))                                              \
    X(cuEventSynchronize, (CUevent hEvent), (hEvent))                                           \
    /* stream capture: captured launches are not charged (cu_capture.c) */                      \
    X(cuStreamBeginCapture_v2, (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode))   \
    X(cuStreamBeginCapture_v2_ptsz, (CUstream hStream, CUstreamCaptureMode mode),               \
      (hStream, mode))                                                                         \
    X(cuStreamEndCapture, (CUstream hStream, CUgraph *phGraph), (hStream, phGraph))             \
    X(cuStreamEndCapture_ptsz, (CUstream hStream, CUgraph *phGraph), (hStream, phGraph))        \
    /* contexts and their overhead (cu_context.c) */                                            \
    X(cuCtxCreate_v2, (CUcontext *pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev))  \
    X(cuCtxCreate_v3,                                                                          \
      (CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,   \
       CUdevice dev),                                                                          \
      (pctx, paramsArray, numParams, flags, dev))                                              \
    X(cuCtxCreate_v4,                                                                          \
      (CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev), \
      (pctx, ctxCreateParams, flags, dev))                                                     \
    X(cuCtxDestroy_v2, (CUcontext ctx), (ctx))                                                  \
    X(cuDevicePrimaryCtxRetain, (CUcontext *pctx, CUdevice dev), (pctx, dev))                   \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice dev), (dev))                                      \
    X(cuDevicePrimaryCtxReset_v2, (CUdevice dev), (dev))                                        \
    /* launches: through the compute limiter when a limit is set (cu_launch.c) */               \
    X(cuLaunchKernel, VGPU_KERNEL_PARAMS(, void **extra), VGPU_KERNEL_ARGS(, extra))            \
    X(cuLaunchKernel_ptsz, VGPU_KERNEL_PARAMS(, void **extra), VGPU_KERNEL_ARGS(, extra))       \
    X(cuLaunchKernelEx,                                                                        \
      (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),         \
      (config, f, kernelParams, extra))                                                        \
    X(cuLaunchKernelEx_ptsz,                                                                   \
      (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),         \
      (config, f, kernelParams, extra))                                                        \
    X(cuLaunchCooperativeKernel, VGPU_KERNEL_PARAMS(), VGPU_KERNEL_ARGS())                      \
    X(cuLaunchCooperativeKernel_ptsz, VGPU_KERNEL_PARAMS(), VGPU_KERNEL_ARGS())                 \
    X(cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream))         \
    X(cuGraphLaunch_ptsz, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream))

/* NVML: the container's view of memory (nvml.c). */
#define VGPU_NVML_HOOKS(X)                                                                     \
    X(nvmlDeviceGetMemoryInfo, (nvmlDevice_t device, nvmlMemory_t *memory), (device, memory))   \
    X(nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t device, nvmlMemory_v2_t *memory),               \
      (device, memory))                                                                        \
    X(nvmlDeviceGetComputeRunningProcesses_v3,                                                 \
      (nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos),                \
      (device, infoCount, infos))                                                              \
    X(nvmlDeviceGetComputeRunningProcesses_v2,                                                 \
      (nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos),                \
      (device, infoCount, infos))                                                              \
    X(nvmlDeviceGetComputeRunningProcesses,                                                    \
      (nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v1_t *infos),             \
      (device, infoCount, infos))

/* Real functions the shim calls but does not hook: X(SYMBOL). */
#define VGPU_CUDA_USES(X)                                                                      \
    X(cuCtxGetDevice) X(cuDeviceGetUuid_v2) X(cuDeviceGetMemPool) X(cuMemPoolGetAttribute)      \
    X(cuCtxGetCurrent) X(cuStreamIsCapturing) X(cuStreamIsCapturing_ptsz) X(cuEventCreate)      \
    X(cuEventRecord) X(cuEventRecord_ptsz) X(cuEventQuery) X(cuEventElapsedTime)                \
    X(cuEventDestroy_v2) X(cuDeviceGetGraphMemAttribute)                                       \
    X(cuCtxGetDevice_v2) X(cuDeviceGetUuid)
#define VGPU_NVML_USES(X)                                                                      \
    X(nvmlDeviceGetUUID) X(nvmlDeviceGetIndex) X(nvmlInit_v2) X(nvmlDeviceGetHandleByUUID)     \
    X(nvmlDeviceGetUtilizationRates) X(nvmlDeviceGetProcessUtilization)

/* ---- generated declarations ---- */

#define VGPU_SYM_ENUM(sym, ...) SYM_##sym,
#define VGPU_SYM_ONE(sym, ...) +1
/* CUDA symbols come first: [0, SYM_CUDA_COUNT) live in libcuda, the rest in libnvidia-ml. */
enum vgpu_sym {
    VGPU_CUDA_ROUTES(VGPU_SYM_ENUM) VGPU_CUDA_HOOKS(VGPU_SYM_ENUM) VGPU_CUDA_USES(VGPU_SYM_ENUM)
    VGPU_NVML_HOOKS(VGPU_SYM_ENUM) VGPU_NVML_USES(VGPU_SYM_ENUM)
    SYM_COUNT,
    SYM_CUDA_COUNT = 0 VGPU_CUDA_ROUTES(VGPU_SYM_ONE) VGPU_CUDA_HOOKS(VGPU_SYM_ONE)
        VGPU_CUDA_USES(VGPU_SYM_ONE)
};
#undef VGPU_SYM_ONE
#undef VGPU_SYM_ENUM

#define VGPU_DECLARE_CU_HOOK(sym, params, args) CUresult hook_##sym params;
#define VGPU_DECLARE_NVML_HOOK(sym, params, args) nvmlReturn_t hook_##sym params;
VGPU_CUDA_ROUTES(VGPU_DECLARE_CU_HOOK)
VGPU_CUDA_HOOKS(VGPU_DECLARE_CU_HOOK)
VGPU_NVML_HOOKS(VGPU_DECLARE_NVML_HOOK)
#undef VGPU_DECLARE_CU_HOOK
#undef VGPU_DECLARE_NVML_HOOK

/* The real driver's functions, by enum vgpu_sym, resolved on first use (a process pays only
 * for the functions it calls); NULL when the real library lacks one. */
extern void *vgpu_real[SYM_COUNT];
void *vgpu_resolve(enum vgpu_sym s);
static inline void *vgpu_real_fn(enum vgpu_sym s)
{
    void *fn = __atomic_load_n(&vgpu_real[s], __ATOMIC_RELAXED);
    return __builtin_expect(fn != NULL, 1) ? fn : vgpu_resolve(s);
}
/* Name of a symbol; the hook handed out for a name (NULL when not hooked). */
const char *vgpu_sym_name(enum vgpu_sym s);
void *vgpu_hook_address(const char *name);
/* The hook serving the real function at `real` (NULL when none does). */
void *vgpu_hook_for_real(const void *real);

/* Calls the real function, or answers "not found" when the real library lacks it: the shim
 * never calls a NULL pointer. */
#define REAL_FN(sym) ((__typeof__(&sym))vgpu_real_fn(SYM_##sym))
#define CALL_CU(sym, ...)                                                                      \
    ({                                                                                         \
        __typeof__(&sym) real_fn_ = REAL_FN(sym);                                              \
        real_fn_ ? real_fn_(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND;                               \
    })
#define CALL_NVML(sym, ...)                                                                    \
    ({                                                                                         \
        __typeof__(&sym) real_fn_ = REAL_FN(sym);                                              \
        real_fn_ ? real_fn_(__VA_ARGS__) : NVML_ERROR_FUNCTION_NOT_FOUND;                      \
    })

#endif /* HAMI_VGPU_HOOKS_H */
