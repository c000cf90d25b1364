/* Virtual memory management: cuMemCreate takes physical memory, which the driver frees only
 * when the handle is released AND its last mapping is unmapped. The common pattern is create,
 * map, release (the handle), use, unmap: the memory stays counted from cuMemCreate until the
 * driver really gives it back. */
#include <pthread.h>

#include "vgpu.h"

#define MAX_MAPPINGS 4096

struct handle_state {
    CUmemGenericAllocationHandle handle;
    struct vgpu_entry e; /* what its creation charged */
    int maps;
    int released;
};

struct mapping {
    CUdeviceptr base;
    size_t size;
    CUmemGenericAllocationHandle handle;
};

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct handle_state handles[MAX_MAPPINGS];
static struct mapping mappings[MAX_MAPPINGS];

/* The state of a counted handle, or NULL; lock held. */
static struct handle_state *state_locked(CUmemGenericAllocationHandle h)
{
    for (int i = 0; i < MAX_MAPPINGS; i++)
        if (handles[i].handle == h && handles[i].e.bytes)
            return &handles[i];
    return NULL;
}

static struct handle_state *free_entry_locked(void)
{
    for (int i = 0; i < MAX_MAPPINGS; i++)
        if (!handles[i].e.bytes)
            return &handles[i];
    return NULL;
}

/* Gives a handle's memory back once the driver has freed it; lock held. */
static void drop_if_gone_locked(struct handle_state *s)
{
    if (!s->released || s->maps > 0)
        return;
    vgpu_uncharge(s->e.rec, s->e.bytes);
    *s = (struct handle_state){0};
}

CUresult hook_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                          const CUmemAllocationProp *prop, unsigned long long flags)
{
    int rec = -1; /* not counted: not device memory, or arguments the driver will refuse */
    if (handle && size && prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        rec = vgpu_record_of_ordinal(prop->location.id);
    if (rec < 0)
        return CALL_CU(cuMemCreate, handle, size, prop, flags);
    CUresult rc = vgpu_count_begin(rec, size);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = CALL_CU(cuMemCreate, handle, size, prop, flags);
    pthread_mutex_lock(&vmm_lock);
    struct handle_state *s = rc == CUDA_SUCCESS ? free_entry_locked() : NULL;
    if (s)
        *s = (struct handle_state){*handle, {size, rec, KIND_HANDLE}, 0, 0};
    pthread_mutex_unlock(&vmm_lock);
    if (rc == CUDA_SUCCESS && !s)
        vgpu_log(VGPU_LOG_WARN, "more than %d VMM handles: one is not counted", MAX_MAPPINGS);
    if (rc != CUDA_SUCCESS || !s)
        vgpu_uncharge(rec, size);
    return rc;
}

CUresult hook_cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult rc = CALL_CU(cuMemRelease, handle);
    pthread_mutex_lock(&vmm_lock);
    struct handle_state *s = rc == CUDA_SUCCESS ? state_locked(handle) : NULL;
    if (s) {
        s->released = 1;
        drop_if_gone_locked(s); /* still mapped: counted until the last unmap */
    }
    pthread_mutex_unlock(&vmm_lock);
    return rc;
}

CUresult hook_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                       CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult rc = CALL_CU(cuMemMap, ptr, size, offset, handle, flags);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&vmm_lock);
    struct handle_state *s = state_locked(handle);
    for (int i = 0; s && i < MAX_MAPPINGS; i++) {
        if (!mappings[i].base) {
            mappings[i] = (struct mapping){ptr, size, handle};
            s->maps++;
            break;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return rc;
}

CUresult hook_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult rc = CALL_CU(cuMemUnmap, ptr, size);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&vmm_lock);
    for (int i = 0; i < MAX_MAPPINGS; i++) {
        struct mapping *m = &mappings[i];
        if (!m->base || m->base < ptr || m->base + m->size > ptr + size)
            continue;
        struct handle_state *s = state_locked(m->handle);
        *m = (struct mapping){0};
        if (s) {
            s->maps--;
            drop_if_gone_locked(s);
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return rc;
}
