/* clock.c: monotonic and wall clocks. */
#include "clock.h"

#include <stdatomic.h>
#include <time.h>

int64_t clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

int64_t clock_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / NS_PER_MS;
}

int64_t clock_mono_of_wall_ms(int64_t wall_ms)
{
    static _Atomic int64_t offset_ns; /* mono - wall; 0 until the first call */
    int64_t off = atomic_load_explicit(&offset_ns, memory_order_relaxed);
    if (off == 0) {
        int64_t mine = clock_mono_ns() - clock_wall_ms() * NS_PER_MS;
        if (mine == 0)
            mine = 1;
        /* A thread that lost the race takes the winner's offset. */
        off = atomic_compare_exchange_strong(&offset_ns, &off, mine) ? mine : off;
    }
    return off + wall_ms * NS_PER_MS;
}
