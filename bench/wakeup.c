/* wakeup.c: gpuq-bench-wakeup, what it costs this machine to wake a sleeping
 * thread: the yardstick beside `make bench`'s latencies. A job passes
 * between a dozen threads and processes (bench/README.md, "One connection,
 * wake-up by wake-up"), and each hand-off is a wake-up; what one costs is
 * the machine's, not gpuq's (about 2 µs on one CPU, 30-50 µs across CPUs on a
 * nested VM whose idle vCPUs halt at once: bench/README.md, "What a wake-up
 * costs on this box").
 *
 * Two processes pass one byte back and forth over two pipes, each blocked
 * in read() until the other writes: a round trip is two wake-ups. Measured
 * twice: with the two pinned to two different CPUs (the wake-up crosses to
 * a CPU that is idle, as on a lightly loaded box), then both on one CPU (a
 * switch between them). Prints the median and the mean of a wake-up (half a
 * round trip) for each; with one usable CPU, only the second. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "lat.h"

#define ROUND_TRIPS_MAX 1000000
#define WARMUP 200

struct figure {
    double p50_us, mean_us;
};

static int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}

/* The echo side: reads a byte, writes it back, until the pipe closes. */
static void echo(int in, int out, int cpu)
{
    if (pin(cpu) != 0)
        _exit(3);
    char c;
    while (read(in, &c, 1) == 1)
        if (write(out, &c, 1) != 1)
            _exit(4);
    _exit(0);
}

/* n timed round trips (after WARMUP untimed) between this process on
 * cpu_self and a child on cpu_child. Returns 0, or -1 with a message. */
static int measure(int cpu_self, int cpu_child, int n, struct figure *f)
{
    int to[2], back[2];
    if (pipe(to) != 0 || pipe(back) != 0) {
        perror("gpuq-bench-wakeup: pipe");
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("gpuq-bench-wakeup: fork");
        return -1;
    }
    if (pid == 0) {
        close(to[1]);
        close(back[0]);
        echo(to[0], back[1], cpu_child);
    }
    close(to[0]);
    close(back[1]);
    int rc = pin(cpu_self);
    if (rc != 0)
        fprintf(stderr, "gpuq-bench-wakeup: pinning to CPU %d: %s\n", cpu_self, strerror(errno));
    struct lat l;
    lat_init(&l);
    int64_t total = 0;
    char c = 'x';
    for (int i = 0; rc == 0 && i < WARMUP + n; i++) {
        int64_t t0 = clock_mono_ns();
        if (write(to[1], &c, 1) != 1 || read(back[0], &c, 1) != 1) {
            fprintf(stderr, "gpuq-bench-wakeup: the echo process stopped answering\n");
            rc = -1;
            break;
        }
        int64_t dt = clock_mono_ns() - t0;
        if (i >= WARMUP) {
            lat_add(&l, dt);
            total += dt;
        }
    }
    close(to[1]); /* the echo side reads EOF and exits */
    close(back[0]);
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        if (rc == 0)
            fprintf(stderr, "gpuq-bench-wakeup: the echo process failed (status %d)\n", st);
        rc = -1;
    }
    if (rc == 0) {
        f->p50_us = (double)lat_pct(&l, 50) / 2e3;
        f->mean_us = (double)total / n / 2e3;
    }
    lat_fini(&l);
    return rc;
}

static void usage(FILE *to)
{
    fprintf(to, "usage: gpuq-bench-wakeup [--round-trips N] [--kv]\n"
                "  --round-trips  timed round trips each way, 1..%d (default 20000)\n"
                "  --kv           print key=value lines for scripts\n",
            ROUND_TRIPS_MAX);
}

int main(int argc, char **argv)
{
    int n = 20000, kv = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--round-trips") == 0 && i + 1 < argc) {
            char *end = NULL;
            long v = strtol(argv[++i], &end, 10);
            if (end == argv[i] || *end || v < 1 || v > ROUND_TRIPS_MAX) {
                fprintf(stderr, "gpuq-bench-wakeup: --round-trips: an integer in [1, %d], not '%s'\n",
                        ROUND_TRIPS_MAX, argv[i]);
                return 2;
            }
            n = (int)v;
        } else if (strcmp(argv[i], "--kv") == 0) {
            kv = 1;
        } else if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    /* The first two CPUs this process may use. */
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
        perror("gpuq-bench-wakeup: sched_getaffinity");
        return 1;
    }
    int cpus[2] = {-1, -1}, ncpus = 0;
    for (int c = 0; c < CPU_SETSIZE && ncpus < 2; c++)
        if (CPU_ISSET(c, &allowed))
            cpus[ncpus++] = c;
    if (ncpus == 0) {
        fprintf(stderr, "gpuq-bench-wakeup: no CPU to run on\n");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    struct figure apart = {0}, together = {0};
    bool has_apart = ncpus == 2;
    if (has_apart && measure(cpus[0], cpus[1], n, &apart) != 0)
        return 1;
    if (measure(cpus[0], cpus[0], n, &together) != 0)
        return 1;
    if (kv) {
        if (has_apart)
            printf("wakeup_us_across_cpus=%.2f\nwakeup_us_across_cpus_mean=%.2f\n", apart.p50_us,
                   apart.mean_us);
        printf("wakeup_us_one_cpu=%.2f\nwakeup_us_one_cpu_mean=%.2f\nround_trips=%d\n",
               together.p50_us, together.mean_us, n);
    } else {
        if (has_apart)
            printf("gpuq-bench-wakeup: a wake-up across CPUs %d and %d: median %.2f µs, "
                   "mean %.2f µs\n",
                   cpus[0], cpus[1], apart.p50_us, apart.mean_us);
        else
            printf("gpuq-bench-wakeup: one CPU usable: no wake-up across CPUs\n");
        printf("gpuq-bench-wakeup: a wake-up on CPU %d: median %.2f µs, mean %.2f µs "
               "(%d round trips each)\n",
               cpus[0], together.p50_us, together.mean_us, n);
    }
    return 0;
}
