/* clock.h: the two clocks. Monotonic nanoseconds for timers and leases; wall
 * time (Unix milliseconds) only for display and persisted deadlines. */
#ifndef GPUQ_CLOCK_H
#define GPUQ_CLOCK_H

#include <stdint.h>

#define NS_PER_MS INT64_C(1000000)
#define NS_PER_S INT64_C(1000000000)

int64_t clock_mono_ns(void);
int64_t clock_wall_ms(void);
/* The monotonic time of a past wall-clock instant, by one offset taken at the
 * first call and kept for the process: jobs stored in the same millisecond
 * map to the same instant, so their order keys do not jitter with the
 * moment each is read back. */
int64_t clock_mono_of_wall_ms(int64_t wall_ms);

#endif
