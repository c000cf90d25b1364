/* The driver's error log (cuLogs*, CUDA 12.9): what the driver says about a refused call,
 * handed to registered callbacks and kept for cuLogsDumpTo*. PyTorch registers a callback
 * and adds the driver's words to its CUDA error messages; the simulator logs its refusals
 * (a launch the kernel cannot take, a module with no code for the device) the same way. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"

#define LOG_ENTRIES 64
#define LOG_LINE 256
#define CALLBACKS 16

struct CUlogsCallbackEntry_st {
    CUlogsCallback fn;
    void *data;
};

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUlogsCallbackEntry_st callbacks[CALLBACKS];
static char lines[LOG_ENTRIES][LOG_LINE];
static unsigned int written; /* lines ever written; line i is lines[i % LOG_ENTRIES] */

void sim_driver_log(const char *fmt, ...)
{
    char line[LOG_LINE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    struct CUlogsCallbackEntry_st copy[CALLBACKS];
    pthread_mutex_lock(&log_lock);
    memcpy(lines[written++ % LOG_ENTRIES], line, sizeof line);
    memcpy(copy, callbacks, sizeof copy);
    pthread_mutex_unlock(&log_lock);
    for (int i = 0; i < CALLBACKS; i++) /* outside the lock: a callback may call the driver */
        if (copy[i].fn)
            copy[i].fn(copy[i].data, CU_LOG_LEVEL_ERROR, line, strlen(line));
}

SIM_API CUresult cuLogsRegisterCallback(CUlogsCallback fn, void *data, CUlogsCallbackHandle *out)
{
    if (!fn || !out)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&log_lock);
    for (int i = 0; i < CALLBACKS; i++) {
        if (!callbacks[i].fn) {
            callbacks[i].fn = fn;
            callbacks[i].data = data;
            *out = &callbacks[i];
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&log_lock);
    return rc;
}

SIM_API CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle callback)
{
    if (!callback || callback < callbacks || callback >= callbacks + CALLBACKS)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&log_lock);
    CUresult rc = callback->fn ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    callback->fn = NULL;
    pthread_mutex_unlock(&log_lock);
    return rc;
}

SIM_API CUresult cuLogsCurrent(CUlogIterator *iterator_out, unsigned int flags)
{
    if (!iterator_out || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&log_lock);
    *iterator_out = written;
    pthread_mutex_unlock(&log_lock);
    return CUDA_SUCCESS;
}

/* The lines since *iterator (all kept ones when NULL), each ending in a newline, into `out`
 * of `cap` bytes; advances *iterator. The bytes needed, NUL included. */
static size_t dump(CUlogIterator *iterator, char *out, size_t cap)
{
    size_t need = 1;
    pthread_mutex_lock(&log_lock);
    unsigned int from = iterator ? *iterator : 0;
    if (written - from > LOG_ENTRIES || from > written)
        from = written > LOG_ENTRIES ? written - LOG_ENTRIES : 0;
    for (unsigned int i = from; i < written; i++) {
        const char *line = lines[i % LOG_ENTRIES];
        size_t n = strlen(line);
        if (out && need + n + 1 <= cap) {
            memcpy(out + need - 1, line, n);
            out[need - 1 + n] = '\n';
        }
        need += n + 1;
    }
    if (out && cap)
        out[need <= cap ? need - 1 : cap - 1] = '\0';
    if (iterator)
        *iterator = written;
    pthread_mutex_unlock(&log_lock);
    return need;
}

SIM_API CUresult cuLogsDumpToMemory(CUlogIterator *iterator, char *buffer, size_t *size,
                                    unsigned int flags)
{
    if (!buffer || !size || flags)
        return CUDA_ERROR_INVALID_VALUE;
    size_t need = dump(iterator, buffer, *size);
    *size = need;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuLogsDumpToFile(CUlogIterator *iterator, const char *pathToFile,
                                  unsigned int flags)
{
    if (!pathToFile || flags)
        return CUDA_ERROR_INVALID_VALUE;
    size_t need = dump(iterator, NULL, 0);
    char *text = malloc(need);
    if (!text)
        return CUDA_ERROR_OUT_OF_MEMORY;
    dump(NULL, text, need);
    FILE *f = fopen(pathToFile, "a");
    if (!f) {
        free(text);
        return CUDA_ERROR_INVALID_VALUE;
    }
    fputs(text, f);
    fclose(f);
    free(text);
    return CUDA_SUCCESS;
}
