/* What a cubin (an ELF file for one SM version) or PTX text holds: its kernels, with what
 * cuFuncGetAttribute reports about them, and its global variables.
 *
 * In a cubin (public ELF facts, checked against nvcc's output in PyTorch's wheels) a kernel is
 * a global STT_FUNC symbol marked STO_CUDA_ENTRY (st_other 0x10) in section `.text.<name>`,
 * whose sh_info carries the registers per thread in its top byte; `.nv.shared.<name>` is its
 * static shared memory and `.nv.constant0.<name>` its parameter bank. Globals are STT_OBJECT
 * symbols in `.nv.global*` (zeroed) or `.nv.constantN` (N > 0, initialised) sections. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

#define SHT_NOBITS 8
#define STT_OBJECT 1
#define STT_FUNC 2
#define STO_CUDA_ENTRY 0x10

struct elf_section {
    uint32_t name, type;
    uint64_t flags, addr, offset, size;
    uint32_t link, info;
    uint64_t align, entsize;
};

struct elf_symbol {
    uint32_t name;
    uint8_t info, other;
    uint16_t shndx;
    uint64_t value, size;
};

struct elf {
    const uint8_t *bytes;
    size_t size;
    const struct elf_section *sections;
    uint16_t count;
    const char *section_names;
    size_t section_names_size;
};

static const char *section_name(const struct elf *e, uint16_t i)
{
    if (i >= e->count || e->sections[i].name >= e->section_names_size)
        return "";
    return e->section_names + e->sections[i].name;
}

/* The section called `<prefix><kernel>`, or NULL. */
static const struct elf_section *find_section(const struct elf *e, const char *prefix,
                                              const char *kernel)
{
    size_t plen = strlen(prefix);
    for (uint16_t i = 0; i < e->count; i++) {
        const char *n = section_name(e, i);
        if (strncmp(n, prefix, plen) == 0 && strcmp(n + plen, kernel) == 0)
            return &e->sections[i];
    }
    return NULL;
}

static uint64_t section_size(const struct elf *e, const char *prefix, const char *kernel)
{
    const struct elf_section *s = find_section(e, prefix, kernel);
    return s ? s->size : 0;
}

static int open_elf(const uint8_t *bytes, size_t size, struct elf *e, char *err, size_t errlen)
{
    uint64_t shoff;
    uint16_t shentsize, shnum, shstrndx;
    if (size < 64 || bytes[4] != 2 /* ELFCLASS64 */) {
        snprintf(err, errlen, "cubin is not a 64-bit ELF file");
        return -1;
    }
    memcpy(&shoff, bytes + 0x28, 8);
    memcpy(&shentsize, bytes + 0x3a, 2);
    memcpy(&shnum, bytes + 0x3c, 2);
    memcpy(&shstrndx, bytes + 0x3e, 2);
    if (shentsize != sizeof(struct elf_section) || shoff > size ||
        (uint64_t)shnum * shentsize > size - shoff || shstrndx >= shnum || (shoff & 7)) {
        snprintf(err, errlen, "cubin section table is malformed");
        return -1;
    }
    e->bytes = bytes;
    e->size = size;
    e->sections = (const void *)(bytes + shoff);
    e->count = shnum;
    const struct elf_section *names = &e->sections[shstrndx];
    if (names->offset > size || names->size > size - names->offset) {
        snprintf(err, errlen, "cubin section names are out of bounds");
        return -1;
    }
    e->section_names = (const char *)bytes + names->offset;
    e->section_names_size = names->size;
    return 0;
}

/* A kernel's `.nv.info.<name>` section: entries of {u8 format, u8 attribute, u16 value or
 * size}; format 4 entries carry `size` bytes after the header. EIATTR_KPARAM_INFO (0x17)
 * describes one parameter: {u32 index, u16 ordinal, u16 offset, u32 with the size in bits
 * 18-31}; EIATTR_MAX_THREADS (0x05) the x, y, z bounds of __launch_bounds__. */
#define EIFMT_SVAL 4
#define EIATTR_MAX_THREADS 0x05
#define EIATTR_KPARAM_INFO 0x17

static int add_param(struct sim_kernel_info *k, uint16_t ordinal, uint16_t offset, uint32_t size)
{
    if (ordinal >= 4096)
        return 0;
    if (ordinal >= k->nparams) {
        uint32_t n = ordinal + 1u;
        uint32_t *o = realloc(k->param_offsets, n * sizeof *o);
        if (!o)
            return -1;
        k->param_offsets = o;
        uint32_t *z = realloc(k->param_sizes, n * sizeof *z);
        if (!z)
            return -1;
        k->param_sizes = z;
        for (uint32_t i = k->nparams; i < n; i++)
            k->param_offsets[i] = k->param_sizes[i] = 0;
        k->nparams = n;
    }
    k->param_offsets[ordinal] = offset;
    k->param_sizes[ordinal] = size;
    return 0;
}

