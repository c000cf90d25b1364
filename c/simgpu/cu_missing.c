/* HAMI_SIM_TRAP_MISSING=1 (a diagnostic for extending the simulator to a new client): a
 * driver API the simulator does not implement resolves, through cuGetProcAddress, to a stub
 * that names it on stderr when it is called and returns CUDA_ERROR_NOT_SUPPORTED, instead of
 * being NOT_FOUND. A client that resolves every entry point at start-up (NVIDIA's runtime
 * does) then says which missing one it actually calls. Off by default: with it on, callers
 * that fall back when a function is absent do not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"

#define STUBS 1024
static const char *stub_names[STUBS];
static int stubs_used;
static pthread_mutex_t stub_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult missing(void *stub);

#define STUB(i) static CUresult stub_##i(void) { return missing((void *)&stub_##i); }
#define STUB4(i) STUB(i##0) STUB(i##1) STUB(i##2) STUB(i##3)
#define STUB16(i) STUB4(i##0) STUB4(i##1) STUB4(i##2) STUB4(i##3)
#define STUB64(i) STUB16(i##0) STUB16(i##1) STUB16(i##2) STUB16(i##3)
#define STUB256(i) STUB64(i##0) STUB64(i##1) STUB64(i##2) STUB64(i##3)
/* stub_100000 .. stub_133333: 4 x 256 stubs (the digits after the first are base 4) */
STUB256(10) STUB256(11) STUB256(12) STUB256(13)

#define REF(i) (void *)&stub_##i,
#define REF4(i) REF(i##0) REF(i##1) REF(i##2) REF(i##3)
#define REF16(i) REF4(i##0) REF4(i##1) REF4(i##2) REF4(i##3)
#define REF64(i) REF16(i##0) REF16(i##1) REF16(i##2) REF16(i##3)
#define REF256(i) REF64(i##0) REF64(i##1) REF64(i##2) REF64(i##3)
static void *const stubs[STUBS] = {REF256(10) REF256(11) REF256(12) REF256(13)};

static CUresult missing(void *stub)
{
    for (int i = 0; i < STUBS; i++)
        if (stubs[i] == stub)
            fprintf(stderr, "hami-sim: called %s, which the simulator does not implement\n",
                    stub_names[i] ? stub_names[i] : "?");
    return CUDA_ERROR_NOT_SUPPORTED;
}

int sim_trap_missing(void)
{
    static int on = -1;
    if (on < 0)
        on = getenv("HAMI_SIM_TRAP_MISSING") != NULL;
    return on;
}

void *sim_missing_stub(const char *symbol)
{
    void *fn = NULL;
    pthread_mutex_lock(&stub_lock);
    for (int i = 0; i < stubs_used && !fn; i++)
        if (strcmp(stub_names[i], symbol) == 0)
            fn = stubs[i];
    if (!fn && stubs_used < STUBS) {
        stub_names[stubs_used] = symbol; /* a string of the static table */
        fn = stubs[stubs_used++];
    }
    pthread_mutex_unlock(&stub_lock);
    return fn;
}
