/* Virtual memory management.
 *
 * cuMemCreate takes physical memory (counted against the device) as a sparse memfd;
 * cuMemAddressReserve reserves PROT_NONE address space; cuMemMap maps the memfd there and
 * cuMemSetAccess opens it, so mapped memory works with memcpy. A handle's memory returns to
 * the device when its last reference is released and it is no longer mapped, as on a real
 * driver. Memory created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR exports as a file
 * descriptor (the memfd itself) that another process imports: the same pages, counted once,
 * to one holder: the process that created them while it holds them, then the importer that has
 * held them longest (holds.c), as a real driver's count comes to. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cu_internal.h"

#define MAX_MAPPINGS 4096

struct sim_phys {
    uint32_t magic;
    int dev;
    size_t size;
    int fd;
    int maps;
    int refs;       /* cuMemCreate / import and cuMemRetainAllocationHandle take one */
    int imported;   /* memory another process created: not charged here */
    unsigned int handle_types;
    uint64_t ino;   /* the memfd's inode once exported or imported (holds.c); else 0 */
};

/* The memfd's name carries the device record, the same in every process's view. */
#define MEMFD_PREFIX "hami-sim-vmm-rec"

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
    char name[32];
    snprintf(name, sizeof name, MEMFD_PREFIX "%d", sim_record_of(sim_device(prop->location.id)));
    p->fd = memfd_create(name, MFD_CLOEXEC);
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
    p->refs = 1;
    p->handle_types = prop->requestedHandleTypes;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
    return CUDA_SUCCESS;
}

static void destroy_if_unused_locked(struct sim_phys *p)
{
    if (p->refs > 0 || p->maps > 0)
        return;
    close(p->fd);
    /* memory others hold too: its charge moves on (holds.c) rather than leaving the device */
    if (!(p->ino && sim_hold_drop(p->dev, p->ino)) && !p->imported)
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
    pthread_mutex_lock(&vmm_lock);
    if (!p || p->magic != MAGIC_PHYS || p->refs <= 0) {
        pthread_mutex_unlock(&vmm_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    p->refs--;
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

/* The handle whose memory is mapped at `addr`, or NULL; caller holds vmm_lock. */
static struct mapping *mapping_at_locked(uintptr_t addr)
{
    for (int i = 0; i < MAX_MAPPINGS; i++)
        if (mappings[i].base && addr >= mappings[i].base &&
            addr < mappings[i].base + mappings[i].size)
            return &mappings[i];
    return NULL;
}

SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle || !addr)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    struct mapping *m = mapping_at_locked((uintptr_t)addr);
    if (m) {
        m->phys->refs++;
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->phys;
    }
    pthread_mutex_unlock(&vmm_lock);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle)
{
    struct sim_phys *p = (struct sim_phys *)(uintptr_t)handle;
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!prop || !p || p->magic != MAGIC_PHYS)
        return CUDA_ERROR_INVALID_VALUE;
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requestedHandleTypes = (CUmemAllocationHandleType)p->handle_types;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = p->dev;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                CUdeviceptr ptr)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    struct mapping *m = mapping_at_locked((uintptr_t)ptr);
    int dev = m ? m->phys->dev : -1;
    pthread_mutex_unlock(&vmm_lock);
    if (!m)
        return CUDA_ERROR_INVALID_VALUE;
    /* access is per device: a simulated device reaches only its own memory */
    *flags = location->id == dev ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemExportToShareableHandle(void *shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    struct sim_phys *p = (struct sim_phys *)(uintptr_t)handle;
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!shareableHandle || !p || p->magic != MAGIC_PHYS || flags)
        return CUDA_ERROR_INVALID_VALUE;
    /* only the types the memory was created for; file descriptors are the one modelled */
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !(p->handle_types & handleType))
        return CUDA_ERROR_INVALID_VALUE;
    int fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&vmm_lock);
    struct stat st;
    if (!p->ino && !p->imported && fstat(p->fd, &st) == 0 &&
        sim_hold_add(p->dev, (uint64_t)st.st_ino, p->size, 1) == 0)
        p->ino = (uint64_t)st.st_ino; /* from now on others may hold it */
    pthread_mutex_unlock(&vmm_lock);
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

/* The device (this process's ordinal) whose memory a descriptor holds: the memfd's name says
 * its record; -1 when it is no memory of a device this process sees. */
static int imported_device(int fd)
{
    char link[64], target[128];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return -1;
    target[n] = '\0';
    const char *at = strstr(target, MEMFD_PREFIX);
    return at ? sim_ordinal_of_record(atoi(at + strlen(MEMFD_PREFIX))) : -1;
}

SIM_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    int fd = (int)(intptr_t)osHandle;
    struct stat st;
    if (!handle || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
        fstat(fd, &st) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = imported_device(fd);
    if (dev < 0 || dev >= sim_device_count() || st.st_size <= 0)
        return CUDA_ERROR_INVALID_VALUE; /* not memory of a simulated device */
    struct sim_phys *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (p->fd < 0) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->magic = MAGIC_PHYS;
    p->dev = dev;
    p->size = (size_t)st.st_size;
    p->refs = 1;
    p->imported = 1;
    p->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (sim_hold_add(dev, (uint64_t)st.st_ino, p->size, 0) == 0)
        p->ino = (uint64_t)st.st_ino;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
    return CUDA_SUCCESS;
}
