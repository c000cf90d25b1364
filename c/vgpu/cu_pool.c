/* Stream-ordered allocation: what counts is what the pools take from the device,
 * CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, not what the application holds.
 *
 * For each pool this process uses, `known` is the reservation already counted. An allocation
 * first reserves, atomically, the least the pool must grow (the shortfall above its current
 * reservation, in 2 MiB granules); after the driver answers, the accounting settles on the
 * pool's real reservation. A pool that grew by more than the limit allows (pools grow in large
 * chunks) is trimmed back to what it uses; if it still does not fit, the allocation is freed
 * and refused. Pools shrink only at synchronisation (stream, event, context), at
 * cuMemPoolTrimTo and when destroyed: those hooks, cuMemFreeAsync, cuMemGetInfo and every
 * refusal re-read the reservations ("reconcile"), so freed pool memory is returned to the
 * container as soon as the driver gives it back.
 *
 * Stream capture: pool attribute reads are unsafe while a capture is in progress (a GLOBAL
 * capture forbids them to every thread), so none is made then: an allocation on a capturing
 * stream is a graph memory node, counted when the graph is launched (the graph pool); one on
 * another stream is charged from the shim's own ledger (its size in whole granules) and the
 * pools are read again once no capture is left. A read that fails changes nothing. */
#include <pthread.h>

#include "limiter.h"
#include "vgpu.h"

#define MAX_POOLS 256
#define GRANULE (2ULL << 20)

struct pool {
    CUmemoryPool handle;
    int rec;
    uint64_t known; /* bytes counted for this pool */
};

static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool pools[MAX_POOLS];
static int pool_count;

/* A pool figure: 0, or -1 when it cannot be read (then nothing may be settled on it). */
static int attribute(CUmemoryPool pool, CUmemPool_attribute which, uint64_t *out)
{
    cuuint64_t v = 0;
    if (CALL_CU(cuMemPoolGetAttribute, pool, which, &v) != CUDA_SUCCESS)
        return -1;
    *out = v;
    return 0;
}

/* This process's entry for a pool, added when new; NULL when the table is full. */
static struct pool *pool_locked(CUmemoryPool handle, int rec)
{
    for (int i = 0; i < pool_count; i++)
        if (pools[i].handle == handle)
            return &pools[i];
    if (pool_count == MAX_POOLS || rec < 0)
        return NULL;
    pools[pool_count] = (struct pool){handle, rec, 0};
    __atomic_store_n(&pool_count, pool_count + 1, __ATOMIC_RELEASE);
    return &pools[pool_count - 1];
}

/* Moves the count for `p` from `counted` to the pool's real reservation `now`. */
static void settle_locked(struct pool *p, uint64_t counted, uint64_t now)
{
    if (now > counted)
        vgpu_charge_anyway(p->rec, now - counted); /* the driver already gave it out */
    else
        vgpu_uncharge(p->rec, counted - now);
    p->known = now;
}

static uint64_t reserved(const struct pool *p)
{
    uint64_t v = p->known;
    attribute(p->handle, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v);
    return v; /* unreadable: what is already counted stays counted */
}

static void reconcile_locked(void)
{
    for (int i = 0; i < pool_count; i++)
        settle_locked(&pools[i], pools[i].known, reserved(&pools[i]));
}

void vgpu_pools_reconcile(void)
{
    if (!__atomic_load_n(&pool_count, __ATOMIC_ACQUIRE) || vgpu_capture_active())
        return;
    pthread_mutex_lock(&pools_lock);
    reconcile_locked();
    pthread_mutex_unlock(&pools_lock);
}

/* One stream-ordered allocation as the application asked for it. */
struct pool_call {
    CUdeviceptr *dptr;
    size_t bytes;
    CUmemoryPool pool; /* NULL: the current pool of the device (cuMemAllocAsync) */
    CUstream stream;
    int from_pool, per_thread;
};

static CUresult real_alloc(const struct pool_call *c)
{
    if (c->from_pool)
        return c->per_thread
                   ? CALL_CU(cuMemAllocFromPoolAsync_ptsz, c->dptr, c->bytes, c->pool, c->stream)
                   : CALL_CU(cuMemAllocFromPoolAsync, c->dptr, c->bytes, c->pool, c->stream);
    return c->per_thread ? CALL_CU(cuMemAllocAsync_ptsz, c->dptr, c->bytes, c->stream)
                         : CALL_CU(cuMemAllocAsync, c->dptr, c->bytes, c->stream);
}

