/* trace.h: per-job traces (R36) — every step of a job with its time:
 * accepted, admitted, queued (with its first ETA), each placement (candidates,
 * scores, the winner's reason), assigned, model load (and the evictions its
 * placement planned), started, progress, each attempt's end and retry with its
 * error, finished. Served at GET /v1/jobs/{id}/trace (docs/api, `gpuq trace`).
 *
 * Bounded: at most max_steps steps a job (later ones are counted as dropped;
 * the finish is always kept) and max_bytes in all (the traces of the oldest
 * jobs go first); [metrics] trace_max_steps and trace_max_bytes, defaults
 * TRACE_MAX_STEPS and TRACE_MAX_BYTES. Memory only: after a restart, or once a job's
 * trace was evicted, the trace is rebuilt from what the store keeps — the
 * job's acceptance, every ended attempt (worker, times, outcome, error) and
 * its finish — followed by what this process saw since.
 *
 * Process-wide, one mutex; callers may hold the job table lock (the order is
 * jobs → traces, never the reverse). */
#ifndef GPUQ_HEAD_TRACE_H
#define GPUQ_HEAD_TRACE_H

#include <stdint.h>

#include "common/buf.h"
#include "core/sched.h"
#include "store/records.h"

#define TRACE_MAX_STEPS 64
#define TRACE_MAX_BYTES (64u << 20)

/* Sets the bounds (at start, before any trace; 0 keeps the default). */
void trace_set_limits(int64_t max_bytes, int max_steps);
/* Bytes the traces hold now, traces held, and traces evicted since start. */
void trace_stats(int64_t *bytes, int64_t *traces, int64_t *evicted);

/* The request was accepted (validated, id given) at r->created_ms. */
void trace_accepted(const struct job_rec *r);
/* Its insert is durable: the 201 goes out, or, to_end (POST /v1/jobs?wait=),
 * waits for the job's end or the wait's. */
void trace_admitted(uint64_t id, bool to_end);
/* In the scheduler's queue, with its ETA (seconds from now; < 0 unknown, why). */
void trace_queued(uint64_t id, double start_s, double finish_s, const char *why);
/* trace_candidates_json appends why's scored candidates as a JSON array to b.
 * The placement log line and the trace's "placed" step both carry it: the
 * dispatcher writes it once per placement and hands the text to both (it was
 * a quarter of gpuqd's instructions per job when each wrote its own). */
void trace_candidates_json(struct buf *b, const struct sched_explain *why);
/* A placement: the winner, its reason, the filtered counts and the scored
 * candidates, cands being trace_candidates_json's text for why. */
void trace_placed(uint64_t id, const char *worker, const struct sched_explain *why,
                  const char *cands, size_t cands_len);
/* Attempt n handed to worker at at_ms (wall): when its poll is answered,
 * which for an early poll comes before the assignment is durable. */
void trace_assigned(uint64_t id, const char *worker, int attempt, int64_t at_ms);
/* A progress report: phase changes (loading, generating) and every quarter. */
void trace_progress(uint64_t id, int attempt, enum job_phase old_phase, double old_progress,
                    enum job_phase phase, double progress);
/* An attempt ended (failed, lost, timed out, requeued, cancelled); r is the job
 * after the change: queued again means a retry. */
void trace_attempt_ended(const struct job_rec *r, const struct lc_attempt *a);
/* The job reached a terminal state (r after the change). Also measures the
 * ETA error of a succeeded job against its first ETA. */
void trace_finished(const struct job_rec *r);

/* Renders the trace of job r (as head_get returned it) as a JSON object. */
void trace_render(const struct job_rec *r, struct buf *out);

#endif
