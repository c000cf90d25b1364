/* Process-local objects of the simulated driver API and the helpers its files share. */
#ifndef HAMI_SIM_CU_INTERNAL_H
#define HAMI_SIM_CU_INTERNAL_H

#include <pthread.h>

#include "hami_cuda.h"
#include "sim.h"

/* Every handle starts with a magic number so a stale or foreign handle is refused with
 * CUDA_ERROR_INVALID_HANDLE instead of being dereferenced as something else. */
enum sim_magic {
    MAGIC_CTX = 0x43545831,
    MAGIC_STREAM = 0x53545231,
    MAGIC_EVENT = 0x45564e31,
    MAGIC_MODULE = 0x4d4f4431,
    MAGIC_FUNC = 0x46554e31,
    MAGIC_GRAPH = 0x47524131,
    MAGIC_EXEC = 0x45584531,
    MAGIC_POOL = 0x504f4f31,
    MAGIC_ARRAY = 0x41525231,
    MAGIC_PHYS = 0x50485931,
    MAGIC_MIPMAP = 0x4d495031,
    MAGIC_NODE = 0x4e4f4431,
    MAGIC_LINK = 0x4c4e4b31,
    MAGIC_DEAD = 0xdeadbeef,
};

#define SIM_GRANULARITY (2ULL << 20)  /* VMM and large-allocation page size */
#define SIM_SMALL_ALIGN 512ULL        /* alignment of small allocations and pitches */
#define SIM_SMALL_LIMIT (1ULL << 20)  /* up to here allocations round to 512 B */

struct CUstream_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    unsigned int flags;
    int priority;
    int64_t tail_ns;          /* unused since the shared timeline (timeline.h) */
    struct CUgraph_st *capture; /* non-NULL while capturing */
    unsigned long long id;    /* cuStreamGetId */
    int lane;                 /* this stream's lane on the device timeline, when lane_gen */
    uint32_t lane_gen;        /* 0: no lane yet */
};

#define SIM_LIMITS (CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED + 1) /* the CUlimit values known here */

struct CUctx_st {
    uint32_t magic;
    int dev;
    unsigned long long id;  /* cuCtxGetId: unique in the process, never reused */
    unsigned int flags;
    int primary;
    int refcount; /* primary contexts: retains */
    int64_t tail_ns; /* end of the last work queued in this context */
    struct CUstream_st null_stream;
    uint64_t module_bytes; /* module memory charged since its first kernel launch */
    size_t limits[SIM_LIMITS];   /* cuCtxSetLimit values; those never set are 0 */
    unsigned int limits_set;     /* bit per limit set */
    CUfunc_cache cache_config;
};

struct CUevent_st {
    uint32_t magic;
    unsigned int flags;
    int recorded;
    int64_t t_ns;
    int captured; /* last recorded into a capture: a graph node, safe to query */
    int dev, lane, stamped; /* recorded as operation `seq` of a lane; stamped: t_ns is known */
    uint32_t gen;
    uint64_t seq;
};

/* Kernels that wait for as long as their argument says, as they do on a real GPU: the
 * simulator's test kernel `spin(u64 ns)` and PyTorch's torch.cuda._sleep kernel
 * (at::cuda::<anonymous>::spin_kernel(long cycles), cycles at the device's clock). */
enum { SIM_SPIN_NONE = 0, SIM_SPIN_NS = 1, SIM_SPIN_CYCLES = 2 };

/* A kernel of a loaded module (cu_module.c); serves as CUfunction and as CUkernel. */
struct sim_kernel_info;
struct CUfunc_st {
    uint32_t magic;
    struct CUmod_st *module;
    const struct sim_kernel_info *info;
    int spin;               /* SIM_SPIN_*: a kernel whose duration is its argument */
    int max_dynamic_shared; /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    int carveout;           /* CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT */
    int cache_config;
};

/* A kernel node of a captured (or built) graph: a stable handle (CUgraphNode). */
struct sim_node {
    uint32_t magic;            /* MAGIC_NODE */
    struct CUgraph_st *graph;
    const struct sim_node *origin; /* in an executable graph: the node it was made from */
    int64_t duration_ns;
    struct CUfunc_st *func;    /* NULL for a node queued without a function */
    unsigned int grid[3], block[3], shmem;
};

