/* cuGetProcAddress: the shared table (hami_cuda_procs.h) says which symbol serves an API at
 * the requested version and stream flavour; this file maps symbols to this library's
 * implementations. A symbol the table knows but the simulator lacks is NOT_FOUND. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"
#include "hami_cuda_procs.h"

/* Every exported entry point of the simulated libcuda. */
#define SIM_CUDA_EXPORTS(X) \
    X(cuInit) \
    X(cuDriverGetVersion) \
    X(cuGetErrorName) \
    X(cuGetErrorString) \
    X(cuGetProcAddress) \
    X(cuGetProcAddress_v2) \
    X(cuDeviceGet) \
    X(cuDeviceGetCount) \
    X(cuDeviceGetName) \
    X(cuDeviceGetUuid) \
    X(cuDeviceGetUuid_v2) \
    X(cuDeviceTotalMem_v2) \
    X(cuDeviceGetAttribute) \
    X(cuDeviceGetPCIBusId) \
    X(cuDeviceGetDefaultMemPool) \
    X(cuDeviceGetMemPool) \
    X(cuDeviceSetMemPool) \
    X(cuDevicePrimaryCtxRetain) \
    X(cuDevicePrimaryCtxRelease_v2) \
    X(cuDevicePrimaryCtxReset_v2) \
    X(cuDevicePrimaryCtxGetState) \
    X(cuDevicePrimaryCtxSetFlags_v2) \
    X(cuCtxCreate_v2) \
    X(cuCtxCreate_v3) \
    X(cuCtxCreate_v4) \
    X(cuCtxDestroy_v2) \
    X(cuCtxSetCurrent) \
    X(cuCtxGetCurrent) \
    X(cuCtxPushCurrent_v2) \
    X(cuCtxPopCurrent_v2) \
    X(cuCtxGetDevice) \
    X(cuCtxGetDevice_v2) \
    X(cuCtxSynchronize) \
    X(cuCtxSynchronize_v2) \
    X(cuMemGetInfo_v2) \
    X(cuMemAlloc_v2) \
    X(cuMemAllocPitch_v2) \
    X(cuMemFree_v2) \
    X(cuMemGetAddressRange_v2) \
    X(cuMemAllocManaged) \
    X(cuMemAllocHost_v2) \
    X(cuMemHostAlloc) \
    X(cuMemFreeHost) \
    X(cuMemcpy) \
    X(cuMemcpy_ptds) \
    X(cuMemcpyAsync) \
    X(cuMemcpyAsync_ptsz) \
    X(cuMemcpyHtoD_v2) \
    X(cuMemcpyHtoD_v2_ptds) \
    X(cuMemcpyDtoH_v2) \
    X(cuMemcpyDtoH_v2_ptds) \
    X(cuMemcpyDtoD_v2) \
    X(cuMemcpyDtoD_v2_ptds) \
    X(cuMemcpyHtoDAsync_v2) \
    X(cuMemcpyHtoDAsync_v2_ptsz) \
    X(cuMemcpyDtoHAsync_v2) \
    X(cuMemcpyDtoHAsync_v2_ptsz) \
    X(cuMemcpyDtoDAsync_v2) \
    X(cuMemcpyDtoDAsync_v2_ptsz) \
    X(cuMemsetD8_v2) \
    X(cuMemsetD8_v2_ptds) \
    X(cuMemsetD16_v2) \
    X(cuMemsetD16_v2_ptds) \
    X(cuMemsetD32_v2) \
    X(cuMemsetD32_v2_ptds) \
    X(cuMemsetD8Async) \
    X(cuMemsetD8Async_ptsz) \
    X(cuMemsetD16Async) \
    X(cuMemsetD16Async_ptsz) \
    X(cuMemsetD32Async) \
    X(cuMemsetD32Async_ptsz) \
    X(cuMemAllocAsync) \
    X(cuMemAllocAsync_ptsz) \
    X(cuMemFreeAsync) \
    X(cuMemFreeAsync_ptsz) \
    X(cuMemAllocFromPoolAsync) \
    X(cuMemAllocFromPoolAsync_ptsz) \
    X(cuMemPoolCreate) \
    X(cuMemPoolDestroy) \
    X(cuMemPoolSetAttribute) \
    X(cuMemPoolGetAttribute) \
    X(cuMemPoolTrimTo) \
    X(cuMemCreate) \
    X(cuMemRelease) \
    X(cuMemAddressReserve) \
    X(cuMemAddressFree) \
    X(cuMemMap) \
    X(cuMemUnmap) \
    X(cuMemSetAccess) \
    X(cuMemGetAllocationGranularity) \
    X(cuArrayCreate_v2) \
    X(cuArray3DCreate_v2) \
    X(cuArrayGetDescriptor_v2) \
    X(cuArray3DGetDescriptor_v2) \
    X(cuArrayDestroy) \
    X(cuMipmappedArrayCreate) \
    X(cuMipmappedArrayDestroy) \
    X(cuStreamCreate) \
    X(cuStreamCreateWithPriority) \
    X(cuStreamDestroy_v2) \
    X(cuStreamSynchronize) \
    X(cuStreamSynchronize_ptsz) \
    X(cuStreamQuery) \
    X(cuStreamQuery_ptsz) \
    X(cuStreamWaitEvent) \
    X(cuStreamWaitEvent_ptsz) \
    X(cuStreamBeginCapture_v2) \
    X(cuStreamBeginCapture_v2_ptsz) \
    X(cuStreamEndCapture) \
    X(cuStreamEndCapture_ptsz) \
    X(cuThreadExchangeStreamCaptureMode) \
    X(cuDeviceGetGraphMemAttribute) \
    X(cuDeviceSetGraphMemAttribute) \
    X(cuDeviceGraphMemTrim) \
    X(cuStreamIsCapturing) \
    X(cuStreamIsCapturing_ptsz) \
    X(cuEventCreate) \
    X(cuEventRecord) \
    X(cuEventRecord_ptsz) \
    X(cuEventRecordWithFlags) \
    X(cuEventRecordWithFlags_ptsz) \
    X(cuEventQuery) \
    X(cuEventSynchronize) \
    X(cuEventDestroy_v2) \
    X(cuEventElapsedTime) \
    X(cuEventElapsedTime_v2) \
    X(cuModuleLoad) \
    X(cuModuleLoadData) \
    X(cuModuleLoadDataEx) \
    X(cuModuleUnload) \
    X(cuModuleGetFunction) \
    X(cuLibraryLoadData) \
    X(cuLibraryUnload) \
    X(cuLibraryGetKernel) \
    X(cuKernelGetFunction) \
    X(cuLaunchKernel) \
    X(cuLaunchKernel_ptsz) \
    X(cuLaunchKernelEx) \
    X(cuLaunchKernelEx_ptsz) \
    X(cuLaunchCooperativeKernel) \
    X(cuLaunchCooperativeKernel_ptsz) \
    X(cuGraphCreate) \
    X(cuGraphDestroy) \
    X(cuGraphInstantiateWithFlags) \
    X(cuGraphLaunch) \
    X(cuGraphLaunch_ptsz) \
    X(cuGraphExecDestroy) \
    /* end */

