/* Finding the real driver, the three routes into the shim, and initialisation.
 *
 * Real functions: libcuda.so.1 and libnvidia-ml.so.1 are dlopen()ed by soname (so
 * LD_LIBRARY_PATH can pick the simulator) and every symbol is resolved from those handles with
 * the REAL dlsym, found with dlvsym(RTLD_NEXT, "dlsym", <glibc version>). A handle's lookup
 * scope is the library and its dependencies, which never include the preloaded shim.
 *
 * Routes: (1) LD_PRELOAD / /etc/ld.so.preload: the exported wrappers (exports.c) interpose
 * the driver's symbols; (2) dlopen + dlsym: the exported dlsym below hands out the hook for a
 * hooked name; (3) cuGetProcAddress(_v2): the real answer is mapped to the hook serving that
 * exact ABI through the versioned entry-point table (hami_cuda_procs.h), PTDS flag included.
 *
 * Initialisation is pthread_once per stage (configuration, libcuda, libnvidia-ml, accounting),
 * reachable from every entry point, including calls made from other libraries' constructors.
 * `vgpu_guard` marks a thread that is inside the shim: a call that re-enters (from the real
 * driver, or during initialisation) goes straight to the real function and dlsym stops
 * handing out hooks, so the shim never intercepts itself.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hami_cuda_procs.h"
#include "limiter.h"
#include "vgpu.h"

extern char **environ;

__thread int vgpu_guard __attribute__((tls_model("initial-exec")));

typedef void *(*dlsym_fn)(void *, const char *);

static pthread_once_t dlsym_once = PTHREAD_ONCE_INIT, config_once = PTHREAD_ONCE_INIT,
                      cuda_once = PTHREAD_ONCE_INIT, nvml_once = PTHREAD_ONCE_INIT,
                      accounting_once = PTHREAD_ONCE_INIT;
static dlsym_fn real_dlsym;
static struct vgpu_config cfg;
static int refused;             /* configuration or accounting refused: fail closed */
static int accounting_ok;

static void find_real_dlsym(void)
{
    /* dlsym's default version differs by glibc release and architecture. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17",
                                           "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0] && !real_dlsym; i++)
        real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
}

static dlsym_fn get_real_dlsym(void)
{
    pthread_once(&dlsym_once, find_real_dlsym);
    return real_dlsym;
}

static void refuse(void)
{
    __atomic_store_n(&refused, 1, __ATOMIC_RELEASE);
}

static void config_init(void)
{
    char err[512];
    if (vgpu_config_parse(environ, &cfg, err, sizeof err) < 0) {
        vgpu_log(VGPU_LOG_ERROR, "%s; refusing to start: every CUDA call fails until it is "
                 "fixed", err);
        refuse();
        return;
    }
    vgpu_log_level(cfg.log_level);
    vgpu_limiter_init(&cfg);
}

const struct vgpu_config *vgpu_config(void)
{
    pthread_once(&config_once, config_init);
    return &cfg;
}

static void *cuda_lib, *nvml_lib;
static unsigned char missing[SYM_COUNT]; /* looked up and absent from the real library */

/* dlopen()s a real library; its symbols are resolved when first called (vgpu_resolve). */
static void *load_library(const char *soname)
{
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib || !get_real_dlsym())
        vgpu_log(VGPU_LOG_ERROR, "cannot load the real %s: %s", soname,
                 lib ? "dlsym not found in the C library" : dlerror());
    return lib;
}

static void cuda_init(void)
{
    vgpu_config();
    cuda_lib = load_library("libcuda.so.1");
}

static void nvml_init(void)
{
    vgpu_config();
    nvml_lib = load_library("libnvidia-ml.so.1");
}

void *vgpu_resolve(enum vgpu_sym s)
{
    void *lib = s < SYM_CUDA_COUNT ? cuda_lib : nvml_lib;
    dlsym_fn find = get_real_dlsym();
    if (!lib || !find || __atomic_load_n(&missing[s], __ATOMIC_RELAXED))
        return NULL;
    void *fn = find(lib, vgpu_sym_name(s)); /* racing threads store the same pointer */
    if (fn)
        __atomic_store_n(&vgpu_real[s], fn, __ATOMIC_RELAXED);
    else
        __atomic_store_n(&missing[s], 1, __ATOMIC_RELAXED);
    return fn;
}

