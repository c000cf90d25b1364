/* A GPU tenant for the hostile-tenant tests: reaches the driver the way MODE says, allocates
 * MIB of device memory in 64 MiB steps (stopping at the first refusal), prints one JSON line,
 * spins the GPU for SECONDS with 4 ms kernels (eight in flight, so that a loaded host's late
 * wake-ups leave the GPU no gaps), then waits until killed.
 *
 *   tenant MODE MIB SECONDS [FD-PATH | HANDLE]
 *   MODE  plain      dlopen("libcuda.so.1") + dlsym: what the preloaded shim substitutes
 *         deepbind   the same with RTLD_DEEPBIND (the driver's own references bind inside it)
 *         realdlsym  libc's own dlsym, found with dlvsym: the shim's dlsym is never called
 *         vmm-export cuMemCreate MIB (shareable as a file descriptor), mapped; prints the
 *                    descriptor, to be opened by a neighbour at /proc/<pid>/fd/<fd>
 *         vmm-import imports the descriptor at FD-PATH, maps it and holds it (MIB: its size)
 *         ipc-export cuMemAlloc MIB and a legacy IPC handle for it, printed in hex
 *         ipc-import opens the legacy IPC handle HANDLE and holds it
 * Declares only the few driver types it needs, so it builds with nothing but libc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr, CUhandle;
typedef struct { int type, requested_handle_types, loc_type, loc_id; void *win32;
                 unsigned char compression, gpu_direct, usage, reserved[5]; } Prop;
typedef struct { int loc_type, loc_id; int flags; } Access;
typedef struct { unsigned char bytes[64]; } IpcHandle; /* CUipcMemHandle */

static void *(*lookup)(void *, const char *) = dlsym;
static void *lib;

static void *sym(const char *name)
{
    void *p = lookup(lib, name);
    if (!p) {
        fprintf(stderr, "tenant: no %s\n", name);
        exit(3);
    }
    return p;
}

#define CALL(type, name, ...) (((type)sym(name))(__VA_ARGS__))
#define MIB (1ULL << 20)
#define IN_FLIGHT 8

static int vmm(const char *mode, unsigned long long bytes, const char *path, int dev)
{
    Prop prop = {.type = 1, .requested_handle_types = 1, .loc_type = 1, .loc_id = dev};
    CUhandle h = 0;
    CUdeviceptr va = 0;
    int fd = -1, rc;
    if (!strcmp(mode, "vmm-export"))
        rc = CALL(CUresult (*)(CUhandle *, size_t, const Prop *, unsigned long long),
                  "cuMemCreate", &h, bytes, &prop, 0);
    else if ((fd = open(path, O_RDWR)) < 0)
        rc = -1;
    else
        rc = CALL(CUresult (*)(CUhandle *, void *, int), "cuMemImportFromShareableHandle", &h,
                  (void *)(intptr_t)fd, 1);
    if (!rc)
        rc = CALL(CUresult (*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long),
                  "cuMemAddressReserve", &va, bytes, 0, 0, 0);
    if (!rc)
        rc = CALL(CUresult (*)(CUdeviceptr, size_t, size_t, CUhandle, unsigned long long),
                  "cuMemMap", va, bytes, 0, h, 0);
    Access access = {1, dev, 3};
    if (!rc)
        rc = CALL(CUresult (*)(CUdeviceptr, size_t, const Access *, size_t), "cuMemSetAccess",
                  va, bytes, &access, 1);
    int shared = -1;
    if (!rc && !strcmp(mode, "vmm-export"))
        rc = CALL(CUresult (*)(void *, CUhandle, int, unsigned long long),
                  "cuMemExportToShareableHandle", &shared, h, 1, 0);
    printf("{\"held_mib\": %llu, \"error\": %d, \"fd\": %d, \"pid\": %d}\n",
           rc ? 0 : bytes / MIB, rc, shared, (int)getpid());
    return rc;
}

