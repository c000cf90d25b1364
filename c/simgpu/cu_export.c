/* cuGetExportTable: the driver's private tables, looked up by UUID, through which NVIDIA's CUDA
 * runtime (libcudart, also linked statically into cuBLAS, cuDNN, NCCL...) reaches what the
 * public driver API does not offer: modules from the fat binaries it registers, the primary
 * context, per-context storage, tool hooks and its self-test of the driver.
 *
 * What each table holds (UUIDs, slot positions, what a slot must do) is public knowledge from
 * projects that run the real runtime on drivers that are not NVIDIA's; this file implements it
 * from those facts. A table's slot 0 is its size in bytes, except for context storage. Slots
 * the runtimes we serve never call stay NULL. HAMI_SIM_LOG_EXPORTS=1 traces every lookup and
 * slot call on stderr (how the slots in use were found). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_export.h"
#include "cu_internal.h"

static int tracing(void)
{
    static int on = -1;
    if (on < 0)
        on = getenv("HAMI_SIM_LOG_EXPORTS") != NULL;
    return on;
}

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...)
{
    if (!tracing())
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("hami-sim: export ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- CUDART_INTERFACE ---- */

static CUresult cudart_module(CUmodule *module, const void *wrapper)
{
    CUresult rc = sim_module_from_wrapper(module, wrapper);
    trace("cudart.module(%p) -> %d", wrapper, rc);
    return rc;
}

static CUresult cudart_primary_ctx(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = sim_primary_ctx(pctx, dev);
    trace("cudart.primary_ctx(%d) -> %d", dev, rc);
    return rc;
}

static CUresult cudart_module_ext(CUmodule *module, const void *wrapper, void *a3, void *a4,
                                  unsigned int a5)
{
    CUresult rc = sim_module_from_wrapper(module, wrapper);
    trace("cudart.module_ext(%p, %p, %p, %u) -> %d", wrapper, a3, a4, a5, rc);
    return rc;
}

static CUresult cudart_slot7(size_t arg)
{
    trace("cudart.slot7(%zu)", arg);
    return CUDA_SUCCESS;
}

static CUresult cudart_module_header(const void *fatbin, CUmodule *module, void *a3, void *a4,
                                     unsigned int a5)
{
    CUresult rc = sim_module_from_image(module, fatbin);
    trace("cudart.module_header(%p, %p, %p, %u) -> %d", fatbin, a3, a4, a5, rc);
    return rc;
}

static CUresult cudart_load_compilers(void)
{
    trace("cudart.load_compilers()");
    return CUDA_SUCCESS; /* no JIT: images are never compiled here */
}

/* ---- TOOLS_RUNTIME_CALLBACK_HOOKS: no profiler is attached, so callbacks do nothing ---- */

static uint64_t hooks_area1[1024];
static uint64_t hooks_area2[16];

static void hooks_event(unsigned int event, void *data)
{
    trace("hooks.event(%u, %p)", event, data);
}

static void hooks_area(void **ptr, size_t *size, void *area, size_t n, int which)
{
    if (ptr)
        *ptr = area;
    if (size)
        *size = n;
    trace("hooks.area%d()", which);
}

static void hooks_area_1(void **ptr, size_t *size) { hooks_area(ptr, size, hooks_area1, 1024, 1); }
static void hooks_area_2(void **ptr, size_t *size) { hooks_area(ptr, size, hooks_area2, 14, 2); }

static void hooks_span(void *ctx, void *data)
{
    trace("hooks.span(%p, %p)", ctx, data);
}

/* ---- TOOLS_TLS ---- */

static CUresult tls_current_ctx(CUcontext *pctx)
{
    struct CUctx_st *c = NULL;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_require_ctx(&c);
    *pctx = rc == CUDA_SUCCESS ? c : NULL;
    trace("tls.current_ctx() -> %d", rc);
    return rc;
}

/* ---- CONTEXT_CHECKS ---- */

static CUresult checks_ctx(CUcontext ctx, unsigned int *flags, const void **detail)
{
    if (flags)
        *flags = 0;
    if (detail)
        *detail = NULL;
    trace("checks.ctx(%p)", (void *)ctx);
    return CUDA_SUCCESS;
}