static int read_info(struct sim_kernel_info *k, const uint8_t *p, uint64_t size)
{
    for (uint64_t at = 0; at + 4 <= size;) {
        uint8_t format = p[at], attr = p[at + 1];
        uint16_t value;
        memcpy(&value, p + at + 2, 2);
        uint64_t len = format == EIFMT_SVAL ? value : 0;
        if (at + 4 + len > size)
            break;
        const uint8_t *v = p + at + 4;
        if (format == EIFMT_SVAL && attr == EIATTR_KPARAM_INFO && len >= 12) {
            uint16_t ordinal, offset;
            uint32_t packed;
            memcpy(&ordinal, v + 4, 2);
            memcpy(&offset, v + 6, 2);
            memcpy(&packed, v + 8, 4);
            if (add_param(k, ordinal, offset, (packed >> 18) & 0x3fff) < 0)
                return -1;
        } else if (format == EIFMT_SVAL && attr == EIATTR_MAX_THREADS && len >= 12) {
            uint32_t dims[3];
            memcpy(dims, v, sizeof dims);
            uint64_t bound = (uint64_t)dims[0] * (dims[1] ? dims[1] : 1) * (dims[2] ? dims[2] : 1);
            if (bound && bound < k->max_threads)
                k->max_threads = (uint32_t)bound;
        }
        at += 4 + len;
    }
    return 0;
}

static uint32_t max_threads_for(uint32_t regs)
{
    /* registers are given out per warp in units of 256 from a 64 Ki file per block */
    if (regs == 0)
        return 1024;
    uint32_t per_warp = (regs * 32 + 255) / 256 * 256;
    uint32_t warps = 65536 / per_warp;
    return warps * 32 < 1024 ? warps * 32 : 1024;
}

/* Room for one more entry of `size` bytes at the end of an array of `count`: the new entry,
 * zeroed (the caller counts it once it is filled), or NULL when out of memory. */
static void *grow(void **array, int count, size_t size)
{
    char *grown = realloc(*array, (size_t)(count + 1) * size);
    if (!grown)
        return NULL;
    *array = grown;
    return memset(grown + (size_t)count * size, 0, size);
}

static int add_kernel(struct sim_symbols *out, const struct elf *e, const char *name,
                      const struct elf_symbol *sym)
{
    struct sim_kernel_info *k = grow((void **)&out->kernels, out->nkernels, sizeof *k);
    if (!k || !(k->name = strdup(name)))
        return -1;
    out->nkernels++;
    if (sym->shndx < e->count)
        k->regs = e->sections[sym->shndx].info >> 24;
    k->shared_bytes = (uint32_t)section_size(e, ".nv.shared.", name);
    k->param_bytes = (uint32_t)section_size(e, ".nv.constant0.", name);
    k->max_threads = max_threads_for(k->regs);
    const struct elf_section *info = find_section(e, ".nv.info.", name);
    if (info && info->offset <= e->size && info->size <= e->size - info->offset)
        return read_info(k, e->bytes + info->offset, info->size);
    return 0;
}

static int add_global(struct sim_symbols *out, const struct elf *e, const char *name,
                      const struct elf_symbol *sym)
{
    const char *sec = section_name(e, sym->shndx);
    int global = strncmp(sec, ".nv.global", 10) == 0;
    int constant = strncmp(sec, ".nv.constant", 12) == 0 && strncmp(sec, ".nv.constant0", 13);
    if (!global && !constant)
        return 0;
    struct sim_global_info *g = grow((void **)&out->globals, out->nglobals, sizeof *g);
    if (!g || !(g->name = strdup(name)))
        return -1;
    out->nglobals++;
    g->size = sym->size;
    const struct elf_section *s = &e->sections[sym->shndx];
    if (s->type != SHT_NOBITS && s->offset <= e->size && sym->value <= s->size &&
        sym->size <= s->size - sym->value && s->offset + s->size <= e->size)
        g->init = e->bytes + s->offset + sym->value;
    return 0;
}