static int ipc(const char *mode, unsigned long long bytes, const char *hex)
{
    IpcHandle handle = {{0}};
    CUdeviceptr p = 0;
    CUresult rc;
    if (!strcmp(mode, "ipc-export")) {
        rc = CALL(CUresult (*)(CUdeviceptr *, size_t), "cuMemAlloc_v2", &p, bytes);
        if (!rc)
            rc = CALL(CUresult (*)(IpcHandle *, CUdeviceptr), "cuIpcGetMemHandle", &handle, p);
    } else {
        for (size_t i = 0; i < sizeof handle.bytes && hex[2 * i] && hex[2 * i + 1]; i++)
            sscanf(hex + 2 * i, "%2hhx", &handle.bytes[i]);
        rc = CALL(CUresult (*)(CUdeviceptr *, IpcHandle, unsigned), "cuIpcOpenMemHandle_v2", &p,
                  handle, 1 /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */);
    }
    char text[2 * sizeof handle.bytes + 1];
    for (size_t i = 0; i < sizeof handle.bytes; i++)
        sprintf(text + 2 * i, "%02x", handle.bytes[i]);
    printf("{\"held_mib\": %llu, \"error\": %d, \"handle\": \"%s\", \"pid\": %d}\n",
           rc ? 0 : bytes / MIB, rc, text, (int)getpid());
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: tenant MODE MIB SECONDS [FD-PATH | HANDLE]\n");
        return 2;
    }
    const char *mode = argv[1];
    unsigned long long mib = strtoull(argv[2], NULL, 10);
    double seconds = atof(argv[3]);
    if (!strcmp(mode, "realdlsym")) {
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        lookup = dlvsym(libc, "dlsym", "GLIBC_2.34");
        if (!lookup)
            lookup = dlvsym(libc, "dlsym", "GLIBC_2.2.5");
    }
    lib = dlopen("libcuda.so.1", RTLD_NOW | (!strcmp(mode, "deepbind") ? RTLD_DEEPBIND : 0));
    if (!lib || !lookup) {
        fprintf(stderr, "tenant: %s\n", dlerror());
        return 3;
    }
    int dev = 0, sms = 0;
    void *ctx = NULL;
    CUresult rc = CALL(CUresult (*)(unsigned), "cuInit", 0);
    if (!rc)
        rc = CALL(CUresult (*)(int *, int), "cuDeviceGet", &dev, 0);
    if (!rc)
        rc = CALL(CUresult (*)(void **, unsigned, int), "cuCtxCreate_v2", &ctx, 0, dev);
    if (!rc)
        rc = CALL(CUresult (*)(int *, int, int), "cuDeviceGetAttribute", &sms, 16, dev);
    if (rc) {
        printf("{\"held_mib\": 0, \"error\": %d}\n", rc);
        return 1;
    }
    if (!strncmp(mode, "vmm-", 4)) {
        rc = vmm(mode, mib * MIB, argc > 4 ? argv[4] : "", dev);
    } else if (!strncmp(mode, "ipc-", 4)) {
        rc = ipc(mode, mib * MIB, argc > 4 ? argv[4] : "");
    } else {
        unsigned long long held = 0;
        while (held < mib) {
            CUdeviceptr p;
            rc = CALL(CUresult (*)(CUdeviceptr *, size_t), "cuMemAlloc_v2", &p, 64 * MIB);
            if (rc)
                break;
            held += 64;
        }
        printf("{\"held_mib\": %llu, \"error\": %d, \"pid\": %d}\n", held, rc, (int)getpid());
    }
    fflush(stdout);
    void *mod = NULL, *fn = NULL, *stream = NULL, *events[IN_FLIGHT] = {0};
    if (seconds > 0) {
        rc = CALL(CUresult (*)(void **, const void *), "cuModuleLoadData", &mod, "spin");
        rc = rc ? rc : CALL(CUresult (*)(void **, void *, const char *), "cuModuleGetFunction",
                            &fn, mod, "spin");
        rc = rc ? rc : CALL(CUresult (*)(void **, unsigned), "cuStreamCreate", &stream, 0);
        if (rc) {
            fprintf(stderr, "tenant: cannot load the spin kernel: %d\n", rc);
            return 1;
        }
    }
    uint64_t ns = 4000000;
    void *params[] = {&ns};
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned long k = 0; seconds > 0; k++) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 >= seconds)
            break;
        void **slot = &events[k % IN_FLIGHT];
        if (*slot) {
            CALL(CUresult (*)(void *), "cuEventSynchronize", *slot);
            CALL(CUresult (*)(void *), "cuEventDestroy_v2", *slot);
        }
        rc = CALL(CUresult (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, void *, void **, void **),
                  "cuLaunchKernel", fn, sms, 1, 1, 1, 1, 1, 0, stream, params, NULL);
        rc = rc ? rc : CALL(CUresult (*)(void **, unsigned), "cuEventCreate", slot, 0);
        rc = rc ? rc : CALL(CUresult (*)(void *, void *), "cuEventRecord", *slot, stream);
        if (rc) {
            fprintf(stderr, "tenant: launch failed: %d\n", rc);
            return 1;
        }
    }
    printf("{\"spun\": true}\n");
    fflush(stdout);
    for (;;)
        pause();
}
