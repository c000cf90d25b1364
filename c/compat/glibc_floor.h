/* Force-included (-include) into every object of the libraries that are mounted into containers
 * (libvgpu.so, the simulated libcuda.so.1 and libnvidia-ml.so.1): binds the glibc symbols that
 * glibc 2.33/2.34 gave new versions to their oldest versions, so the libraries load under any
 * glibc from 2.17 on (CentOS 7, UBI 8, Ubuntu 18.04/20.04, Debian bullseye). Without it the
 * loader refuses a preloaded libvgpu.so there and every process of the container exits.
 *
 * Symbols with no old version at all (fstat became a symbol in 2.33, memfd_create came in 2.27)
 * are redirected at link time (-Wl,--wrap) to glibc_floor.c. tests/shim/test_glibc_floor.py reads
 * the ELF files and fails when a new symbol needs a newer glibc: add it here then. */
#ifndef HAMI_GLIBC_FLOOR_H
#define HAMI_GLIBC_FLOOR_H

#if defined(__x86_64__)
#define HAMI_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define HAMI_GLIBC_BASE "GLIBC_2.17"
#endif

#ifdef HAMI_GLIBC_BASE
#define HAMI_GLIBC_SYMBOL(name, version) __asm__(".symver " #name "," #name "@" version)
/* libdl's and libpthread's functions, merged into libc.so.6 as GLIBC_2.34. Not dlsym: libvgpu.so
 * defines its own (loader.c finds the real one by dlvsym under each version). */
HAMI_GLIBC_SYMBOL(dlopen, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(dlclose, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(dlerror, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(dlvsym, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(dladdr, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_once, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_key_create, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_key_delete, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_getspecific, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_setspecific, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_create, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_join, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_detach, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_atfork, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_mutexattr_init, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_mutexattr_destroy, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_mutexattr_settype, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_mutexattr_setpshared, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_condattr_setpshared, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_condattr_setclock, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_mutex_trylock, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_mutex_timedlock, HAMI_GLIBC_BASE);
#if defined(__x86_64__)
/* robust mutexes arrived in 2.12 on x86-64 */
HAMI_GLIBC_SYMBOL(pthread_mutexattr_setrobust, "GLIBC_2.12");
HAMI_GLIBC_SYMBOL(pthread_mutex_consistent, "GLIBC_2.12");
#else
HAMI_GLIBC_SYMBOL(pthread_mutexattr_setrobust, HAMI_GLIBC_BASE);
HAMI_GLIBC_SYMBOL(pthread_mutex_consistent, HAMI_GLIBC_BASE);
#endif
#undef HAMI_GLIBC_SYMBOL
#endif

#endif
