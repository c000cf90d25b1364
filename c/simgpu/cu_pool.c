/* Stream-ordered allocation and memory pools.
 *
 * A pool reserves device memory (counted against the device) in chunks of at least 32 MiB,
 * in 2 MiB granules, and hands out allocations from that reservation. Freed memory stays
 * reserved; at every synchronize, and at cuMemPoolTrimTo, a pool gives back what it holds
 * above max(release threshold, used memory rounded up to a granule). The default release
 * threshold is 0, so an idle default pool returns everything at the next synchronize.
 * RESERVED_MEM_CURRENT is what the pool actually takes from the device.
 *
 * cuMemFreeAsync returns memory to its pool only when the stream reaches the free, as the
 * driver does: until then it stays in USED_MEM_CURRENT and no trim can give it back. A
 * cuMemAllocAsync on a capturing stream allocates nothing now: it becomes a graph memory node
 * (cu_graph.c). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cu_internal.h"

#define POOL_CHUNK (32ULL << 20)
#define MAX_POOLS 256

struct CUmemPoolHandle_st {
    uint32_t magic;
    int dev;
    int is_default;
    int reuse[3]; /* the three REUSE_* attributes: accepted, not modelled */
    uint64_t reserved, used, reserved_high, used_high, threshold;
};

#define MAX_PENDING 4096

