/* The driver's private export tables (cuGetExportTable), shared by cu_export.c and the files
 * that implement their slots. */
#ifndef HAMI_SIM_CU_EXPORT_H
#define HAMI_SIM_CU_EXPORT_H

#include <stdint.h>

#include "hami_cuda.h"

enum sim_table {
    SIM_TABLE_CUDART,          /* 6bd5fb6c-...: modules from fat binaries, primary contexts */
    SIM_TABLE_TOOLS_HOOKS,     /* a094798c-...: profiler callback hooks (none registered) */
    SIM_TABLE_TOOLS_TLS,       /* 42d85a81-...: the calling thread's context for tools */
    SIM_TABLE_CTX_STORAGE,     /* c693336e-...: per-context values of the runtime */
    SIM_TABLE_CTX_CHECKS,      /* 263e8860-...: context sanity checks */
    SIM_TABLE_INTEGRITY,       /* d4082055-...: the runtime's driver self-test */
    SIM_TABLE_CTX_IDENTITY,    /* 21318c60-...: context IDs (cuBLAS, cuFFT) */
    SIM_TABLE_COUNT
};

/* Where a table starts (its address is part of what the integrity digest covers). */
const void *sim_export_table_address(enum sim_table t);

/* integrity.c: the keyed digest the runtime expects for `request` at `unix_seconds`;
 * `function` is the address of the slot that answers. */
CUresult sim_integrity_answer(uint32_t request, uint64_t unix_seconds, uint64_t out[2],
                              const void *function);

#endif /* HAMI_SIM_CU_EXPORT_H */