struct export {
    const char *name;
    void *fn;
};

#define EXPORT_ROW(sym) {#sym, (void *)&sym},
static const struct export exports[] = {SIM_CUDA_EXPORTS(EXPORT_ROW)};

static void *implementation(const char *symbol)
{
    for (size_t i = 0; i < sizeof exports / sizeof exports[0]; i++)
        if (strcmp(exports[i].name, symbol) == 0)
            return exports[i].fn;
    return NULL;
}

static CUresult proc_address(const char *api, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!api || !pfn || (flags & ~(cuuint64_t)3))
        return CUDA_ERROR_INVALID_VALUE;
    enum hami_proc_lookup result;
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const char *symbol = hami_cuda_proc_symbol(api, version, per_thread, &result);
    *pfn = symbol ? implementation(symbol) : NULL;
    if (*pfn)
        found = CU_GET_PROC_ADDRESS_SUCCESS;
    else if (result == HAMI_PROC_TOO_OLD)
        found = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    if (status)
        *status = found;
    static int log = -1; /* HAMI_SIM_LOG_PROCS=1: trace every lookup (finding what a client needs) */
    if (log < 0)
        log = getenv("HAMI_SIM_LOG_PROCS") != NULL;
    if (log)
        fprintf(stderr, "hami-sim: cuGetProcAddress(%s, %d, %llu) -> %s\n", api, version,
                (unsigned long long)flags, *pfn ? symbol : "NOT_FOUND");
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags)
{
    return proc_address(symbol, pfn, cudaVersion, flags, NULL);
}

SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    return proc_address(symbol, pfn, cudaVersion, flags, status);
}