struct CUgraph_st {
    uint32_t magic;
    int count, cap;
    struct sim_node **nodes;
    /* while it is a stream's capture (cu_graph.c) */
    CUstreamCaptureMode mode;
    pthread_t thread;  /* the thread that began the capture */
    int invalidated;   /* a prohibited call happened: cuStreamEndCapture fails */
    uint64_t alloc_bytes; /* graph memory nodes: what a launch takes from the graph pool */
    unsigned long long capture_id; /* cuStreamGetCaptureInfo: unique per capture */
};

struct CUgraphExec_st {
    uint32_t magic;
    int count;
    struct sim_node *nodes;
    uint64_t alloc_bytes;
};

/* ---- cu_device.c ---- */
/* CUDA_SUCCESS once cuInit succeeded, else the error every other call returns. */
CUresult sim_cu_ready(void);
CUresult sim_check_device(CUdevice dev);

/* The device's UUID as the 16 bytes cuDeviceGetUuid gives. */
void sim_device_uuid_bytes(int dev, uint8_t out[16]);

/* ---- device_attrs.c: cuDeviceGetAttribute's answer for a device ---- */
int sim_device_attribute(const struct sim_device *d, CUdevice_attribute a);

/* ---- cu_context.c ---- */
/* The current context, or an error when there is none. */
CUresult sim_require_ctx(struct CUctx_st **out);
/* The device's primary context object, active or not (the runtime's export table). */
CUresult sim_primary_ctx(CUcontext *pctx, CUdevice dev);
/* cuCtxGetId for `ctx` (NULL: the current context). */
CUresult sim_ctx_id(CUcontext ctx, unsigned long long *id);

/* ---- cu_logs.c: the driver's error log ---- */
/* One line for the registered callbacks and cuLogsDumpTo* (what the driver says it refused). */
void sim_driver_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- cu_missing.c: HAMI_SIM_TRAP_MISSING diagnostics ---- */
int sim_trap_missing(void);
/* A stub that names `symbol` (a static string) when called. */
void *sim_missing_stub(const char *symbol);

/* ---- cu_storage.c: the runtime's per-context values (export table) ---- */
typedef void (*sim_storage_dtor)(CUcontext, void *key, void *value);
CUresult sim_ctx_storage_put(CUcontext ctx, void *key, void *value, sim_storage_dtor dtor);
CUresult sim_ctx_storage_delete(CUcontext ctx, void *key);
CUresult sim_ctx_storage_get(void **value, CUcontext ctx, void *key);
/* The context goes (destroyed, or primary reset / released): calls the values' destructors. */
void sim_ctx_storage_release(struct CUctx_st *ctx);

/* ---- cu_module.c ---- */
CUresult sim_module_from_image(CUmodule *module, const void *image);
CUresult sim_module_from_file(CUmodule *module, const char *path);
/* `wrapper` is a __fatBinC_Wrapper_t as the runtime registers it. */
CUresult sim_module_from_wrapper(CUmodule *module, const void *wrapper);
CUresult sim_module_function(const void *module, const char *name, struct CUfunc_st **out);
CUresult sim_module_global(const void *module, const char *name, CUdeviceptr *dptr,
                           size_t *bytes);
CUresult sim_module_unload(void *module);
CUresult sim_module_kernels(const void *module, unsigned int *count, CUkernel *kernels,
                            unsigned int max);
/* The function's name (0), or -1 for an invalid handle. */
int sim_function_name(const struct CUfunc_st *f, const char **name);
CUmodule sim_function_module(const struct CUfunc_st *f);

/* Charges module memory at a context's first kernel launch (lazy loading): CUDA_SUCCESS, or
 * CUDA_ERROR_OUT_OF_MEMORY when the device has no room for it. */
CUresult sim_ctx_kernels_used(struct CUctx_st *c);

/* ---- cu_stream.c ---- */
/* Resolves a stream handle (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a created stream)
 * in the current context; `per_thread` selects what NULL means (the _ptsz/_ptds variants). */
CUresult sim_stream(CUstream h, int per_thread, struct CUstream_st **out);
/* Queues a kernel on a stream, or adds it to the graph the stream captures; a node without a
 * function (a graph replayed) takes the whole device. */
CUresult sim_stream_enqueue(struct CUstream_st *s, const struct sim_node *kernel);
/* Waits until all work of a context is done (the synchronous copies' implicit wait). */
void sim_ctx_wait(struct CUctx_st *ctx);

/* ---- cu_launch.c ---- */
/* A kernel launch's node: validated against the kernel's limits, its device time costed. */
CUresult sim_kernel_node(struct sim_node *out, CUfunction f, const unsigned int grid[3],
                         const unsigned int block[3], unsigned int shmem, int dev, void **params,
                         void **extra);

