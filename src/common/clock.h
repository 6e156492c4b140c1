/* clock.h: the two clocks. Monotonic nanoseconds for timers and leases; wall
 * time (Unix milliseconds) only for display and persisted deadlines. */
#ifndef GPUQ_CLOCK_H
#define GPUQ_CLOCK_H

#include <stdint.h>

#define NS_PER_MS INT64_C(1000000)
#define NS_PER_S INT64_C(1000000000)

int64_t clock_mono_ns(void);
int64_t clock_wall_ms(void);

#endif
