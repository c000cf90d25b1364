/* Module images: fat binaries, cubins (ELF), PTX text, and the simulator's own test images.
 * fatbin.c picks the code a real driver would run on a device and unpacks it; cubin.c lists
 * what that code holds. Nothing here touches the shared state: these are pure functions of
 * the bytes. */
#ifndef HAMI_SIM_IMAGE_H
#define HAMI_SIM_IMAGE_H

#include <stddef.h>
#include <stdint.h>

enum sim_code_kind {
    SIM_CODE_TEST = 0, /* not CUDA code: the simulator's test image (only `spin`) */
    SIM_CODE_ELF = 1,  /* a cubin for one SM version */
    SIM_CODE_PTX = 2,  /* PTX text (a driver would compile it for the device) */
};

/* The code chosen from an image for one device, copied so that the caller's buffer may go
 * away after the load (as cuModuleLoadData allows) and unpacked only when first needed. */
struct sim_code {
    enum sim_code_kind kind;
    int arch;                /* SM version of the code (80 for sm_80); 0 for test images */
    int compression;         /* SIM_PACK_* */
    uint8_t *bytes;          /* owned */
    size_t size, unpacked_size;
};

enum { SIM_PACK_NONE = 0, SIM_PACK_LZ4 = 1, SIM_PACK_ZSTD = 2 };

/* Chooses from `image` (fat binary, fatbin wrapper contents, ELF, PTX or anything else) the
 * code for a device of SM version `arch`, as the driver does: a cubin of that version, else
 * the newest cubin of the same major version below it, else PTX not newer than the device.
 * Returns 0, or -1 with `err` set (no code for the device, or a malformed fat binary). */
int sim_code_choose(const void *image, int arch, struct sim_code *out, char *err, size_t errlen);
void sim_code_free(struct sim_code *code);

/* What a kernel needs to be launched and described (cuFuncGetAttribute). */
struct sim_kernel_info {
    char *name;
    uint32_t regs;          /* registers per thread */
    uint32_t shared_bytes;  /* static shared memory */
    uint32_t const_bytes;   /* user constant memory */
    uint32_t local_bytes;   /* local memory per thread */
    uint32_t param_bytes;   /* parameter space */
    uint32_t max_threads;   /* largest block it can be launched with */
    uint32_t nparams;       /* parameters, from the cubin's .nv.info.<name> */
    uint32_t *param_offsets, *param_sizes; /* owned, by ordinal */
};

struct sim_global_info {
    char *name;
    uint64_t size;
    const uint8_t *init; /* initial bytes (in the unpacked code), or NULL for zeros */
};

/* The kernels and globals of unpacked code. */
struct sim_symbols {
    int nkernels, nglobals;
    struct sim_kernel_info *kernels;
    struct sim_global_info *globals;
    uint8_t *unpacked; /* owned: the code's bytes, which globals' init points into */
};

/* Unpacks `code` and lists its symbols; 0, or -1 with `err` set. */
int sim_code_symbols(const struct sim_code *code, struct sim_symbols *out, char *err,
                     size_t errlen);
void sim_symbols_free(struct sim_symbols *s);

/* cubin.c: the symbols of one ELF cubin / of PTX text (`size` bytes, not NUL-terminated). */
int sim_elf_symbols(const uint8_t *elf, size_t size, struct sim_symbols *out, char *err,
                    size_t errlen);
int sim_ptx_symbols(const char *ptx, size_t size, struct sim_symbols *out);

/* lz4.c: LZ4 block decompression; the number of bytes written, or -1 when malformed. */
long sim_lz4_unpack(const uint8_t *src, size_t srclen, uint8_t *dst, size_t dstlen);

#endif /* HAMI_SIM_IMAGE_H */
