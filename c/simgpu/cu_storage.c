/* The CUDA runtime's per-context storage (export table "context local storage"): the runtime
 * keeps its own state for each context under a key, and the driver calls the value's
 * destructor when the context goes (destroyed, or a primary context reset or released for the
 * last time), so that a runtime never uses state of a context that is gone. */
#include <stdlib.h>

#include "cu_internal.h"

struct entry {
    struct CUctx_st *ctx;
    void *key, *value;
    sim_storage_dtor dtor;
    struct entry *next;
};

static struct entry *entries;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult resolve(CUcontext ctx, struct CUctx_st **out)
{
    if (ctx) {
        if (ctx->magic != MAGIC_CTX)
            return CUDA_ERROR_INVALID_CONTEXT;
        *out = ctx;
        return CUDA_SUCCESS;
    }
    return sim_require_ctx(out);
}

static struct entry **find(struct CUctx_st *c, void *key)
{
    struct entry **e = &entries;
    while (*e && ((*e)->ctx != c || (*e)->key != key))
        e = &(*e)->next;
    return e;
}

CUresult sim_ctx_storage_put(CUcontext ctx, void *key, void *value, sim_storage_dtor dtor)
{
    struct CUctx_st *c = NULL;
    CUresult rc = resolve(ctx, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&lock);
    struct entry **e = find(c, key);
    if (!*e && (*e = calloc(1, sizeof **e)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        (*e)->ctx = c;
        (*e)->key = key;
        (*e)->value = value;
        (*e)->dtor = dtor;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult sim_ctx_storage_delete(CUcontext ctx, void *key)
{
    struct CUctx_st *c = NULL;
    CUresult rc = resolve(ctx, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&lock);
    struct entry **e = find(c, key), *gone = *e;
    if (gone)
        *e = gone->next;
    pthread_mutex_unlock(&lock);
    free(gone);
    return CUDA_SUCCESS;
}

CUresult sim_ctx_storage_get(void **value, CUcontext ctx, void *key)
{
    struct CUctx_st *c = NULL;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    *value = NULL;
    CUresult rc = resolve(ctx, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&lock);
    struct entry *e = *find(c, key);
    if (e)
        *value = e->value;
    pthread_mutex_unlock(&lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

void sim_ctx_storage_release(struct CUctx_st *c)
{
    for (;;) {
        pthread_mutex_lock(&lock);
        struct entry **e = &entries;
        while (*e && (*e)->ctx != c)
            e = &(*e)->next;
        struct entry *gone = *e;
        if (gone)
            *e = gone->next;
        pthread_mutex_unlock(&lock);
        if (!gone)
            return;
        if (gone->dtor) /* outside the lock: a destructor may call back into the driver */
            gone->dtor(c, gone->key, gone->value);
        free(gone);
    }
}
