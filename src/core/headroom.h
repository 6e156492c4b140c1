/* headroom.h: the adaptive interactive headroom (R8, issue 15) — how many GPUs
 * of an interactive capability must stay free of batch work so that
 * interactive jobs rarely wait, from the capability's measured interactive
 * load. Pure: no I/O, no clocks (`now` comes from the caller).
 *
 * The model: interactive arrivals of a capability are a Poisson stream of
 * offered load a Erlangs (arrival rate x mean service time, both measured:
 * decayed over sched_config.headroom_window_s), served by c GPUs kept free of
 * batch work (M/M/c). Erlang C gives P(wait > t) = C(c, a) x exp(-(c - a) t / S)
 * for mean service time S. The headroom is the smallest c with
 * P(wait > headroom_wait_s) <= headroom_share (0 while a is so small that no
 * GPU is needed). The scheduler then lets a batch job start on a GPU only when
 * at least that many other GPUs of each interactive capability it serves, at
 * least as good for interactive work (speed, thermal state), run no batch job
 * or finish theirs within headroom_wait_s (sched_score.c: batch_blocked). */
#ifndef GPUQ_CORE_HEADROOM_H
#define GPUQ_CORE_HEADROOM_H

#include <stdint.h>

#include "core/sched.h"

/* P(an arrival waits longer than t) in an M/M/c queue of offered load a
 * Erlangs, c servers, mean service time service_s; 1 when c <= a (unstable). */
double headroom_p_wait(int c, double a, double service_s, double t);

/* The smallest c in [0, max_c] with headroom_p_wait(c, a, service_s, t) <= share
 * (0 when a <= 0 or share >= 1); max_c + 1 when none up to max_c is enough. */
int headroom_servers(double a, double service_s, double t, double share, int max_c);

/* What the scheduler measured for capability cap now: its interactive offered
 * load (Erlangs), mean service time (nominal GPU-seconds) and the headroom in
 * GPUs (before the reserved floor). GPUQ_ENOENT for an unknown capability. */
struct headroom_figures {
    double erlangs;
    double service_s;
    int gpus;
};
int sched_headroom_get(const struct sched *s, const char *cap, int64_t now,
                       struct headroom_figures *out);

#endif