static unsigned int checks_global(void)
{
    trace("checks.global()");
    return 0;
}

/* ---- INTEGRITY_CHECK ---- */

static CUresult integrity(unsigned int request, uint64_t unix_seconds, uint64_t out[2])
{
    CUresult rc = sim_integrity_answer(request, unix_seconds, out, (const void *)&integrity);
    trace("integrity(%u, %llu) -> %d", request, (unsigned long long)unix_seconds, rc);
    return rc;
}

/* ---- CONTEXT_IDENTITY: only the context ID slot; the size keeps callers off the rest ---- */

static CUresult identity_unsupported(void)
{
    trace("identity.unsupported()");
    return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult identity_ctx_id(CUcontext ctx, unsigned long long *id)
{
    CUresult rc = sim_ctx_id(ctx, id);
    trace("identity.ctx_id(%p) -> %d", (void *)ctx, rc);
    return rc;
}

/* ---- the tables ---- */

#define SIZE(n) ((void *)(uintptr_t)((n) * sizeof(void *)))
#define FN(f) ((void *)&(f))

static void *cudart[13] = {SIZE(13),         FN(cudart_module), FN(cudart_primary_ctx),
                           [6] = FN(cudart_module_ext),        [7] = FN(cudart_slot7),
                           [8] = FN(cudart_module_header),     [12] = FN(cudart_load_compilers)};
static void *tools_hooks[7] = {SIZE(7), FN(hooks_event), FN(hooks_area_1),
                               [4] = FN(hooks_span), [6] = FN(hooks_area_2)};
static void *tools_tls[4] = {SIZE(4), [2] = FN(tls_current_ctx)};
static void *ctx_storage[4] = {FN(sim_ctx_storage_put), FN(sim_ctx_storage_delete),
                               FN(sim_ctx_storage_get)};
static void *ctx_checks[4] = {SIZE(4), [2] = FN(checks_ctx), [3] = FN(checks_global)};
static void *integrity_table[3] = {SIZE(3), FN(integrity)};
static void *ctx_identity[5] = {SIZE(5), FN(identity_unsupported), FN(identity_unsupported),
                                FN(identity_unsupported), FN(identity_ctx_id)};

static const struct {
    const char *name;
    uint8_t uuid[16];
    void **slots;
} tables[SIM_TABLE_COUNT] = {
    [SIM_TABLE_CUDART] = {"cudart", {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87,
                                     0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}, cudart},
    [SIM_TABLE_TOOLS_HOOKS] = {"tools_hooks", {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74,
                                               0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66},
                               tools_hooks},
    [SIM_TABLE_TOOLS_TLS] = {"tools_tls", {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82,
                                           0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc}, tools_tls},
    [SIM_TABLE_CTX_STORAGE] = {"ctx_storage", {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11,
                                               0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93},
                               ctx_storage},
    [SIM_TABLE_CTX_CHECKS] = {"ctx_checks", {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43,
                                             0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e},
                              ctx_checks},
    [SIM_TABLE_INTEGRITY] = {"integrity", {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d,
                                           0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},
                             integrity_table},
    [SIM_TABLE_CTX_IDENTITY] = {"ctx_identity", {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48,
                                                 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2},
                                ctx_identity},
};

const void *sim_export_table_address(enum sim_table t) { return tables[t].slots; }

SIM_API CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    const uint8_t *id = (const uint8_t *)pExportTableId->bytes;
    for (int t = 0; t < SIM_TABLE_COUNT; t++) {
        if (memcmp(id, tables[t].uuid, 16) == 0) {
            *ppExportTable = tables[t].slots;
            trace("table %s", tables[t].name);
            return CUDA_SUCCESS;
        }
    }
    /* Unknown tables (f8cff951-... among them, which the CUDA 13 runtime asks for first and
     * does without) are refused as a driver without them refuses them. */
    *ppExportTable = NULL;
    trace("table {%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x}: none",
          id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11],
          id[12], id[13], id[14], id[15]);
    return CUDA_ERROR_NOT_FOUND;
}
