/* Fat binaries: the container nvcc embeds in every program and library with CUDA code (the
 * `.nv_fatbin` section), holding one cubin per SM version and/or PTX, each optionally
 * compressed (LZ4, or zstd since CUDA 12.8's `-compress-mode=size`, which PyTorch uses).
 *
 * Layout (public knowledge, checked against PyTorch's and cuBLAS's binaries): a 16-byte
 * header {u32 magic 0xBA55ED50, u16 version 1, u16 header size, u64 size of the entries},
 * then entries, each a header {u16 kind (1 PTX, 2 ELF), u16 version 0x101, u32 header size,
 * u64 padded payload size, u32 stored payload size, ..., u32 SM version at 28, u64 flags at
 * 40, u64 unpacked size at 56} followed by its payload. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"
#include "sim.h" /* the glibc floor of dlsym */

#define ENTRY_PTX 1
#define ENTRY_ELF 2
#define FLAG_LZ4 0x2000ull
#define FLAG_ZSTD 0x8000ull
#define MAX_UNPACKED (1ull << 31)

struct fatbin_header {
    uint32_t magic;
    uint16_t version, header_size;
    uint64_t entries_size;
};

struct entry_header {
    uint16_t kind, version;
    uint32_t header_size;
    uint64_t padded_size;
    uint32_t stored_size, unknown0, unknown1, sm;
    uint32_t unknown2, unknown3;
    uint64_t flags, unknown4, unpacked_size;
};
_Static_assert(sizeof(struct entry_header) == 64, "fatbin entry header layout");

static int is_elf(const uint8_t *p) { return p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F'; }

static int looks_like_ptx(const char *p)
{
    /* PTX text starts with comments or directives and always has a .version directive */
    size_t i = 0;
    while (i < 4096 && p[i] && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    return (p[i] == '/' || p[i] == '.') && strstr(p + i, ".version") != NULL;
}

/* Which entry a driver runs: the exact cubin, else the newest older cubin of the same major
 * version (binary compatibility), else PTX not newer than the device (JIT). */
static int better(const struct entry_header *e, const struct entry_header *best, int arch)
{
    int major = arch / 10;
    if (e->kind == ENTRY_ELF) {
        if ((int)e->sm / 10 != major || (int)e->sm > arch)
            return 0;
        return !best || best->kind != ENTRY_ELF || e->sm > best->sm;
    }
    if (e->kind == ENTRY_PTX && (int)e->sm <= arch)
        return !best || (best->kind == ENTRY_PTX && e->sm > best->sm);
    return 0;
}

static int copy_code(struct sim_code *out, enum sim_code_kind kind, int arch, const void *p,
                     size_t n)
{
    out->bytes = malloc(n ? n : 1);
    if (!out->bytes)
        return -1;
    memcpy(out->bytes, p, n);
    out->kind = kind;
    out->arch = arch;
    out->size = n;
    return 0;
}

static int choose_from_fatbin(const uint8_t *image, int arch, struct sim_code *out, char *err,
                              size_t errlen)
{
    const struct fatbin_header *h = (const void *)image;
    if (h->version != 1 || h->header_size < sizeof *h) {
        snprintf(err, errlen, "fat binary version %u / header size %u not understood",
                 h->version, h->header_size);
        return -1;
    }
    const uint8_t *p = image + h->header_size, *end = p + h->entries_size;
    const struct entry_header *best = NULL;
    int entries = 0;
    while (p + sizeof(struct entry_header) <= end) {
        const struct entry_header *e = (const void *)p;
        if (e->header_size < sizeof *e || e->stored_size > e->padded_size) {
            snprintf(err, errlen, "fat binary entry %d is malformed", entries);
            return -1;
        }
        if (better(e, best, arch))
            best = e;
        entries++;
        p += e->header_size + e->padded_size;
    }
    if (!best) {
        snprintf(err, errlen, "none of the %d images is for sm_%d", entries, arch);
        return -1;
    }
    const uint8_t *payload = (const uint8_t *)best + best->header_size;
    if (copy_code(out, best->kind == ENTRY_ELF ? SIM_CODE_ELF : SIM_CODE_PTX, (int)best->sm,
                  payload, best->stored_size) < 0) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    out->compression = (best->flags & FLAG_ZSTD) ? SIM_PACK_ZSTD
                       : (best->flags & FLAG_LZ4) ? SIM_PACK_LZ4 : SIM_PACK_NONE;
    out->unpacked_size = out->compression ? best->unpacked_size : best->stored_size;
    return 0;
}

int sim_code_choose(const void *image, int arch, struct sim_code *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const uint8_t *p = image;
    /* byte by byte, so that a short test image is never read past its end */
    if (p[0] == 0x50 && p[1] == 0xed && p[2] == 0x55 && p[3] == 0xba)
        return choose_from_fatbin(p, arch, out, err, errlen);
    int rc = 0;
    if (is_elf(p)) {
        /* a bare cubin: its size is where its section headers end */
        uint64_t shoff;
        uint16_t shentsize, shnum;
        memcpy(&shoff, p + 0x28, 8);
        memcpy(&shentsize, p + 0x3a, 2);
        memcpy(&shnum, p + 0x3c, 2);
        rc = copy_code(out, SIM_CODE_ELF, arch, p, shoff + (uint64_t)shentsize * shnum);
    } else if (looks_like_ptx(image)) {
        rc = copy_code(out, SIM_CODE_PTX, arch, p, strlen(image));
    } else {
        out->kind = SIM_CODE_TEST; /* not CUDA code: the simulator's test image */
    }
    if (rc < 0)
        snprintf(err, errlen, "out of host memory");
    out->unpacked_size = out->size;
    return rc;
}

void sim_code_free(struct sim_code *code)
{
    free(code->bytes);
    memset(code, 0, sizeof *code);
}

/* zstd comes from the system's libzstd (a dependency of dpkg on every Debian system),
 * loaded on first use. */
typedef size_t (*zstd_decompress_fn)(void *, size_t, const void *, size_t);
typedef unsigned (*zstd_is_error_fn)(size_t);
static zstd_decompress_fn zstd_decompress;
static zstd_is_error_fn zstd_is_error;

static void load_zstd(void)
{
    void *lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return;
    zstd_decompress = (zstd_decompress_fn)dlsym(lib, "ZSTD_decompress");
    zstd_is_error = (zstd_is_error_fn)dlsym(lib, "ZSTD_isError");
}

static long unpack_zstd(const struct sim_code *code, uint8_t *dst, char *err, size_t errlen)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_zstd);
    if (!zstd_decompress || !zstd_is_error) {
        snprintf(err, errlen, "the image is zstd-compressed and libzstd.so.1 cannot be loaded "
                              "(install libzstd1)");
        return -1;
    }
    size_t n = zstd_decompress(dst, code->unpacked_size, code->bytes, code->size);
    if (zstd_is_error(n)) {
        snprintf(err, errlen, "the image's zstd payload is corrupt");
        return -1;
    }
    return (long)n;
}