/* A stream-ordered free the stream has not reached yet. */
struct pending_free {
    struct CUmemPoolHandle_st *pool;
    uint64_t size;
    struct CUevent_st reached; /* recorded on the stream at the free (the shared timeline) */
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending_free pending[MAX_PENDING];
static int pending_count;
static struct CUmemPoolHandle_st default_pools[SIM_MAX_DEVICES];
static struct CUmemPoolHandle_st *current_pools[SIM_MAX_DEVICES];
static struct CUmemPoolHandle_st *created[MAX_POOLS];

static void init_pool(struct CUmemPoolHandle_st *p, int dev, int is_default)
{
    memset(p, 0, sizeof *p);
    p->magic = MAGIC_POOL;
    p->dev = dev;
    p->is_default = is_default;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
}

static struct CUmemPoolHandle_st *default_pool(int dev)
{
    pthread_mutex_lock(&pool_lock);
    if (default_pools[dev].magic != MAGIC_POOL)
        init_pool(&default_pools[dev], dev, 1);
    pthread_mutex_unlock(&pool_lock);
    return &default_pools[dev];
}

/* The pool cuMemAllocAsync uses on a device: the one set by cuDeviceSetMemPool, else the
 * default pool. */
static struct CUmemPoolHandle_st *current_pool(int dev)
{
    return current_pools[dev] ? current_pools[dev] : default_pool(dev);
}

static void give_back_locked(struct CUmemPoolHandle_st *p, uint64_t size)
{
    if (p->magic == MAGIC_POOL) /* a destroyed pool already returned its reservation */
        p->used -= size < p->used ? size : p->used;
}

/* Settles the frees their streams have reached. */
static void settle_frees_locked(void)
{
    for (int i = 0; i < pending_count;) {
        if (sim_tl_event_done(&pending[i].reached, 1)) {
            give_back_locked(pending[i].pool, pending[i].size);
            pending[i] = pending[--pending_count];
        } else {
            i++;
        }
    }
}

static void trim_locked(struct CUmemPoolHandle_st *p, uint64_t keep_at_least)
{
    settle_frees_locked();
    uint64_t keep = sim_round_up(p->used, SIM_GRANULARITY);
    if (keep_at_least > keep)
        keep = keep_at_least;
    if (p->reserved > keep) {
        sim_uncharge(p->dev, p->reserved - keep);
        p->reserved = keep;
    }
}

void sim_pools_trim(int dev)
{
    pthread_mutex_lock(&pool_lock);
    if (default_pools[dev].magic == MAGIC_POOL)
        trim_locked(&default_pools[dev], default_pools[dev].threshold);
    for (int i = 0; i < MAX_POOLS; i++)
        if (created[i] && created[i]->dev == dev)
            trim_locked(created[i], created[i]->threshold);
    pthread_mutex_unlock(&pool_lock);
}

/* Grows the reservation to cover `need` bytes in use: a whole chunk when the device has
 * room, else just the granules needed. */
static int reserve_locked(struct CUmemPoolHandle_st *p, uint64_t need)
{
    if (need <= p->reserved)
        return 0;
    uint64_t deficit = sim_round_up(need - p->reserved, SIM_GRANULARITY);
    uint64_t grow = deficit > POOL_CHUNK ? deficit : POOL_CHUNK;
    if (sim_charge(p->dev, grow) < 0) {
        grow = deficit;
        if (sim_charge(p->dev, grow) < 0)
            return -1;
    }
    p->reserved += grow;
    if (p->reserved > p->reserved_high)
        p->reserved_high = p->reserved;
    return 0;
}

static CUresult pool_alloc(CUdeviceptr *dptr, size_t bytes, struct CUmemPoolHandle_st *p)
{
    uint64_t size = sim_round_up(bytes, SIM_SMALL_ALIGN);
    pthread_mutex_lock(&pool_lock);
    settle_frees_locked();
    int ok = reserve_locked(p, p->used + size) == 0;
    if (ok) {
        p->used += size;
        if (p->used > p->used_high)
            p->used_high = p->used;
    }
    pthread_mutex_unlock(&pool_lock);
    if (!ok)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *mem = sim_map_memory(size);
    struct sim_alloc a = {(uintptr_t)mem, size, 0, p->dev, ALLOC_POOL, p, 0, -1};
    if (!mem || sim_alloc_put(&a) < 0) {
        if (mem)
            munmap(mem, size);
        pthread_mutex_lock(&pool_lock);
        p->used -= size;
        pthread_mutex_unlock(&pool_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)(uintptr_t)mem;
    return CUDA_SUCCESS;
}

void sim_pool_release(const struct sim_alloc *a)
{
    munmap((void *)a->base, a->size);
    pthread_mutex_lock(&pool_lock);
    give_back_locked(a->owner, a->size);
    pthread_mutex_unlock(&pool_lock);
}

/* A stream-ordered free: the address goes now, the memory when the stream gets there. */
static int pool_free_ptr(CUdeviceptr ptr, struct CUstream_st *s)
{
    struct sim_alloc a;
    if (sim_alloc_take((uintptr_t)ptr, &a) < 0)
        return 0;
    if (a.kind != ALLOC_POOL && a.kind != ALLOC_GRAPH) {
        sim_alloc_put(&a);
        return 0;
    }
    munmap((void *)a.base, a.size);
    if (a.kind == ALLOC_GRAPH) /* graph memory: the graph pool keeps it */
        return 1;
    struct CUevent_st reached = {0};
    int queued = !s->capture && sim_tl_record(s, &reached) == CUDA_SUCCESS;
    pthread_mutex_lock(&pool_lock);
    if (pending_count < MAX_PENDING && queued)
        pending[pending_count++] = (struct pending_free){a.owner, a.size, reached};
    else /* no room to wait (or freed into a graph): settled now */
        give_back_locked(a.owner, a.size);
    pthread_mutex_unlock(&pool_lock);
    return 1;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream h, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dptr || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!pool)
        pool = current_pool(s->ctx->dev);
    if (pool->magic != MAGIC_POOL)
        return CUDA_ERROR_INVALID_VALUE;
    if (s->capture)
        return sim_capture_alloc(dptr, bytes, s);
    return pool_alloc(dptr, bytes, pool);
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    return pool_free_ptr(dptr, s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemAllocAsync(CUdeviceptr *d, size_t n, CUstream h)
{
    return alloc_async(d, n, NULL, h, 0);
}
SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream h)
{
    return alloc_async(d, n, NULL, h, 1);
}
SIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream h)
{
    return p ? alloc_async(d, n, p, h, 0) : CUDA_ERROR_INVALID_VALUE;
}
SIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p,
                                              CUstream h)
{
    return p ? alloc_async(d, n, p, h, 1) : CUDA_ERROR_INVALID_VALUE;
}
SIM_API CUresult cuMemFreeAsync(CUdeviceptr d, CUstream h) { return free_async(d, h, 0); }
SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream h) { return free_async(d, h, 1); }

