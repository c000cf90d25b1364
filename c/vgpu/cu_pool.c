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
 * container as soon as the driver gives it back. */
#include <pthread.h>

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

static uint64_t attribute(CUmemoryPool pool, CUmemPool_attribute which)
{
    cuuint64_t v = 0;
    return CALL_CU(cuMemPoolGetAttribute, pool, which, &v) == CUDA_SUCCESS ? v : 0;
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

static void reconcile_locked(void)
{
    for (int i = 0; i < pool_count; i++)
        settle_locked(&pools[i], pools[i].known,
                      attribute(pools[i].handle, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
}

void vgpu_pools_reconcile(void)
{
    if (!__atomic_load_n(&pool_count, __ATOMIC_ACQUIRE))
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

static uint64_t reserved(const struct pool *p)
{
    return attribute(p->handle, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
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
    real_free(c);
    CALL_CU(cuMemPoolTrimTo, p->handle, 0);
    *now = reserved(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult pool_alloc(struct pool_call *c)
{
    CUdevice dev = -1; /* the current context's (vgpu_current_record, keeping the device) */
    int rec = CALL_CU(cuCtxGetDevice, &dev) == CUDA_SUCCESS ? vgpu_record_of_ordinal(dev) : -1;
    if (rec >= 0 && !c->pool)
        CALL_CU(cuDeviceGetMemPool, &c->pool, dev);
    if (rec < 0 || !c->pool || !c->dptr || c->bytes == 0)
        return real_alloc(c);
    pthread_mutex_lock(&pools_lock);
    struct pool *p = pool_locked(c->pool, rec);
    if (!p) {
        pthread_mutex_unlock(&pools_lock);
        vgpu_log(VGPU_LOG_WARN, "more than %d memory pools: refusing to allocate from another",
                 MAX_POOLS);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    reconcile_locked(); /* start from the truth, with every pool's shrinkage counted */
    uint64_t want = attribute(p->handle, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) + c->bytes;
    uint64_t need = want > p->known ? (want - p->known + GRANULE - 1) / GRANULE * GRANULE : 0;
    uint64_t counted = p->known, now = p->known;
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
