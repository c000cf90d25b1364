/* Modules and libraries (any image loads; only the function `spin` exists), kernel launches,
 * stream capture and graphs of captured kernels. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cu_internal.h"

struct CUmod_st {
    uint32_t magic;
};

/* `spin` is the only kernel: one object serves as CUfunction and as CUkernel. */
struct CUfunc_st {
    uint32_t magic;
};
static struct CUfunc_st spin_function = {MAGIC_FUNC};

static CUresult load(CUmodule *module, const void *image)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUmod_st *m = malloc(sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->magic = MAGIC_MODULE;
    *module = m;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    if (fname && access(fname, R_OK) != 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    return load(module, fname);
}

SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image) { return load(module, image); }

SIM_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues)
{
    (void)numOptions;
    (void)options;
    (void)optionValues;
    return load(module, image);
}

static CUresult unload(void *handle)
{
    struct CUmod_st *m = handle;
    CUresult rc = sim_cu_ready();
    if (rc == CUDA_SUCCESS && (!m || m->magic != MAGIC_MODULE))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS) {
        m->magic = MAGIC_DEAD;
        free(m);
    }
    return rc;
}

SIM_API CUresult cuModuleUnload(CUmodule hmod) { return unload(hmod); }

static CUresult get_spin(void **out, const void *handle, const char *name)
{
    const struct CUmod_st *m = handle;
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!out || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m || m->magic != MAGIC_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    if (strcmp(name, "spin") != 0)
        return CUDA_ERROR_NOT_FOUND;
    *out = &spin_function;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    return get_spin((void **)hfunc, hmod, name);
}

SIM_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                   void **jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                   unsigned int numLibraryOptions)
{
    (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
    (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
    return load((CUmodule *)library, code);
}

SIM_API CUresult cuLibraryUnload(CUlibrary library) { return unload(library); }

SIM_API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    return get_spin((void **)pKernel, library, name);
}

SIM_API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pFunc)
        return CUDA_ERROR_INVALID_VALUE;
    if ((void *)kernel != (void *)&spin_function)
        return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = &spin_function;
    return CUDA_SUCCESS;
}

/* The spin kernel's one parameter: nanoseconds, from kernelParams[0] or a packed buffer. */
static CUresult spin_ns(void **params, void **extra, uint64_t *ns)
{
    if (params && params[0]) {
        memcpy(ns, params[0], sizeof *ns);
        return CUDA_SUCCESS;
    }
    for (int i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER && extra[i + 1]) {
            memcpy(ns, extra[i + 1], sizeof *ns);
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* Occupies min(blocks, SMs) SMs for ns * ceil(blocks / SMs): each wave of blocks takes `ns`. */
static CUresult launch(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                       CUstream h, int pt, void **params, void **extra)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (f != &spin_function)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((rc = sim_ctx_kernels_used(s->ctx)) != CUDA_SUCCESS)
        return rc;
    uint64_t blocks = (uint64_t)gx * gy * gz, ns = 0;
    if (blocks == 0 || spin_ns(params, extra, &ns) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t sms = sim_device(s->ctx->dev)->sms;
    uint64_t waves = (blocks + sms - 1) / sms;
    if (ns > (uint64_t)INT64_MAX / waves)
        return CUDA_ERROR_INVALID_VALUE;
    if (s->capture)
        return sim_stream_enqueue(s, (int64_t)(ns * waves));
    /* Blocks take SMs while they run: a kernel narrower than the device leaves room beside
     * it for kernels of the context's other streams. */
    return sim_tl_kernel(s, (int64_t)(ns * waves), (uint32_t)(blocks < sms ? blocks : sms));
}

#define LAUNCH_ARGS                                                                           \
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,        \
        unsigned int by, unsigned int bz, unsigned int shmem, CUstream h, void **params
#define UNUSED_BLOCK (void)bx, (void)by, (void)bz, (void)shmem

SIM_API CUresult cuLaunchKernel(LAUNCH_ARGS, void **extra)
{
    UNUSED_BLOCK;
    return launch(f, gx, gy, gz, h, 0, params, extra);
}
SIM_API CUresult cuLaunchKernel_ptsz(LAUNCH_ARGS, void **extra)
{
    UNUSED_BLOCK;
    return launch(f, gx, gy, gz, h, 1, params, extra);
}
SIM_API CUresult cuLaunchCooperativeKernel(LAUNCH_ARGS)
{
    UNUSED_BLOCK;
    return launch(f, gx, gy, gz, h, 0, params, NULL);
}
SIM_API CUresult cuLaunchCooperativeKernel_ptsz(LAUNCH_ARGS)
{
    UNUSED_BLOCK;
    return launch(f, gx, gy, gz, h, 1, params, NULL);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra,
                          int pt)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->hStream, pt, params, extra);
}

SIM_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                  void **extra)
{
    return launch_ex(config, f, params, extra, 0);
}
SIM_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                       void **extra)
{
    return launch_ex(config, f, params, extra, 1);
}
