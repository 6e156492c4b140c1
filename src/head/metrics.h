/* metrics.h: gpuqd's Prometheus metrics (R35, docs/metrics.md). Event
 * counters and histograms live in one process-wide table and are bumped from
 * any thread with atomic adds only (no lock on the hot path); gauges — queues,
 * backlogs, GPUs — are read from the head's state when /metrics is scraped.
 * metrics_render writes the text exposition format 0.0.4. */
#ifndef GPUQ_HEAD_METRICS_H
#define GPUQ_HEAD_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "store/records.h"

struct head;

/* The Content-Type of a scrape. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* A request refused with 429 (admission), per lane. */
void metrics_count_429(enum job_lane lane);

/* Job events (head.c, dispatch.c). */
void metrics_job_submitted(const struct job_rec *r);
/* The job's first attempt was assigned at now_ms (wall): its wait. */
void metrics_job_assigned(const struct job_rec *r, int64_t now_ms);
/* The job reached a terminal state (its finished_ms set); run_ms is the
 * measured run of the last attempt (succeeded only; <= 0: unknown). */
void metrics_job_finished(const struct job_rec *r, int64_t run_ms);
/* An attempt ended in failure of class cls; retried: the job is queued again. */
void metrics_attempt_failed(const char *cls, bool retried);
/* The predicted finish (at submit) missed the real one by err_s seconds. */
void metrics_eta_error(double err_s);

/* Scheduler (dispatcher thread): placed decisions took ns in all; among the
 * winners, cold model loads and the evictions they cause. */
void metrics_decisions(int placed, int64_t ns);
void metrics_placement(bool warm, int evictions);

/* An agent's assignment poll asked for this many workers. */
void metrics_agent_poll(int workers);

/* Store: a group commit of n operations took ns (committer thread). */
void metrics_store_commit(void *arg, int n, int64_t ns);

/* Renders every metric into out. */
void metrics_render(struct head *h, struct buf *out);

/* Whether a scrape presenting bearer (NULL = none) may read /metrics: always
 * when no [metrics] token is set. */
bool metrics_authorized(const struct head *h, const char *bearer);

#endif
