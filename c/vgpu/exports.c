/* Everything generated from the hook lists in hooks.h: the symbol name table, the real and
 * hook address tables, and the exported wrappers, the only symbols libvgpu.so exports besides
 * dlsym (-fvisibility=hidden; VGPU_EXPORT marks them). A wrapper
 *   - passes a re-entrant call (vgpu_guard set) straight to the real function;
 *   - initialises once (pthread_once) and, for gated hooks, returns the fail-closed error when
 *     the configuration was refused;
 *   - runs hook_<SYMBOL> with the guard set, so nothing the hook calls is intercepted again.
 */
#include <string.h>

#include "vgpu.h"

void *vgpu_real[SYM_COUNT];

#define NAME_ROW(sym, ...) [SYM_##sym] = #sym,
static const char *const names[SYM_COUNT] = {
    VGPU_CUDA_ROUTES(NAME_ROW) VGPU_CUDA_HOOKS(NAME_ROW) VGPU_CUDA_USES(NAME_ROW)
    VGPU_NVML_HOOKS(NAME_ROW) VGPU_NVML_USES(NAME_ROW)
};

#define HOOK_ROW(sym, ...) [SYM_##sym] = (void *)&sym,
/* The exported wrappers' addresses; NULL for the symbols the shim only calls. */
static void *const hooks[SYM_COUNT] = {
    VGPU_CUDA_ROUTES(HOOK_ROW) VGPU_CUDA_HOOKS(HOOK_ROW) VGPU_NVML_HOOKS(HOOK_ROW)
};

const char *vgpu_sym_name(enum vgpu_sym s) { return names[s]; }

void *vgpu_hook_address(const char *name)
{
    for (int i = 0; i < SYM_COUNT; i++)
        if (hooks[i] && strcmp(names[i], name) == 0)
            return hooks[i];
    return NULL;
}

void *vgpu_hook_for_real(const void *real)
{
    for (int i = 0; i < SYM_CUDA_COUNT; i++)
        if (hooks[i] && vgpu_real_fn((enum vgpu_sym)i) == real)
            return hooks[i];
    return NULL;
}

/* The real function for a re-entrant call, typed like the hooked one. */
#define PASSTHROUGH(sym, args, missing)                                                        \
    do {                                                                                       \
        __typeof__(&sym) real_ = (__typeof__(&sym))vgpu_passthrough(SYM_##sym);                \
        return real_ ? real_ args : missing;                                                   \
    } while (0)

/* One exported wrapper: `gate` initialises and says whether the hook may run (`ok`). */
#define WRAPPER(type, ok, gate, missing, sym, params, args)                                    \
    VGPU_EXPORT type sym params                                                                \
    {                                                                                          \
        if (VGPU_UNLIKELY(vgpu_guard))                                                         \
            PASSTHROUGH(sym, args, missing);                                                   \
        vgpu_guard = 1;                                                                        \
        type rc_ = gate;                                                                       \
        if (__builtin_expect(rc_ == ok, 1))                                                    \
            rc_ = hook_##sym args;                                                             \
        vgpu_guard = 0;                                                                        \
        return rc_;                                                                            \
    }

/* Routes initialise inside the hook (they never fail closed); hooks pass the gate first. */
#define CU_ROUTE_WRAPPER(sym, params, args)                                                    \
    WRAPPER(CUresult, CUDA_SUCCESS, CUDA_SUCCESS, CUDA_ERROR_NOT_FOUND, sym, params, args)
#define CU_HOOK_WRAPPER(sym, params, args)                                                     \
    WRAPPER(CUresult, CUDA_SUCCESS, vgpu_cuda_ready(), CUDA_ERROR_NOT_FOUND, sym, params, args)
#define NVML_HOOK_WRAPPER(sym, params, args)                                                   \
    WRAPPER(nvmlReturn_t, NVML_SUCCESS, vgpu_nvml_ready(), NVML_ERROR_FUNCTION_NOT_FOUND, sym,   \
            params, args)

VGPU_CUDA_ROUTES(CU_ROUTE_WRAPPER)
VGPU_CUDA_HOOKS(CU_HOOK_WRAPPER)
VGPU_NVML_HOOKS(NVML_HOOK_WRAPPER)