int sim_elf_symbols(const uint8_t *bytes, size_t size, struct sim_symbols *out, char *err,
                    size_t errlen)
{
    struct elf e;
    if (open_elf(bytes, size, &e, err, errlen) < 0)
        return -1;
    for (uint16_t i = 0; i < e.count; i++) {
        const struct elf_section *st = &e.sections[i];
        if (st->type != 2 /* SHT_SYMTAB */)
            continue;
        if (st->link >= e.count || st->offset > size || st->size > size - st->offset ||
            e.sections[st->link].offset > size) {
            snprintf(err, errlen, "cubin symbol table is out of bounds");
            return -1;
        }
        const struct elf_section *strs = &e.sections[st->link];
        const char *names = (const char *)bytes + strs->offset;
        for (uint64_t j = 0; j < st->size / sizeof(struct elf_symbol); j++) {
            struct elf_symbol sym;
            memcpy(&sym, bytes + st->offset + j * sizeof sym, sizeof sym);
            if (sym.name >= strs->size || strs->offset + strs->size > size)
                continue;
            const char *name = names + sym.name;
            int type = sym.info & 15, rc = 0;
            if (type == STT_FUNC && (sym.other & STO_CUDA_ENTRY))
                rc = add_kernel(out, &e, name, &sym);
            else if (type == STT_OBJECT && sym.shndx < e.count)
                rc = add_global(out, &e, name, &sym);
            if (rc < 0) {
                snprintf(err, errlen, "out of host memory");
                return -1;
            }
        }
    }
    return 0;
}

/* ---- PTX: `.entry NAME(` kernels and top-level `.global` / `.const` variables ---- */

static const char *skip_space(const char *p, const char *end)
{
    while (p < end && isspace((unsigned char)*p))
        p++;
    return p;
}

static size_t word(const char *p, const char *end)
{
    size_t n = 0;
    while (p + n < end && (isalnum((unsigned char)p[n]) || p[n] == '_' || p[n] == '$'))
        n++;
    return n;
}

static uint64_t ptx_type_size(const char *t, size_t n)
{
    if (n < 3)
        return 0;
    return (uint64_t)strtoul(t + 2, NULL, 10) / 8; /* .b8 .u32 .f64 ... */
}

static int ptx_variable(struct sim_symbols *out, const char *p, const char *end)
{
    /* after `.global` / `.const`: [.align N] .TYPE NAME[[COUNT]] */
    uint64_t elem = 0;
    for (;;) {
        p = skip_space(p, end);
        if (p >= end || *p != '.')
            break;
        size_t n = 1 + word(p + 1, end);
        if (n == 6 && strncmp(p, ".align", 6) == 0) {
            p = skip_space(p + n, end);
            p += word(p, end);
            continue;
        }
        if (ptx_type_size(p, n))
            elem = ptx_type_size(p, n);
        p += n;
    }
    size_t n = word(p, end);
    if (!n || !elem)
        return 0;
    uint64_t count = 1;
    if (p + n < end && p[n] == '[')
        count = strtoull(p + n + 1, NULL, 10);
    struct sim_global_info *g = realloc(out->globals, (out->nglobals + 1) * sizeof *g);
    if (!g)
        return -1;
    out->globals = g;
    g += out->nglobals;
    memset(g, 0, sizeof *g);
    if (!(g->name = strndup(p, n)))
        return -1;
    out->nglobals++;
    g->size = elem * (count ? count : 1);
    return 0;
}

int sim_ptx_symbols(const char *ptx, size_t size, struct sim_symbols *out)
{
    const char *p = ptx, *end = ptx + size;
    int depth = 0;
    for (; p < end; p++) {
        if (*p == '{' || *p == '}') {
            depth += *p == '{' ? 1 : -1;
            continue;
        }
        if (*p != '.' || depth != 0 || (p > ptx && !isspace((unsigned char)p[-1])))
            continue;
        int rc = 0;
        if (strncmp(p, ".entry", 6) == 0 && isspace((unsigned char)p[6])) {
            const char *name = skip_space(p + 6, end);
            size_t n = word(name, end);
            struct sim_kernel_info *k = realloc(out->kernels, (out->nkernels + 1) * sizeof *k);
            if (!k || !n)
                return k ? 0 : -1;
            out->kernels = k;
            memset(&k[out->nkernels], 0, sizeof *k);
            if (!(k[out->nkernels].name = strndup(name, n)))
                return -1;
            k[out->nkernels++].max_threads = 1024;
        } else if (strncmp(p, ".global", 7) == 0 && isspace((unsigned char)p[7])) {
            rc = ptx_variable(out, p + 7, end);
        } else if (strncmp(p, ".const", 6) == 0 && isspace((unsigned char)p[6])) {
            rc = ptx_variable(out, p + 6, end);
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}
