/* Modules and libraries: images loaded by the application (cuModuleLoad*, cuLibraryLoad*) or
 * registered by the CUDA runtime (export table), their kernels and their globals.
 *
 * Loading chooses the code a real driver would run on the current device (image.h) and keeps
 * a copy; kernels are listed when first looked up (lazy loading). A kernel is found by its
 * (mangled) name, as on a real driver; a name the code lacks is CUDA_ERROR_NOT_FOUND. An image
 * that is not CUDA code at all (neither a fat binary, a cubin nor PTX) is the simulator's test
 * image: its only kernel is `spin`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cu_internal.h"
#include "image.h"

struct CUmod_st {
    uint32_t magic;
    struct sim_code code;
    pthread_mutex_t lock;
    int listed;                 /* symbols read (under lock) */
    struct sim_symbols syms;
    struct CUfunc_st *functions; /* one per kernel, once listed */
    void **global_ptrs;         /* device memory of each global, on first request */
};

/* HAMI_SIM_LOG_MODULES=1: every load and every lookup on stderr. */
static int logging(void)
{
    static int on = -1;
    if (on < 0)
        on = getenv("HAMI_SIM_LOG_MODULES") != NULL;
    return on;
}

/* `spin` takes one parameter: a uint64 of nanoseconds. */
static uint32_t spin_param_offsets[1] = {0}, spin_param_sizes[1] = {8};
static const struct sim_kernel_info spin_info = {
    (char *)"spin", 16, 0, 0, 0, 8, 1024, 1, spin_param_offsets, spin_param_sizes};

/* The device whose code a load picks: the current context's, else device 0 (libraries are
 * context-independent). */
static CUresult load_arch(int *arch)
{
    struct CUctx_st *c = NULL;
    int dev = sim_require_ctx(&c) == CUDA_SUCCESS ? c->dev : 0;
    if (dev >= sim_device_count())
        return CUDA_ERROR_NO_DEVICE;
    const struct sim_device *d = sim_device(dev);
    *arch = (int)(d->cc_major * 10 + d->cc_minor);
    return CUDA_SUCCESS;
}

/* __fatBinC_Wrapper_t: {u32 magic 0x466243B1, u32 version, data, prelinked fatbins}: what
 * the runtime registers for each object file, and hands to cuLibraryLoadData as it is. */
struct fatbin_wrapper {
    uint32_t magic, version;
    const void *data;
    const void *other;
};

static int is_wrapper(const void *image)
{
    const uint8_t *p = image; /* byte by byte: a short test image is never read past its end */
    return p[0] == 0xb1 && p[1] == 0x43 && p[2] == 0x62 && p[3] == 0x46;
}

CUresult sim_module_from_image(CUmodule *module, const void *image)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    if (is_wrapper(image)) {
        struct fatbin_wrapper w;
        memcpy(&w, image, sizeof w);
        if ((w.version != 1 && w.version != 2) || !w.data)
            return CUDA_ERROR_INVALID_IMAGE;
        image = w.data;
    }
    int arch = 0;
    if ((rc = load_arch(&arch)) != CUDA_SUCCESS)
        return rc;
    struct CUmod_st *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    char err[160];
    if (sim_code_choose(image, arch, &m->code, err, sizeof err) < 0) {
        fprintf(stderr, "hami-sim: module not loaded: %s\n", err);
        free(m);
        return strstr(err, "none of") ? CUDA_ERROR_NO_BINARY_FOR_GPU : CUDA_ERROR_INVALID_IMAGE;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->magic = MAGIC_MODULE;
    *module = m;
    if (logging())
        fprintf(stderr, "hami-sim: module %p: %s for sm_%d, %zu bytes%s\n", (void *)m,
                m->code.kind == SIM_CODE_ELF ? "cubin" : m->code.kind == SIM_CODE_PTX ? "PTX"
                                                                                      : "test image",
                m->code.arch, m->code.size, m->code.compression ? " compressed" : "");
    return CUDA_SUCCESS;
}

