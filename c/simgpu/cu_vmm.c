/* Virtual memory management and arrays.
 *
 * cuMemCreate takes physical memory (counted against the device) as a sparse memfd;
 * cuMemAddressReserve reserves PROT_NONE address space; cuMemMap maps the memfd there and
 * cuMemSetAccess opens it, so mapped memory works with memcpy. A handle's memory returns to
 * the device when it is released and no longer mapped, as on a real driver. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cu_internal.h"

#define MAX_MAPPINGS 4096

struct sim_phys {
    uint32_t magic;
    int dev;
    size_t size;
    int fd;
    int maps;
    int released;
};

struct mapping {
    uintptr_t base;
    size_t size;
    struct sim_phys *phys;
};

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mapping mappings[MAX_MAPPINGS];

static int valid_prop(const CUmemAllocationProp *prop)
{
    return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
           prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
           sim_check_device(prop->location.id) == CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!granularity || !valid_prop(prop) || option > CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = SIM_GRANULARITY;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle || !valid_prop(prop) || flags || size == 0 || size % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_phys *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (sim_charge(prop->location.id, size) < 0) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->fd = memfd_create("hami-sim-vmm", MFD_CLOEXEC);
    if (p->fd < 0 || ftruncate(p->fd, (off_t)size) < 0) {
        if (p->fd >= 0)
            close(p->fd);
        sim_uncharge(prop->location.id, size);
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->magic = MAGIC_PHYS;
    p->dev = prop->location.id;
    p->size = size;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
    return CUDA_SUCCESS;
}

static void destroy_if_unused_locked(struct sim_phys *p)
{
    if (!p->released || p->maps > 0)
        return;
    close(p->fd);
    sim_uncharge(p->dev, p->size);
    p->magic = MAGIC_DEAD;
    free(p);
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct sim_phys *p = (struct sim_phys *)(uintptr_t)handle;
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!p || p->magic != MAGIC_PHYS || p->released)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    p->released = 1;
    destroy_if_unused_locked(p);
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ptr || flags || size == 0 || size % SIM_GRANULARITY ||
        (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    size_t align = alignment > SIM_GRANULARITY ? alignment : SIM_GRANULARITY;
    /* Over-reserve, then cut the unaligned head and the tail. */
    size_t span = size + align;
    char *raw = mmap((void *)(uintptr_t)addr, span, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t base = sim_round_up((uintptr_t)raw, align);
    if (base > (uintptr_t)raw)
        munmap(raw, base - (uintptr_t)raw);
    munmap((void *)(base + size), (uintptr_t)raw + span - (base + size));
    *ptr = (CUdeviceptr)base;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    munmap((void *)(uintptr_t)ptr, size);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    struct sim_phys *p = (struct sim_phys *)(uintptr_t)handle;
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ptr || flags || !p || p->magic != MAGIC_PHYS || size == 0 || offset > p->size ||
        size > p->size - offset || size % SIM_GRANULARITY || offset % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    int slot = 0;
    while (slot < MAX_MAPPINGS && mappings[slot].base)
        slot++;
    void *m = slot < MAX_MAPPINGS ? mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
                                         MAP_SHARED | MAP_FIXED, p->fd, (off_t)offset)
                                  : MAP_FAILED;
    if (m != MAP_FAILED) {
        mappings[slot] = (struct mapping){(uintptr_t)ptr, size, p};
        p->maps++;
    }
    pthread_mutex_unlock(&vmm_lock);
    return m == MAP_FAILED ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t lo = (uintptr_t)ptr, hi = lo + size;
    pthread_mutex_lock(&vmm_lock);
    /* Back to reserved-but-inaccessible address space. */
    mmap((void *)lo, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
         0);
    for (int i = 0; i < MAX_MAPPINGS; i++) {
        struct mapping *m = &mappings[i];
        if (m->base && m->base >= lo && m->base + m->size <= hi) {
            m->phys->maps--;
            destroy_if_unused_locked(m->phys);
            memset(m, 0, sizeof *m);
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ptr || size == 0 || !desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int prot = PROT_NONE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            sim_check_device(desc[i].location.id) != CUDA_SUCCESS)
            return CUDA_ERROR_INVALID_VALUE;
        if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            prot = PROT_READ | PROT_WRITE;
        else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
            prot = PROT_READ;
    }
    return mprotect((void *)(uintptr_t)ptr, size, prot) == 0 ? CUDA_SUCCESS
                                                            : CUDA_ERROR_INVALID_VALUE;
}