/* ---- cu_capture.c: capture modes ---- */
/* Called first by every "potentially unsafe" call: CUDA_SUCCESS, or, when a capture forbids
 * the call in this thread's mode, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED after invalidating the
 * captures concerned (as the driver does). */
CUresult sim_capture_check(void);

/* ---- cu_graph.c ---- */
/* A cuMemAllocAsync on a capturing stream: a graph memory node (its memory comes from the
 * device's graph pool when the graph is launched). */
CUresult sim_capture_alloc(CUdeviceptr *dptr, size_t bytes, struct CUstream_st *s);
struct CUgraph_st *sim_new_graph(void);
/* Adds a kernel node to a graph (a capture's); CUDA_ERROR_OUT_OF_MEMORY when it cannot. */
CUresult sim_graph_add_kernel(struct CUgraph_st *g, const struct sim_node *kernel);
void sim_graph_free(struct CUgraph_st *g);
/* ---- cu_wait.c: the process's side of the shared timeline (timeline.h) ---- */
/* Queues a kernel occupying `sms` SMs for `ns` on the stream's lane. */
CUresult sim_tl_kernel(struct CUstream_st *s, int64_t ns, uint32_t sms);
/* Queues an event record on the stream. */
CUresult sim_tl_record(struct CUstream_st *s, struct CUevent_st *e);
/* Makes the stream's later work wait for a recorded event. */
CUresult sim_tl_wait_event(struct CUstream_st *s, const struct CUevent_st *e);
/* 1 once the device reached the event (then e->t_ns is its time), else 0; a `query` does
 * not wait for the state lock (busy: 0). */
int sim_tl_event_done(struct CUevent_st *e, int query);
/* 1 when the stream has no work left. */
int sim_tl_stream_idle(struct CUstream_st *s);
/* Waits for the stream's / the event's / the context's work; spinning unless told to block. */
void sim_tl_sync_stream(struct CUstream_st *s, int spin);
void sim_tl_sync_event(struct CUevent_st *e, int spin);
void sim_tl_sync_ctx(struct CUctx_st *c, int spin);
/* The stream (or every stream of the context) goes: its lanes are freed once they drain. */
void sim_tl_forget(struct CUstream_st *s, struct CUctx_st *c);
/* Whether waits in this context spin (not created with CU_CTX_SCHED_BLOCKING_SYNC). */
int sim_ctx_spins(const struct CUctx_st *c);

/* ---- cu_pool.c ---- */
/* Returns unused pool reservations above their release thresholds (at synchronize). */
void sim_pools_trim(int dev);
/* Returns a pool allocation, already taken from the allocation table, to its pool. */
struct sim_alloc;
void sim_pool_release(const struct sim_alloc *a);

/* ---- cu_memory.c ---- */
/* Device memory rounding: 512 B up to 1 MiB, 2 MiB pages above. */
uint64_t sim_alloc_size(size_t bytes);
/* Host-backed memory that costs nothing until touched. */
void *sim_map_memory(size_t bytes);

/* ---- alloc_table.c: live allocations of this process, by base address ---- */
enum sim_alloc_kind { ALLOC_DEVICE, ALLOC_MANAGED, ALLOC_HOST, ALLOC_POOL, ALLOC_GRAPH,
                      ALLOC_REGISTERED, /* the application's host memory, page-locked */
                      ALLOC_IPC /* another process's memory, opened from a legacy IPC handle */ };
struct sim_alloc {
    uintptr_t base;
    size_t size;      /* bytes mapped */
    uint64_t charged; /* bytes counted against the device (0 for host and pool memory) */
    int dev;
    enum sim_alloc_kind kind;
    void *owner; /* the pool of an ALLOC_POOL allocation */
    uint64_t ino; /* exported or imported by legacy IPC: its memfd's inode (cu_ipc.c); else 0 */
    int fd;       /* the exporter's memfd while ino is set */
};
int sim_alloc_put(const struct sim_alloc *a);
/* Removes the allocation starting at `base` into *out; -1 when there is none. */
int sim_alloc_take(uintptr_t base, struct sim_alloc *out);
/* The allocation containing `addr`; -1 when there is none. */
int sim_alloc_find(uintptr_t addr, struct sim_alloc *out);

#endif /* HAMI_SIM_CU_INTERNAL_H */
