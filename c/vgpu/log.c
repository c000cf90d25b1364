/* One line per message on stderr, written with a single write() so lines of concurrent
 * processes never interleave. LIBCUDA_LOG_LEVEL: 0 errors, 1 warnings (default), 2 info,
 * 3-4 debug. */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "vgpu.h"

static int max_level = VGPU_LOG_WARN;

void vgpu_log_level(int level) { max_level = level; }

void vgpu_log(int level, const char *fmt, ...)
{
    if (level > max_level)
        return;
    char line[1024];
    int n = snprintf(line, sizeof line, "hami-vgpu: ");
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t rc = write(STDERR_FILENO, line, (size_t)n);
    (void)rc; /* nowhere left to report a failed write to stderr */
}
