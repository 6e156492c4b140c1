/* timer.h: a timer thread — callbacks at monotonic deadlines, for the waits
 * that sit on suspended connections (long-polls, event-stream keep-alives).
 * A timer cannot be cancelled: its callback must find out by itself whether
 * it still has anything to do (the owner keeps a reference for it). On
 * destroy, pending timers fire at once, so owners can release what they hold. */
#ifndef GPUQ_TIMER_H
#define GPUQ_TIMER_H

#include <stdint.h>

struct timers;

struct timers *timers_create(void);
void timers_destroy(struct timers *t);
/* fire(arg) runs on the timer thread at or after deadline_ns (CLOCK_MONOTONIC). */
void timers_add(struct timers *t, int64_t deadline_ns, void (*fire)(void *arg), void *arg);

#endif