CUresult vgpu_cuda_ready(void)
{
    pthread_once(&cuda_once, cuda_init);
    return __atomic_load_n(&refused, __ATOMIC_ACQUIRE) ? VGPU_REFUSED_CU : CUDA_SUCCESS;
}

nvmlReturn_t vgpu_nvml_ready(void)
{
    pthread_once(&nvml_once, nvml_init);
    return __atomic_load_n(&refused, __ATOMIC_ACQUIRE) ? VGPU_REFUSED_NVML : NVML_SUCCESS;
}

/* The routes load libcuda but do not fail closed: they only hand out hooks. */
static void cuda_load(void) { pthread_once(&cuda_once, cuda_init); }

static void accounting_init(void)
{
    const struct vgpu_config *c = vgpu_config();
    struct vgpu_shared *s = vgpu_shared_open(c->cache_path, c->cache_is_default ? 0600 : 0666,
                                             c->policy);
    if (!s || vgpu_ledger_init(s, c->priority, c->test_stop_in_lock) < 0) {
        refuse(); /* vgpu_shared_open said why */
        return;
    }
    accounting_ok = 1;
    vgpu_log(VGPU_LOG_INFO, "pid %d accounts in %s (limit of device 0: %llu bytes, 0 = none)",
             (int)getpid(), c->cache_path, (unsigned long long)c->mem_limit[0]);
}

CUresult vgpu_accounting_ready(void)
{
    pthread_once(&accounting_once, accounting_init);
    return accounting_ok ? CUDA_SUCCESS : VGPU_REFUSED_CU;
}

void *vgpu_passthrough(enum vgpu_sym s)
{
    void *fn = vgpu_resolve(s);
    if (fn)
        return fn;
    dlsym_fn find = get_real_dlsym(); /* called before initialisation: whoever is next */
    return find ? find(RTLD_NEXT, vgpu_sym_name(s)) : NULL;
}

/* Route 2: dlopen("libcuda.so.1") + dlsym(handle, "cuMemAlloc_v2") gets the hook. Every other
 * lookup is a tail call to the real dlsym, so RTLD_NEXT keeps meaning "after the caller". */
VGPU_EXPORT void *dlsym(void *handle, const char *symbol)
{
    dlsym_fn find = get_real_dlsym();
    if (VGPU_UNLIKELY(!find))
        return NULL;
    if (vgpu_guard || (strncmp(symbol, "cu", 2) != 0 && strncmp(symbol, "nvml", 4) != 0))
        return find(handle, symbol);
    void *real = find(handle, symbol);
    void *hook = real ? vgpu_hook_address(symbol) : NULL;
    return hook ? hook : real;
}

/* Route 3: the driver's answer, replaced by the hook for the ABI it serves. */
static CUresult route(CUresult rc, const char *api, void **pfn, int version, cuuint64_t flags)
{
    if (rc != CUDA_SUCCESS || !api || !pfn || !*pfn)
        return rc;
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const char *symbol = hami_cuda_proc_symbol(api, version, per_thread, NULL);
    void *hook = symbol ? vgpu_hook_address(symbol) : NULL;
    if (!hook) /* an ABI the table does not list: recognise the real function itself */
        hook = vgpu_hook_for_real(*pfn);
    if (hook)
        *pfn = hook;
    return rc;
}

CUresult hook_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    cuda_load();
    return route(CALL_CU(cuGetProcAddress, symbol, pfn, cudaVersion, flags), symbol, pfn,
                 cudaVersion, flags);
}

CUresult hook_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    cuda_load();
    return route(CALL_CU(cuGetProcAddress_v2, symbol, pfn, cudaVersion, flags, symbolStatus),
                 symbol, pfn, cudaVersion, flags);
}