CUresult sim_module_from_wrapper(CUmodule *module, const void *wrapper)
{
    if (!wrapper)
        return CUDA_ERROR_INVALID_VALUE;
    if (!is_wrapper(wrapper))
        return CUDA_ERROR_INVALID_IMAGE;
    return sim_module_from_image(module, wrapper);
}

static int spin_kind(const char *name)
{
    static const char sleep_prefix[] = "_ZN2at4cuda", sleep_suffix[] = "11spin_kernelEl";
    size_t n = strlen(name), suffix = sizeof sleep_suffix - 1;
    if (strcmp(name, "spin") == 0)
        return SIM_SPIN_NS;
    if (strncmp(name, sleep_prefix, sizeof sleep_prefix - 1) == 0 && n > suffix &&
        strcmp(name + n - suffix, sleep_suffix) == 0)
        return SIM_SPIN_CYCLES;
    return SIM_SPIN_NONE;
}

/* Lists the module's kernels on first use; CUDA_SUCCESS or why the code cannot be read. */
static CUresult list(struct CUmod_st *m)
{
    if (__atomic_load_n(&m->listed, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&m->lock);
    if (!m->listed) {
        char err[160];
        if (m->code.kind == SIM_CODE_TEST) {
            m->syms.nkernels = 1;
        } else if (sim_code_symbols(&m->code, &m->syms, err, sizeof err) < 0) {
            fprintf(stderr, "hami-sim: module code unreadable: %s\n", err);
            rc = CUDA_ERROR_INVALID_IMAGE;
        }
        int n = m->syms.nkernels;
        if (rc == CUDA_SUCCESS) {
            m->functions = calloc(n ? n : 1, sizeof *m->functions);
            m->global_ptrs = calloc(m->syms.nglobals ? m->syms.nglobals : 1, sizeof(void *));
            if (!m->functions || !m->global_ptrs)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
        for (int i = 0; rc == CUDA_SUCCESS && i < n; i++) {
            struct CUfunc_st *f = &m->functions[i];
            f->magic = MAGIC_FUNC;
            f->module = m;
            f->info = m->code.kind == SIM_CODE_TEST ? &spin_info : &m->syms.kernels[i];
            f->spin = spin_kind(f->info->name);
            f->max_dynamic_shared = 48 * 1024 - (int)f->info->shared_bytes;
            f->carveout = -1;
        }
        if (rc == CUDA_SUCCESS)
            __atomic_store_n(&m->listed, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static CUresult module_of(const void *handle, struct CUmod_st **out)
{
    struct CUmod_st *m = (struct CUmod_st *)handle;
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!m || m->magic != MAGIC_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = m;
    return list(m);
}

CUresult sim_module_function(const void *handle, const char *name, struct CUfunc_st **out)
{
    struct CUmod_st *m = NULL;
    if (!out || !name)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = module_of(handle, &m);
    if (rc != CUDA_SUCCESS)
        return rc;
    for (int i = 0; i < m->syms.nkernels; i++) {
        if (strcmp(m->functions[i].info->name, name) == 0) {
            *out = &m->functions[i];
            return CUDA_SUCCESS;
        }
    }
    if (logging())
        fprintf(stderr, "hami-sim: module %p (%d kernels) has no kernel %s\n", (void *)m,
                m->syms.nkernels, name);
    return CUDA_ERROR_NOT_FOUND;
}

/* A global's device memory: allocated (and initialised from the image) on first request. */
CUresult sim_module_global(const void *handle, const char *name, CUdeviceptr *dptr,
                           size_t *bytes)
{
    struct CUmod_st *m = NULL;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = module_of(handle, &m);
    if (rc != CUDA_SUCCESS)
        return rc;
    for (int i = 0; i < m->syms.nglobals; i++) {
        const struct sim_global_info *g = &m->syms.globals[i];
        if (strcmp(g->name, name) != 0)
            continue;
        if (logging())
            fprintf(stderr, "hami-sim: module %p: global %s (%llu bytes)\n", (void *)m, name,
                    (unsigned long long)g->size);
        pthread_mutex_lock(&m->lock);
        if (!m->global_ptrs[i]) {
            size_t size = g->size ? g->size : 1;
            void *p = sim_map_memory(size);
            if (p && g->init)
                memcpy(p, g->init, g->size);
            m->global_ptrs[i] = p;
        }
        pthread_mutex_unlock(&m->lock);
        if (!m->global_ptrs[i])
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (dptr)
            *dptr = (CUdeviceptr)(uintptr_t)m->global_ptrs[i];
        if (bytes)
            *bytes = g->size;
        return CUDA_SUCCESS;
    }
    if (logging())
        fprintf(stderr, "hami-sim: module %p (%d globals) has no global %s\n", (void *)m,
                m->syms.nglobals, name);
    return CUDA_ERROR_NOT_FOUND;
}

/* cuLibraryGetKernelCount (kernels == NULL) and cuLibraryEnumerateKernels. */
CUresult sim_module_kernels(const void *handle, unsigned int *count, CUkernel *kernels,
                            unsigned int max)
{
    struct CUmod_st *m = NULL;
    CUresult rc = module_of(handle, &m);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (count)
        *count = (unsigned int)m->syms.nkernels;
    for (unsigned int i = 0; kernels && i < max && i < (unsigned int)m->syms.nkernels; i++)
        kernels[i] = (CUkernel)&m->functions[i];
    return CUDA_SUCCESS;
}

CUresult sim_module_unload(void *handle)
{
    struct CUmod_st *m = handle;
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!m || m->magic != MAGIC_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Functions of an unloaded module become invalid handles; the memory stays mapped so
     * that a stale handle is refused instead of read after free. */
    m->magic = MAGIC_DEAD;
    for (int i = 0; m->functions && i < m->syms.nkernels; i++)
        m->functions[i].magic = MAGIC_DEAD;
    for (int i = 0; m->global_ptrs && i < m->syms.nglobals; i++)
        if (m->global_ptrs[i])
            munmap(m->global_ptrs[i], m->syms.globals[i].size ? m->syms.globals[i].size : 1);
    sim_code_free(&m->code);
    return CUDA_SUCCESS;
}

int sim_function_name(const struct CUfunc_st *f, const char **name)
{
    if (!f || f->magic != MAGIC_FUNC)
        return -1;
    *name = f->info->name;
    return 0;
}

CUmodule sim_function_module(const struct CUfunc_st *f) { return f->module; }

/* ---- the public entry points ---- */

CUresult sim_module_from_file(CUmodule *module, const char *fname)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(fname, "rb");
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    do {
        if (len + 65536 + 1 > cap) {
            char *grown = realloc(buf, cap = (len + 65536 + 1) * 2);
            if (!grown) {
                free(buf);
                fclose(f);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            buf = grown;
        }
        n = fread(buf + len, 1, 65536, f);
        len += n;
    } while (n > 0);
    fclose(f);
    buf[len] = '\0';
    rc = sim_module_from_image(module, buf);
    free(buf);
    return rc;
}

SIM_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    return sim_module_from_file(module, fname);
}

SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    return sim_module_from_image(module, image);
}

SIM_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues)
{
    (void)numOptions, (void)options, (void)optionValues;
    return sim_module_from_image(module, image);
}

SIM_API CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    return sim_module_from_image(module, fatCubin);
}

SIM_API CUresult cuModuleUnload(CUmodule hmod) { return sim_module_unload(hmod); }

SIM_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    return sim_module_function(hmod, name, (struct CUfunc_st **)hfunc);
}

SIM_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
                                      const char *name)
{
    return sim_module_global(hmod, name, dptr, bytes);
}

SIM_API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    *mode = CU_MODULE_LAZY_LOADING;
    return CUDA_SUCCESS;
}
