/* cuGetProcAddress: the driver's table (driver_procs_table.h, every API of the real
 * cudaTypedefs.h) says which symbol serves an API at the requested version and stream flavour,
 * as a driver of SIM_CUDA_DRIVER_VERSION has them; this file maps symbols to this library's
 * implementations. An API newer than the driver, or one the simulator does not implement, is
 * NOT_FOUND with CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, as an older driver answers, so callers
 * fall back as they would there. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"
#include "driver_procs_table.h"

#include "hami_cuda_procs.h"

#define DRIVER_ROW(api, ver, flav, sym, pfn) {#api, ver, HAMI_PROC_##flav, #sym},
static const struct hami_cuda_proc driver_procs[] = {HAMI_DRIVER_PROCS(DRIVER_ROW)};

/* This library, as the dynamic linker knows it: only the API is exported (-fvisibility=hidden,
 * SIM_API), so a symbol found in it is an entry point the simulator implements. Looked up in
 * this library itself, never in a preloaded shim that interposes the same names. */
static void *self;

static void open_self(void)
{
    Dl_info info;
    if (dladdr((void *)&cuGetProcAddress_v2, &info) && info.dli_fname)
        self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
}

static void *implementation(const char *symbol)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, open_self);
    return self ? dlsym(self, symbol) : NULL;
}

static CUresult proc_address(const char *api, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!api || !pfn || (flags & ~(cuuint64_t)3))
        return CUDA_ERROR_INVALID_VALUE;
    enum hami_proc_lookup result;
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const char *symbol = hami_proc_lookup(driver_procs, sizeof driver_procs / sizeof driver_procs[0],
                                          api, version, per_thread, sim_driver_version(), &result);
    *pfn = symbol ? implementation(symbol) : NULL;
    if (!*pfn && symbol && sim_trap_missing())
        *pfn = sim_missing_stub(symbol);
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