SIM_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        sim_check_device(props->location.id) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUmemPoolHandle_st *p = malloc(sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    init_pool(p, props->location.id, 0);
    pthread_mutex_lock(&pool_lock);
    int slot = 0;
    while (slot < MAX_POOLS && created[slot])
        slot++;
    if (slot < MAX_POOLS)
        created[slot] = p;
    pthread_mutex_unlock(&pool_lock);
    if (slot == MAX_POOLS) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pool = p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pool || pool->magic != MAGIC_POOL || pool->is_default)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < MAX_POOLS; i++)
        if (created[i] == pool)
            created[i] = NULL;
    for (int d = 0; d < SIM_MAX_DEVICES; d++)
        if (current_pools[d] == pool)
            current_pools[d] = NULL;
    sim_uncharge(pool->dev, pool->reserved);
    /* Outstanding allocations keep pointing here: the object stays, marked dead. */
    pool->magic = MAGIC_DEAD;
    pool->reserved = pool->used = 0;
    pthread_mutex_unlock(&pool_lock);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    CUresult rc = sim_cu_ready();
    if (rc == CUDA_SUCCESS && (!pool || pool->magic != MAGIC_POOL))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = sim_capture_check();
    if (rc == CUDA_SUCCESS) {
        pthread_mutex_lock(&pool_lock);
        trim_locked(pool, minBytesToKeep);
        pthread_mutex_unlock(&pool_lock);
    }
    return rc;
}

static CUresult pool_attribute(CUmemoryPool p, CUmemPool_attribute attr, void *value, int set)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p || p->magic != MAGIC_POOL || !value)
        return CUDA_ERROR_INVALID_VALUE;
    /* Reported as unsafe during capture by CUDA library maintainers: the driver may need the
     * pool's pending frees settled. */
    if ((rc = sim_capture_check()) != CUDA_SUCCESS)
        return rc;
    uint64_t *v64 = value;
    rc = CUDA_SUCCESS;
    pthread_mutex_lock(&pool_lock);
    settle_frees_locked();
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        if (set)
            p->reuse[attr - 1] = *(int *)value;
        else
            *(int *)value = p->reuse[attr - 1];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        if (set)
            p->threshold = *v64;
        else
            *v64 = p->threshold;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        if (set)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            *v64 = attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT ? p->used : p->reserved;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: {
        int used = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH;
        uint64_t *high = used ? &p->used_high : &p->reserved_high;
        if (!set)
            *v64 = *high;
        else if (*v64 != 0) /* the only value that may be set: 0 resets the mark */
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            *high = used ? p->used : p->reserved;
        break;
    }
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&pool_lock);
    return rc;
}

SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool p, CUmemPool_attribute a, void *v)
{
    return pool_attribute(p, a, v, 1);
}
SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool p, CUmemPool_attribute a, void *v)
{
    return pool_attribute(p, a, v, 0);
}

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc == CUDA_SUCCESS && !pool_out)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *pool_out = default_pool(dev);
    return rc;
}

SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    CUresult rc = sim_check_device(dev);
    if (rc == CUDA_SUCCESS && !pool)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *pool = current_pool(dev);
    return rc;
}

SIM_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    CUresult rc = sim_check_device(dev);
    if (rc == CUDA_SUCCESS && (!pool || pool->magic != MAGIC_POOL || pool->dev != dev))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        current_pools[dev] = pool;
    return rc;
}
