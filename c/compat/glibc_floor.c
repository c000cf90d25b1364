/* Link-time stand-ins (-Wl,--wrap=NAME) for glibc functions that have no version old enough:
 * see glibc_floor.h. Hidden, so nothing outside the library sees them. */
#define _GNU_SOURCE
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* fstat was an inline wrapper over __fxstat before glibc 2.33; the system call is the same. */
HIDDEN int __wrap_fstat(int fd, struct stat *buf);
HIDDEN int __wrap_fstat(int fd, struct stat *buf)
{
    return (int)syscall(SYS_fstat, fd, buf);
}

/* memfd_create's wrapper arrived in glibc 2.27; the system call in Linux 3.17. */
HIDDEN int __wrap_memfd_create(const char *name, unsigned int flags);
HIDDEN int __wrap_memfd_create(const char *name, unsigned int flags)
{
    return (int)syscall(SYS_memfd_create, name, flags);
}
