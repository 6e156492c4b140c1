/* preempt.h: preemption of batch work for interactive jobs (issue 15) — the
 * rule that decides when an interactive job may take a GPU running a batch
 * job, and which batch job is stopped. Pure like the rest of src/core: no I/O,
 * no clocks; gpuqd (src/head/dispatch.c) and gpuq-sim (src/sim/policy_gpuq.c)
 * call it after each dispatch round and carry the pick out the same way: the
 * victim's attempt ends through lc_preempt (no failure counted, its retry
 * budget and failed set untouched), its slot is freed with
 * sched_job_finished(ok = false) and it is queued again under its old order
 * key, so it stays at the front of its tenant's fair-share order.
 *
 * The rule, with bound = sched_config.preempt_after_s (0 = off): an
 * interactive job waits — queued (the interactive head of a (capability,
 * model) queue), or placed on a GPU whose slots are all held — and the time it
 * has waited plus the time until the first GPU able to run it frees a slot
 * (the running jobs' estimated ends) exceeds bound. No GPU able to run it has a
 * free slot (else it would start there, or waits by choice for a warm one).
 * Then, among the GPUs able to run it (members of its capability, usable,
 * large enough for its model, not excluded by it — a placed job moves to a
 * GPU freed elsewhere by late binding), each running batch job not already being stopped whose estimated
 * remaining time exceeds the interactive model's load there is a candidate;
 * the victim is the one losing least: its GPU-seconds of work done so far
 * (elapsed × the GPU's speed) plus the interactive job's model load there (0
 * when warm) and its run there (a slow or throttled GPU serves it later). Ties: the earliest-registered GPU, then the lower job id.
 * One preemption per interactive job. */
#ifndef GPUQ_CORE_PREEMPT_H
#define GPUQ_CORE_PREEMPT_H

#include <stdint.h>

#include "core/sched.h"

struct sched_preempt {
    uint64_t victim;                /* the batch job to stop */
    uint64_t for_job;               /* the interactive job that needs a GPU */
    char worker[SCHED_NAME_MAX];    /* where the victim runs */
    double waited_s;                /* how long for_job has waited so far */
    double wait_s;                  /* its wait without preemption (waited + until a slot frees) */
    double lost_s;                  /* the victim's GPU-seconds of work that are lost */
    double load_s;                  /* for_job's model load on that GPU (0 when warm) */
    char reason[240];               /* one line, for the log and the victim's trace */
};

/* sched_preempt_pick: the next preemption the rule calls for now, in *out
 * (and marks both jobs so neither is picked again for it); returns 1 when
 * there is one, 0 when none (or preemption is off), GPUQ_EINVAL on bad
 * arguments. The caller then ends the victim's attempt (lc_preempt), frees
 * its slot (sched_job_finished with ok false), queues it again
 * (sched_job_add with its old order key) and calls sched_dispatch; it may
 * call again for further picks. */
int sched_preempt_pick(struct sched *s, int64_t now, struct sched_preempt *out);

#endif
