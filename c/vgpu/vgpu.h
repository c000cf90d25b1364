/* Internal interface between the shim's files (nothing here is exported: -fvisibility=hidden).
 *
 * Layers, bottom up: env.c (configuration: pure), log.c, shared_file.c (mapping the
 * container's file), ledger.c (the accounting on it), allocmap.c (this process's pointer ->
 * size map), devices.c (CUDA ordinal / NVML handle -> device record), loader.c (real
 * libraries, dlsym, cuGetProcAddress, initialisation gates), then one file per topic of hooks.
 */
#ifndef HAMI_VGPU_H
#define HAMI_VGPU_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "hooks.h"
#include "vgpu_shared.h"

#define VGPU_EXPORT __attribute__((visibility("default")))
#define VGPU_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* CLOCK_MONOTONIC in ns: the clock of the liveness sweeps and of the compute limiter (the
 * shared file's timestamps, and hami-smi, use it too). */
static inline int64_t vgpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The error every gated call returns once the shim refused its configuration. */
#define VGPU_REFUSED_CU CUDA_ERROR_NOT_PERMITTED
#define VGPU_REFUSED_NVML NVML_ERROR_NO_PERMISSION

/* ---- configuration (env.c): pure functions of the environment's text ---- */

/* Limits given for one GPU by its UUID (HAMI_VGPU_DEVICE_<tag>=<uuid>,<memory>,<sm percent>):
 * they win over the ordinal forms, whatever ordinal the device has in a process. */
struct vgpu_uuid_limit {
    char uuid[VGPU_UUID_LEN];
    uint64_t mem;
    uint32_t sm;
};

struct vgpu_config {
    uint64_t mem_limit[VGPU_MAX_DEVICES]; /* per CUDA ordinal as the application sees it */
    uint32_t sm_limit[VGPU_MAX_DEVICES];  /* percent; 0: none */
    struct vgpu_uuid_limit by_uuid[VGPU_MAX_DEVICES];
    int n_by_uuid;
    uint64_t ctx_overhead;                /* bytes counted per context */
    char cache_path[PATH_MAX];
    int cache_is_default; /* CUDA_DEVICE_MEMORY_SHARED_CACHE unset: a private per-user file */
    int policy;           /* enum vgpu_policy */
    int priority;
    int log_level;
    int test_stop_in_lock; /* test hook: SIGSTOP inside the lock at the first charge */
};

/* "3000m", "1GiB", "1073741824": bytes. 0 on success, -1 when malformed or too large. */
int vgpu_parse_size(const char *text, uint64_t *out);
/* Reads every variable from `envp`; on failure returns -1 with one line in `err` naming it. */
int vgpu_config_parse(char *const *envp, struct vgpu_config *out, char *err, size_t errlen);
/* The limits given for a UUID, or NULL when none are. */
const struct vgpu_uuid_limit *vgpu_config_uuid(const struct vgpu_config *c, const char *uuid);

/* ---- logging (log.c): one line per message on stderr, "hami-vgpu: ..." ---- */
enum { VGPU_LOG_ERROR = 0, VGPU_LOG_WARN = 1, VGPU_LOG_INFO = 2, VGPU_LOG_DEBUG = 3 };
void vgpu_log_level(int level);
void vgpu_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the shared file (shared_file.c) ---- */
/* Maps the file at `path`, creating it (mode `mode`) or rebuilding a bad one when no live
 * process uses it. NULL when that is impossible; the reason is logged. */
struct vgpu_shared *vgpu_shared_open(const char *path, int mode, int policy);

/* ---- accounting (ledger.c) ---- */
int vgpu_ledger_init(struct vgpu_shared *s, int priority, int stop_in_lock);
/* The record for a device UUID, created with these values when new; -1 when all are taken.
 * *limit_out receives the record's limit (an existing record keeps its own). */
int vgpu_ledger_register(const char *uuid, uint64_t total, uint64_t limit, uint32_t sm,
                         uint64_t *limit_out);
int vgpu_ledger_find(const char *uuid);
/* Reserves `bytes` on a record for this process: 0, or -1 when the limit would be passed
 * (dead processes are reaped first). The check and the reservation are one atomic step. */
int vgpu_charge(int rec, uint64_t bytes);
/* Counts memory the driver already gave out (pool growth seen after the fact). */
void vgpu_charge_anyway(int rec, uint64_t bytes);
/* Returns memory; never below what this process holds on the record. */
void vgpu_uncharge(int rec, uint64_t bytes);
struct vgpu_usage {
    uint64_t total, limit, used;
};
/* A record's physical size, limit and the container's use (live processes only). */
int vgpu_usage_of(int rec, struct vgpu_usage *out);
/* Sweeps dead processes' slots if the last sweep is older than the interval (or `force`). */
void vgpu_reap(int force);
/* Claims this process's slot now (at cuInit), so start-up cost is paid once. */
int vgpu_claim_slot(void);
/* A device record of the mapped file (0 <= rec < VGPU_MAX_DEVICES). */
struct vgpu_device *vgpu_device_at(int rec);
/* This process's compute figures in its slot (a private dummy when it has no slot). */
struct vgpu_compute_figures *vgpu_my_figures(void);

/* ---- this process's allocations (allocmap.c) ---- */
enum vgpu_kind { KIND_MEMORY, KIND_HANDLE, KIND_ARRAY, KIND_MIPMAP, KIND_CONTEXT, KIND_POOL };
struct vgpu_entry {
    uint64_t bytes;
    int32_t rec;
    int32_t kind;
};
/* Records an object: 0, or 1 when (kind, key) was already there (its entry goes to
 * *replaced: the driver reused a key whose free the shim never saw), -1 out of memory. */
