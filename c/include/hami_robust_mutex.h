/* A pthread mutex for a MAP_SHARED file: process-shared and robust, so a holder killed at
 * any instant leaves it EOWNERDEAD for the next locker instead of locked forever. Used by the
 * simulated driver's state file and the shim's accounting file. */
#ifndef HAMI_ROBUST_MUTEX_H
#define HAMI_ROBUST_MUTEX_H

#include <pthread.h>

static inline void hami_robust_mutex_init(void *storage)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init((pthread_mutex_t *)storage, &attr);
    pthread_mutexattr_destroy(&attr);
}

#endif /* HAMI_ROBUST_MUTEX_H */
