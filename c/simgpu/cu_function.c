/* Functions (CUfunction), kernels (CUkernel, the context-independent handles of libraries)
 * and libraries: attributes as cuFuncGetAttribute reports them from the code, the settings a
 * launch honours (dynamic shared memory), and occupancy. In this simulator a library is a
 * module and a kernel is its function, which is what the driver's handles amount to with one
 * context per device. */
#include <stdio.h>
#include <string.h>

#include "cu_internal.h"
#include "image.h"

#define SHARED_PER_SM 167936
#define SHARED_OPTIN 166912

static CUresult function_of(const void *handle, struct CUfunc_st **out)
{
    struct CUfunc_st *f = (struct CUfunc_st *)handle;
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!f || f->magic != MAGIC_FUNC)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = f;
    return CUDA_SUCCESS;
}

/* The SM version of the code a function runs (the current device's). */
static int code_arch(void)
{
    struct CUctx_st *c = NULL;
    int dev = sim_require_ctx(&c) == CUDA_SUCCESS ? c->dev : 0;
    return (int)(sim_device(dev)->cc_major * 10 + sim_device(dev)->cc_minor);
}

static CUresult get_attribute(int *pi, CUfunction_attribute a, const void *handle)
{
    struct CUfunc_st *f = NULL;
    CUresult rc = function_of(handle, &f);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    const struct sim_kernel_info *k = f->info;
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = (int)k->max_threads; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = (int)k->shared_bytes; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = (int)k->const_bytes; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = (int)k->local_bytes; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = (int)k->regs; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
        *pi = code_arch();
        break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dynamic_shared; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->carveout; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT: case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        *pi = 0;
        break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = 1; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult set_attribute(const void *handle, CUfunction_attribute a, int value)
{
    struct CUfunc_st *f = NULL;
    CUresult rc = function_of(handle, &f);
    if (rc != CUDA_SUCCESS)
        return rc;
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        /* the opt-in limit of the device, less the kernel's static shared memory */
        if (value < 0 || value + (int)f->info->shared_bytes > SHARED_OPTIN)
            return CUDA_ERROR_INVALID_VALUE;
        f->max_dynamic_shared = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (value < -1 || value > 100)
            return CUDA_ERROR_INVALID_VALUE;
        f->carveout = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        return CUDA_SUCCESS; /* clusters are not modelled: accepted, no effect on timing */
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    return get_attribute(pi, attrib, hfunc);
}

SIM_API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    return set_attribute(hfunc, attrib, value);
}

SIM_API CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel,
                                      CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    return rc == CUDA_SUCCESS ? get_attribute(pi, attrib, kernel) : rc;
}

SIM_API CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel,
                                      CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    return rc == CUDA_SUCCESS ? set_attribute(kernel, attrib, val) : rc;
}

static CUresult set_cache(const void *handle, CUfunc_cache config)
{
    struct CUfunc_st *f = NULL;
    CUresult rc = function_of(handle, &f);
    if (rc == CUDA_SUCCESS && (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        f->cache_config = config;
    return rc;
}

SIM_API CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    return set_cache(hfunc, config);
}

SIM_API CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    return rc == CUDA_SUCCESS ? set_cache(kernel, config) : rc;
}

SIM_API CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
    struct CUfunc_st *f = NULL;
    CUresult rc = function_of(hfunc, &f);
    if (rc == CUDA_SUCCESS && (config < 0 || config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE))
        rc = CUDA_ERROR_INVALID_VALUE;
    return rc; /* bank size is fixed on every GPU since Volta: accepted, no effect */
}

static CUresult get_name(const char **name, const void *handle)
{
    struct CUfunc_st *f = NULL;
    CUresult rc = function_of(handle, &f);
    if (rc == CUDA_SUCCESS && !name)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *name = f->info->name;
    return rc;
}

SIM_API CUresult cuFuncGetName(const char **name, CUfunction hfunc) { return get_name(name, hfunc); }
SIM_API CUresult cuKernelGetName(const char **name, CUkernel hfunc) { return get_name(name, hfunc); }

static CUresult get_module(void **out, const void *handle)
{
    struct CUfunc_st *f = NULL;
    CUresult rc = function_of(handle, &f);
    if (rc == CUDA_SUCCESS && !out)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *out = f->module;
    return rc;
}

SIM_API CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    return get_module((void **)hmod, hfunc);
}

SIM_API CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
    return get_module((void **)pLib, kernel);
}

SIM_API CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
    struct CUfunc_st *f = NULL;
    CUresult rc = function_of(function, &f);
    if (rc == CUDA_SUCCESS && !state)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return rc;
}

SIM_API CUresult cuFuncLoad(CUfunction function)
{
    struct CUfunc_st *f = NULL;
    return function_of(function, &f);
}

SIM_API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    struct CUfunc_st *f = NULL;
    CUresult rc = function_of(kernel, &f);
    if (rc == CUDA_SUCCESS && !pFunc)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *pFunc = f;
    return rc;
}

static CUresult param_info(const void *handle, size_t index, size_t *offset, size_t *size)
{
    struct CUfunc_st *f = NULL;
    CUresult rc = function_of(handle, &f);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (index >= f->info->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    if (offset)
        *offset = f->info->param_offsets[index];
    if (size)
        *size = f->info->param_sizes[index];
    return CUDA_SUCCESS;
}

static CUresult param_count(const void *handle, size_t *count)
{
    struct CUfunc_st *f = NULL;
    CUresult rc = function_of(handle, &f);
    if (rc == CUDA_SUCCESS && !count)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *count = f->info->nparams;
    return rc;
}

SIM_API CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                    size_t *paramSize)
{
    return param_info(func, paramIndex, paramOffset, paramSize);
}