static void real_free(const struct pool_call *c)
{
    if (c->per_thread)
        CALL_CU(cuMemFreeAsync_ptsz, *c->dptr, c->stream);
    else
        CALL_CU(cuMemFreeAsync, *c->dptr, c->stream);
}

/* Counts the pool's growth from `*counted` to `now` when it fits the limit: 0, else -1. */
static int count_growth(const struct pool *p, uint64_t *counted, uint64_t now)
{
    if (now > *counted) {
        if (vgpu_charge(p->rec, now - *counted) != 0)
            return -1;
        *counted = now;
    }
    return 0;
}

/* After a successful allocation counted up to `*counted`: makes the pool's real reservation
 * fit the limit, trimming the surplus of a large growth, else freeing and refusing. */
static CUresult fit_growth(struct pool *p, const struct pool_call *c, uint64_t *counted,
                           uint64_t *now)
{
    if (count_growth(p, counted, *now) == 0)
        return CUDA_SUCCESS;
    CALL_CU(cuMemPoolTrimTo, p->handle, 0); /* keeps only what is in use */
    *now = reserved(p);
    if (count_growth(p, counted, *now) == 0)
        return CUDA_SUCCESS;
    /* Refused: the free returns the memory to the pool only when the stream reaches it, so
     * wait for that before trimming, and the ledger is back within the limit on return. */
    real_free(c);
    if (c->per_thread)
        CALL_CU(cuStreamSynchronize_ptsz, c->stream);
    else
        CALL_CU(cuStreamSynchronize, c->stream);
    CALL_CU(cuMemPoolTrimTo, p->handle, 0);
    *now = reserved(p);
    if (*now > *counted) /* the driver kept more than fits: count the truth, no more */
        *now = *counted;
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* Whether the call's stream is capturing (a safe query): its allocation is a graph node. */
static int stream_captures(const struct pool_call *c)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult rc = c->per_thread ? CALL_CU(cuStreamIsCapturing_ptsz, c->stream, &st)
                                : CALL_CU(cuStreamIsCapturing, c->stream, &st);
    return rc == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* While another stream captures: charged from the ledger alone, no pool figure read. */
static CUresult ledger_alloc(struct pool *p, const struct pool_call *c)
{
    uint64_t need = (c->bytes + GRANULE - 1) / GRANULE * GRANULE;
    vgpu_footprint_check(p->rec, need);
    if (vgpu_charge(p->rec, need) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real_alloc(c);
    if (rc == CUDA_SUCCESS)
        p->known += need; /* settled on the real reservation after the capture */
    else
        vgpu_uncharge(p->rec, need);
    return rc;
}

static CUresult pool_alloc(struct pool_call *c)
{
    CUdevice dev = -1; /* the current context's (vgpu_current_record, keeping the device) */
    int rec = CALL_CU(cuCtxGetDevice, &dev) == CUDA_SUCCESS ? vgpu_record_of_ordinal(dev) : -1;
    if (rec >= 0 && !c->pool)
        CALL_CU(cuDeviceGetMemPool, &c->pool, dev);
    if (rec < 0 || !c->pool || !c->dptr || c->bytes == 0)
        return real_alloc(c);
    if (vgpu_capture_active() && stream_captures(c))
        return real_alloc(c); /* a graph memory node: counted at graph launch */
    pthread_mutex_lock(&pools_lock);
    struct pool *p = pool_locked(c->pool, rec);
    if (!p) {
        pthread_mutex_unlock(&pools_lock);
        vgpu_log(VGPU_LOG_WARN, "more than %d memory pools: refusing to allocate from another",
                 MAX_POOLS);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t in_use = 0;
    if (vgpu_capture_active() ||
        attribute(p->handle, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &in_use) < 0) {
        CUresult lrc = ledger_alloc(p, c);
        pthread_mutex_unlock(&pools_lock);
        return lrc;
    }
    reconcile_locked(); /* start from the truth, with every pool's shrinkage counted */
    uint64_t want = in_use + c->bytes;
    uint64_t need = want > p->known ? (want - p->known + GRANULE - 1) / GRANULE * GRANULE : 0;
    uint64_t counted = p->known, now = p->known;
    vgpu_footprint_check(rec, need);
    CUresult rc = vgpu_charge(rec, need) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        counted += need;
        rc = real_alloc(c);
        now = reserved(p);
        if (rc == CUDA_SUCCESS)
            rc = fit_growth(p, c, &counted, &now);
    }
    settle_locked(p, counted, now);
    pthread_mutex_unlock(&pools_lock);
    return rc;
}

CUresult hook_cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return pool_alloc(&(struct pool_call){dptr, bytesize, NULL, hStream, 0, 0});
}

CUresult hook_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return pool_alloc(&(struct pool_call){dptr, bytesize, NULL, hStream, 0, 1});
}

