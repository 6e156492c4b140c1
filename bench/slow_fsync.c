/* slow_fsync.c: libgpuq-slow-fsync.so, an LD_PRELOAD shim that makes every
 * fsync and fdatasync of the process wait GPUQ_SLOW_FSYNC_US microseconds
 * before the real call: a disk whose cache flush is slow (a consumer SSD
 * without power-loss protection takes 1-5 ms), on a machine whose own is
 * fast. For benchmarks only. Preloaded into a whole bench run, it slows every
 * peer's flushes alike (gpuqd's SQLite, beanstalkd's binlog, Redis's AOF,
 * and the harness's fsync probe, which then shows the delay). */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

typedef int (*sync_fn)(int);

static void delay(void)
{
    const char *v = getenv("GPUQ_SLOW_FSYNC_US");
    long us = v ? strtol(v, NULL, 10) : 0;
    if (us <= 0)
        return;
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int call(const char *name, int fd)
{
    sync_fn real = (sync_fn)dlsym(RTLD_NEXT, name);
    delay();
    return real ? real(fd) : -1;
}

int fsync(int fd)
{
    return call("fsync", fd);
}

int fdatasync(int fd)
{
    return call("fdatasync", fd);
}