int sim_code_symbols(const struct sim_code *code, struct sim_symbols *out, char *err,
                     size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (code->kind == SIM_CODE_TEST)
        return 0;
    if (code->unpacked_size > MAX_UNPACKED) {
        snprintf(err, errlen, "image of %llu bytes is too large",
                 (unsigned long long)code->unpacked_size);
        return -1;
    }
    uint8_t *bytes = malloc(code->unpacked_size + 1);
    if (!bytes) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    long n = (long)code->size;
    if (code->compression == SIM_PACK_ZSTD)
        n = unpack_zstd(code, bytes, err, errlen);
    else if (code->compression == SIM_PACK_LZ4)
        n = sim_lz4_unpack(code->bytes, code->size, bytes, code->unpacked_size);
    else
        memcpy(bytes, code->bytes, code->size);
    if (n < 0 && code->compression == SIM_PACK_LZ4)
        snprintf(err, errlen, "the image's LZ4 payload is corrupt");
    int rc = -1;
    if (n >= 0) {
        bytes[n] = '\0';
        rc = code->kind == SIM_CODE_ELF
                 ? sim_elf_symbols(bytes, (size_t)n, out, err, errlen)
                 : sim_ptx_symbols((const char *)bytes, (size_t)n, out);
    }
    if (rc < 0) {
        free(bytes);
        return -1;
    }
    out->unpacked = bytes;
    return 0;
}

void sim_symbols_free(struct sim_symbols *s)
{
    for (int i = 0; i < s->nkernels; i++) {
        free(s->kernels[i].name);
        free(s->kernels[i].param_offsets);
        free(s->kernels[i].param_sizes);
    }
    for (int i = 0; i < s->nglobals; i++)
        free(s->globals[i].name);
    free(s->kernels);
    free(s->globals);
    free(s->unpacked);
    memset(s, 0, sizeof *s);
}
