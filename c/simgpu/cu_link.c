/* The JIT linker (cuLink*): libraries such as cuBLAS link device code at run time. The
 * simulator compiles nothing: linking hands back the code it was given, the first cubin or fat
 * binary added, else the PTX inputs joined into one text (its kernels are those of every PTX
 * input). cuModuleLoadData of the result lists the kernels as for any image. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"

struct link_state {
    uint32_t magic;
    uint8_t *code; /* a cubin / fat binary, owned */
    size_t code_size;
    char *ptx;     /* PTX inputs joined, owned */
    size_t ptx_size;
    void *result;  /* what cuLinkComplete returned: freed by cuLinkDestroy */
};

enum { INPUT_CUBIN = 0, INPUT_PTX = 1, INPUT_FATBINARY = 2 };

SIM_API CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options,
                                 void **optionValues, void **stateOut)
{
    (void)numOptions, (void)options, (void)optionValues;
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!stateOut)
        return CUDA_ERROR_INVALID_VALUE;
    struct link_state *l = calloc(1, sizeof *l);
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    l->magic = MAGIC_LINK;
    *stateOut = l;
    return CUDA_SUCCESS;
}

static CUresult add(struct link_state *l, int type, const void *data, size_t size)
{
    if (!l || l->magic != MAGIC_LINK || !data || !size)
        return CUDA_ERROR_INVALID_VALUE;
    if (type == INPUT_PTX) {
        size_t n = strnlen(data, size);
        char *joined = realloc(l->ptx, l->ptx_size + n + 2);
        if (!joined)
            return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(joined + l->ptx_size, data, n);
        joined[l->ptx_size + n] = '\n';
        joined[l->ptx_size + n + 1] = '\0';
        l->ptx = joined;
        l->ptx_size += n + 1;
        return CUDA_SUCCESS;
    }
    if (type != INPUT_CUBIN && type != INPUT_FATBINARY) {
        sim_driver_log("cuLinkAddData: input type %d is not modelled by the simulated driver",
                       type);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (l->code)
        return CUDA_SUCCESS; /* the first code input is the result */
    if (!(l->code = malloc(size)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(l->code, data, size);
    l->code_size = size;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuLinkAddData_v2(void *state, int type, void *data, size_t size, const char *name,
                                  unsigned int numOptions, CUjit_option *options,
                                  void **optionValues)
{
    (void)name, (void)numOptions, (void)options, (void)optionValues;
    CUresult rc = sim_cu_ready();
    return rc == CUDA_SUCCESS ? add(state, type, data, size) : rc;
}

SIM_API CUresult cuLinkAddFile_v2(void *state, int type, const char *path,
                                  unsigned int numOptions, CUjit_option *options,
                                  void **optionValues)
{
    (void)numOptions, (void)options, (void)optionValues;
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n > 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        rc = add(state, type, buf, (size_t)n + (type == INPUT_PTX));
    } else {
        rc = buf ? CUDA_ERROR_FILE_NOT_FOUND : CUDA_ERROR_INVALID_VALUE;
    }
    free(buf);
    fclose(f);
    return rc;
}

SIM_API CUresult cuLinkComplete(void *state, void **cubinOut, size_t *sizeOut)
{
    struct link_state *l = state;
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!l || l->magic != MAGIC_LINK || !cubinOut)
        return CUDA_ERROR_INVALID_VALUE;
    const void *src = l->code ? (const void *)l->code : l->ptx;
    size_t n = l->code ? l->code_size : l->ptx_size + 1;
    if (!src)
        return CUDA_ERROR_INVALID_VALUE; /* nothing was added */
    free(l->result);
    if (!(l->result = malloc(n)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(l->result, src, n);
    *cubinOut = l->result;
    if (sizeOut)
        *sizeOut = n;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuLinkDestroy(void *state)
{
    struct link_state *l = state;
    CUresult rc = sim_cu_ready();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!l || l->magic != MAGIC_LINK)
        return CUDA_ERROR_INVALID_HANDLE;
    l->magic = MAGIC_DEAD;
    free(l->code);
    free(l->ptx);
    free(l->result);
    free(l);
    return CUDA_SUCCESS;
}