SIM_API CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
                                      size_t *paramSize)
{
    return param_info(kernel, paramIndex, paramOffset, paramSize);
}

SIM_API CUresult cuFuncGetParamCount(CUfunction func, size_t *paramCount)
{
    return param_count(func, paramCount);
}

SIM_API CUresult cuKernelGetParamCount(CUkernel kernel, size_t *paramCount)
{
    return param_count(kernel, paramCount);
}

/* ---- libraries ---- */

SIM_API CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_module_kernels(lib, count, NULL, 0);
}

SIM_API CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int numKernels, CUlibrary lib)
{
    if (!kernels)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_module_kernels(lib, NULL, kernels, numKernels);
}

SIM_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                   void **jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                   unsigned int numLibraryOptions)
{
    (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
    (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
    return sim_module_from_image((CUmodule *)library, code);
}

SIM_API CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName,
                                       CUjit_option *jitOptions, void **jitOptionsValues,
                                       unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                                       void **libraryOptionValues, unsigned int numLibraryOptions)
{
    (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
    (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
    return sim_module_from_file((CUmodule *)library, fileName);
}

SIM_API CUresult cuLibraryUnload(CUlibrary library) { return sim_module_unload(library); }

SIM_API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    return sim_module_function(library, name, (struct CUfunc_st **)pKernel);
}

SIM_API CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
    CUresult rc = sim_cu_ready();
    if (rc == CUDA_SUCCESS && (!pMod || !library))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *pMod = (CUmodule)library;
    return rc;
}

SIM_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                                    const char *name)
{
    return sim_module_global(library, name, dptr, bytes);
}

/* ---- occupancy: threads, registers and shared memory per SM, as the hardware allots ---- */

static int active_blocks(const struct CUfunc_st *f, int block, size_t dyn)
{
    if (block <= 0 || block > (int)f->info->max_threads)
        return 0;
    int warps = (block + 31) / 32, n = 32;
    if (2048 / (warps * 32) < n)
        n = 2048 / (warps * 32);
    if (f->info->regs) {
        int per_warp = (int)((f->info->regs * 32 + 255) / 256 * 256);
        if (65536 / (per_warp * warps) < n)
            n = 65536 / (per_warp * warps);
    }
    size_t smem = f->info->shared_bytes + dyn;
    if (smem && SHARED_PER_SM / smem < (size_t)n)
        n = (int)(SHARED_PER_SM / smem);
    return n;
}

static CUresult max_active(int *num, CUfunction func, int block, size_t dyn)
{
    struct CUfunc_st *f = NULL;
    CUresult rc = function_of(func, &f);
    if (rc == CUDA_SUCCESS && (!num || block <= 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *num = active_blocks(f, block, dyn);
    return rc;
}

SIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                             int blockSize, size_t dynamicSMemSize)
{
    return max_active(numBlocks, func, blockSize, dynamicSMemSize);
}

SIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int *numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize, unsigned int flags)
{
    (void)flags;
    return max_active(numBlocks, func, blockSize, dynamicSMemSize);
}

static CUresult potential(int *min_grid, int *block_out, CUfunction func,
                          CUoccupancyB2DSize dyn_of, size_t dyn, int limit)
{
    struct CUfunc_st *f = NULL;
    CUresult rc = function_of(func, &f);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!min_grid || !block_out)
        return CUDA_ERROR_INVALID_VALUE;
    int best_block = 0, best_threads = 0, best_blocks = 0;
    int cap = (int)f->info->max_threads;
    if (limit > 0 && limit < cap)
        cap = limit;
    for (int b = cap / 32 * 32; b >= 32; b -= 32) {
        int n = active_blocks(f, b, dyn_of ? dyn_of(b) : dyn);
        if (n * b > best_threads) {
            best_threads = n * b;
            best_block = b;
            best_blocks = n;
        }
    }
    struct CUctx_st *c = NULL;
    int dev = sim_require_ctx(&c) == CUDA_SUCCESS ? c->dev : 0;
    *block_out = best_block;
    *min_grid = best_blocks * (int)sim_device(dev)->sms;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize,
                                                  CUfunction func,
                                                  CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                  size_t dynamicSMemSize, int blockSizeLimit)
{
    return potential(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                     blockSizeLimit);
}

SIM_API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(
    int *minGridSize, int *blockSize, CUfunction func, CUoccupancyB2DSize blockSizeToDynamicSMemSize,
    size_t dynamicSMemSize, int blockSizeLimit, unsigned int flags)
{
    (void)flags;
    return potential(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                     blockSizeLimit);
}

SIM_API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func,
                                                         int numBlocks, int blockSize)
{
    struct CUfunc_st *f = NULL;
    CUresult rc = function_of(func, &f);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t per_block = SHARED_PER_SM / (size_t)numBlocks;
    if (per_block > SHARED_OPTIN)
        per_block = SHARED_OPTIN;
    *dynamicSmemSize = per_block > f->info->shared_bytes ? per_block - f->info->shared_bytes : 0;
    return CUDA_SUCCESS;
}