int vgpu_map_put(enum vgpu_kind kind, uintptr_t key, uint64_t bytes, int rec,
                 struct vgpu_entry *replaced);
/* Removes and returns an entry; -1 when there is none. */
int vgpu_map_take(enum vgpu_kind kind, uintptr_t key, struct vgpu_entry *out);
/* Forgets everything (a forked child owns none of its parent's allocations). */
void vgpu_map_reset(void);

/* ---- counted objects (counting.c) ---- */
/* Reserves before the driver is asked: CUDA_SUCCESS or CUDA_ERROR_OUT_OF_MEMORY. */
CUresult vgpu_count_begin(int rec, uint64_t bytes);
/* After the driver answered `rc`: records the object, or gives the reservation back. */
CUresult vgpu_count_end(CUresult rc, enum vgpu_kind kind, uintptr_t key, int rec, uint64_t bytes);
/* After the driver released an object taken from the map (had = 1) with answer `rc`. */
CUresult vgpu_count_release(CUresult rc, enum vgpu_kind kind, uintptr_t key, int had,
                            const struct vgpu_entry *e);
/* Body of a hook that creates a counted object of `bytes` on record `rec` (< 0: not counted,
 * the driver answers alone): reserve, ask the driver, record the key it wrote to *handle. */
#define VGPU_CREATE_COUNTED(kind, rec, bytes, handle, call)                                    \
    do {                                                                                       \
        int crec_ = (rec);                                                                     \
        if (crec_ < 0)                                                                         \
            return call;                                                                       \
        uint64_t csize_ = (bytes);                                                             \
        CUresult crc_ = vgpu_count_begin(crec_, csize_);                                       \
        if (crc_ != CUDA_SUCCESS)                                                              \
            return crc_;                                                                       \
        crc_ = call;                                                                           \
        return vgpu_count_end(crc_, kind, crc_ == CUDA_SUCCESS ? (uintptr_t) * (handle) : 0,   \
                              crec_, csize_);                                                  \
    } while (0)
/* Body of a hook that destroys a counted object: forget it, ask the driver, give back. */
#define VGPU_RELEASE_COUNTED(kind, key, call)                                                  \
    do {                                                                                       \
        struct vgpu_entry e_;                                                                  \
        int had_ = vgpu_map_take(kind, (uintptr_t)(key), &e_) == 0;                            \
        return vgpu_count_release(call, kind, (uintptr_t)(key), had_, &e_);                    \
    } while (0)

/* ---- devices (devices.c) ---- */
/* The record of a CUDA ordinal (registered on first use); -1 when unknown. */
int vgpu_record_of_ordinal(CUdevice ordinal);
/* The record of the current context's device, or -1 with *rc set (no context...). */
int vgpu_current_record(CUresult *rc);
/* The record of an NVML device (registered when the container's configuration covers it);
 * -1 when the container has no view of it. */
int vgpu_record_of_nvml(nvmlDevice_t device);
/* Rounds a request up as the driver does: 512 B up to 1 MiB, 2 MiB pages above. */
uint64_t vgpu_driver_size(uint64_t bytes);

/* ---- initialisation and gates (loader.c) ---- */
extern __thread int vgpu_guard __attribute__((tls_model("initial-exec")));
const struct vgpu_config *vgpu_config(void);
/* pthread_once initialisation of the configuration and the real libcuda / libnvidia-ml;
 * CUDA_SUCCESS / NVML_SUCCESS, or the fail-closed error. */
CUresult vgpu_cuda_ready(void);
nvmlReturn_t vgpu_nvml_ready(void);
/* Opens the shared file and claims this process's slot (once); fails closed on error. */
CUresult vgpu_accounting_ready(void);
/* A real function for a re-entrant call (from inside the shim or the driver it calls). */
void *vgpu_passthrough(enum vgpu_sym s);

/* Bytes this process holds on a record (its slot), and its host PID for the container's
 * NVML view (footprint.c finds it). */
uint64_t vgpu_my_used(int rec);
/* Changes with every charge or uncharge of this process: a figure read between two equal
 * values saw no allocation or free of this process in between. */
uint64_t vgpu_ledger_generation(void);
void vgpu_ledger_set_host_pid(int32_t host_pid);
/* The container's live processes: up to `max` (container pid, host pid) pairs. */
int vgpu_ledger_processes(int32_t *pids, int32_t *host_pids, int max);

/* ---- the driver's own figure for this process (footprint.c) ---- */
/* Around a context's creation on record `rec`: the first one tells this process's host PID. */
/* `counted`: what was charged for the new context before the driver was asked. */
void vgpu_footprint_before_context(int rec);
void vgpu_footprint_after_context(int rec, uint64_t counted);
/* Before charging `bytes`: re-reads the driver's figure when stale or near the limit. */
void vgpu_footprint_check(int rec, uint64_t bytes);
/* Re-reads it now (before a refusal, at graph launch). */
void vgpu_footprint_refresh(int rec);
uint64_t vgpu_footprint_of(int rec);
unsigned int vgpu_host_pid(void);

/* ---- pools (cu_pool.c) ---- */
/* Re-reads every pool's reservation this process knows and adjusts the accounting; nothing
 * while a stream capture is in progress (pool attribute reads are unsafe then). */
void vgpu_pools_reconcile(void);
/* After a graph launch: counts the device's graph memory pool (graph memory nodes). */
void vgpu_graph_memory_settle(CUstream stream);

#endif /* HAMI_VGPU_H */