CUresult hook_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream)
{
    if (!pool) /* the driver's own refusal, not "the current pool" */
        return CALL_CU(cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream);
    return pool_alloc(&(struct pool_call){dptr, bytesize, pool, hStream, 1, 0});
}

CUresult hook_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                           CUmemoryPool pool, CUstream hStream)
{
    if (!pool)
        return CALL_CU(cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream);
    return pool_alloc(&(struct pool_call){dptr, bytesize, pool, hStream, 1, 1});
}

/* The driver call, then a re-read of every pool: they may have shrunk. */
#define THEN_RECONCILE(call)                                                                   \
    do {                                                                                       \
        CUresult rc_ = call;                                                                   \
        vgpu_pools_reconcile();                                                                \
        return rc_;                                                                            \
    } while (0)

CUresult hook_cuMemFreeAsync(CUdeviceptr d, CUstream s) { THEN_RECONCILE(CALL_CU(cuMemFreeAsync, d, s)); }
CUresult hook_cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s)
{
    THEN_RECONCILE(CALL_CU(cuMemFreeAsync_ptsz, d, s));
}
CUresult hook_cuMemPoolTrimTo(CUmemoryPool p, size_t keep) { THEN_RECONCILE(CALL_CU(cuMemPoolTrimTo, p, keep)); }
CUresult hook_cuStreamSynchronize(CUstream s) { THEN_RECONCILE(CALL_CU(cuStreamSynchronize, s)); }
CUresult hook_cuStreamSynchronize_ptsz(CUstream s)
{
    THEN_RECONCILE(CALL_CU(cuStreamSynchronize_ptsz, s));
}
CUresult hook_cuCtxSynchronize(void) { THEN_RECONCILE(CALL_CU(cuCtxSynchronize)); }
CUresult hook_cuCtxSynchronize_v2(CUcontext c) { THEN_RECONCILE(CALL_CU(cuCtxSynchronize_v2, c)); }
CUresult hook_cuEventSynchronize(CUevent e) { THEN_RECONCILE(CALL_CU(cuEventSynchronize, e)); }

CUresult hook_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    CUresult rc = CALL_CU(cuMemPoolCreate, pool, props);
    if (rc != CUDA_SUCCESS || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return rc;
    int rec = vgpu_record_of_ordinal(props->location.id);
    pthread_mutex_lock(&pools_lock);
    pool_locked(*pool, rec);
    pthread_mutex_unlock(&pools_lock);
    return rc;
}

CUresult hook_cuMemPoolDestroy(CUmemoryPool pool)
{
    CUresult rc = CALL_CU(cuMemPoolDestroy, pool);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&pools_lock);
    for (int i = 0; i < pool_count; i++) {
        if (pools[i].handle != pool)
            continue;
        vgpu_uncharge(pools[i].rec, pools[i].known); /* its whole reservation went back */
        pools[i] = pools[pool_count - 1];
        __atomic_store_n(&pool_count, pool_count - 1, __ATOMIC_RELEASE);
        break;
    }
    pthread_mutex_unlock(&pools_lock);
    return rc;
}

/* Graph memory nodes take their memory from the device's graph pool when a graph is launched;
 * what the pool holds is counted like a memory pool's reservation (after the fact: the launch
 * is queued already). Read only outside captures; the next launch settles what one missed. */
static uint64_t graph_known[VGPU_MAX_DEVICES];

void vgpu_graph_memory_settle(CUstream stream)
{
    (void)stream; /* the current context's device: a launch's stream belongs to it */
    CUdevice dev = -1;
    cuuint64_t now = 0;
    if (vgpu_capture_active() || CALL_CU(cuCtxGetDevice, &dev) != CUDA_SUCCESS)
        return;
    int rec = vgpu_record_of_ordinal(dev);
    if (rec < 0 || CALL_CU(cuDeviceGetGraphMemAttribute, dev,
                           CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &now) != CUDA_SUCCESS)
        return;
    pthread_mutex_lock(&pools_lock);
    if (now > graph_known[rec])
        vgpu_charge_anyway(rec, now - graph_known[rec]);
    else
        vgpu_uncharge(rec, graph_known[rec] - now);
    graph_known[rec] = now;
    pthread_mutex_unlock(&pools_lock);
}
