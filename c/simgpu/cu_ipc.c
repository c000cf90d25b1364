/* Legacy interprocess memory: cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle.
 *
 * A cuMemAlloc allocation is private anonymous memory of its process; exporting it moves its
 * pages, in place and at the same address, onto a memfd that the handle names (the exporter's
 * pid and start time, the descriptor's number, the memfd's inode). An importer opens that
 * descriptor through /proc/<pid>/fd, so the exporter must be alive at the open, as on a real
 * driver; after it the importer's mapping keeps the pages. The memory is counted once, to one
 * holder: the exporter while it holds it, then the importer that has held it longest
 * (holds.c; docs/simgpu.md says which part of that is known of real drivers and which is
 * assumed). Not modelled: opening a handle in the process that exported it (allowed here),
 * devices the importer does not see (CUDA_ERROR_INVALID_DEVICE here), writes by other threads
 * while the handle is first made (they may be lost). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hami_proc.h"
#include "cu_internal.h"

#define IPC_MAGIC 0x50494d48u /* "HMIP" */
#define IPC_VERSION 1
#define MAX_IMPORTS 1024
#define CHUNK (2u << 20)

/* What the 64 opaque bytes of a CUipcMemHandle carry here. */
struct ipc_wire {
    uint32_t magic, version;
    int32_t pid, fd, record;
    uint32_t reserved;
    uint64_t start_time, ino, size;
    uint8_t pad[16];
};
_Static_assert(sizeof(struct ipc_wire) == CU_IPC_HANDLE_SIZE, "an IPC handle is 64 bytes");

struct import {
    uint64_t ino;
    uintptr_t base;
    int refs;
};

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct import imports[MAX_IMPORTS];

/* Moves the allocation's pages onto a memfd mapped at the same address; 0 or -1. */
static int make_shareable(struct sim_alloc *a)
{
    static const char zero[CHUNK];
    char name[40];
    snprintf(name, sizeof name, "hami-sim-ipc-rec%d", sim_record_of(sim_device(a->dev)));
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)a->size) < 0)
        goto fail;
    for (size_t off = 0; off < a->size; off += CHUNK) { /* untouched pages stay holes */
        size_t n = a->size - off < CHUNK ? a->size - off : CHUNK;
        if (memcmp((char *)a->base + off, zero, n) &&
            pwrite(fd, (char *)a->base + off, n, (off_t)off) != (ssize_t)n)
            goto fail;
    }
    if (mmap((void *)a->base, a->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
        MAP_FAILED)
        goto fail;
    struct stat st;
    if (fstat(fd, &st) < 0 || sim_hold_add(a->dev, (uint64_t)st.st_ino, a->charged, 1) < 0)
        goto fail;
    a->fd = fd;
    a->ino = (uint64_t)st.st_ino;
    return 0;
fail:
    if (fd >= 0)
        close(fd); /* a mapping made already keeps the pages */
    return -1;
}

SIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    struct CUctx_st *c = NULL;
    CUresult rc = sim_require_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_alloc a;
    if (!pHandle || sim_alloc_find((uintptr_t)dptr, &a) < 0 || a.kind != ALLOC_DEVICE)
        return CUDA_ERROR_INVALID_VALUE; /* only cuMemAlloc memory has legacy handles */
    pthread_mutex_lock(&ipc_lock);
    if (!a.ino && sim_alloc_take(a.base, &a) == 0) {
        int made = make_shareable(&a);
        sim_alloc_put(&a);
        rc = made < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&ipc_lock);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_self me = sim_self();
    struct ipc_wire w = {.magic = IPC_MAGIC, .version = IPC_VERSION, .pid = me.pid, .fd = a.fd,
                         .record = sim_record_of(sim_device(a.dev)),
                         .start_time = me.start_time, .ino = a.ino, .size = a.size};
    memcpy(pHandle->reserved, &w, sizeof w);
    return CUDA_SUCCESS;
}

/* The exporter's memfd, opened anew; -1 when the exporter or its allocation is gone. */
static int open_exported(const struct ipc_wire *w)
{
    if (hami_proc_start_time(w->pid) != w->start_time)
        return -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)w->pid, (int)w->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) < 0 || (uint64_t)st.st_ino != w->ino)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static struct import *imported_locked(uint64_t ino, uintptr_t base)
{
    for (int i = 0; i < MAX_IMPORTS; i++)
        if (imports[i].refs && (ino ? imports[i].ino == ino : imports[i].base == base))
            return &imports[i];
    return NULL;
}

static CUresult open_handle(CUdeviceptr *pdptr, const CUipcMemHandle *handle, unsigned int flags)
{
    struct CUctx_st *c = NULL;
    CUresult rc = sim_require_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct ipc_wire w;
    memcpy(&w, handle->reserved, sizeof w);
    if (!pdptr || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS || w.magic != IPC_MAGIC ||
        w.version != IPC_VERSION || w.size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = sim_ordinal_of_record(w.record);
    if (dev < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&ipc_lock);
    struct import *im = imported_locked(w.ino, 0);
    if (im) { /* opened before by this process: the same pointer, one more reference */
        im->refs++;
        *pdptr = (CUdeviceptr)im->base;
        pthread_mutex_unlock(&ipc_lock);
        return CUDA_SUCCESS;
    }
    im = NULL;
    for (int i = 0; i < MAX_IMPORTS && !im; i++)
        im = imports[i].refs ? NULL : &imports[i];
    int fd = im ? open_exported(&w) : -1;
    void *p = fd < 0 ? MAP_FAILED : mmap(NULL, w.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0)
        close(fd); /* the mapping keeps the memory */
    struct sim_alloc a = {(uintptr_t)p, w.size, 0, dev, ALLOC_IPC, NULL, w.ino, -1};
    if (p == MAP_FAILED || sim_alloc_put(&a) < 0) {
        if (p != MAP_FAILED)
            munmap(p, w.size);
        pthread_mutex_unlock(&ipc_lock);
        return fd < 0 && im ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_OUT_OF_MEMORY;
    }
    sim_hold_add(dev, w.ino, w.size, 0);
    *im = (struct import){w.ino, (uintptr_t)p, 1};
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    pthread_mutex_unlock(&ipc_lock);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return open_handle(pdptr, &handle, Flags);
}

SIM_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                       unsigned int Flags)
{
    return open_handle(pdptr, &handle, Flags);
}

SIM_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&ipc_lock);
    struct import *im = dptr ? imported_locked(0, (uintptr_t)dptr) : NULL;
    struct sim_alloc a;
    if (im && --im->refs == 0) {
        if (sim_alloc_take(im->base, &a) == 0) {
            munmap((void *)a.base, a.size);
            sim_hold_drop(a.dev, a.ino);
        }
        memset(im, 0, sizeof *im);
    }
    pthread_mutex_unlock(&ipc_lock);
    return im ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
