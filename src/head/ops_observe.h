/* ops_observe.h: what the API may ask the head about observing it — the
 * Prometheus scrape (head/metrics.h) and a job's trace (head/trace.h). */
#ifndef GPUQ_HEAD_OPS_OBSERVE_H
#define GPUQ_HEAD_OPS_OBSERVE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"

struct head;

/* The scrape: false (out untouched) when a [metrics] token is set and bearer
 * (NULL = none) is not it; else the exposition text in out. */
bool head_metrics(struct head *h, const char *bearer, struct buf *out);
/* The trace of a job visible to tenant_id (< 0: any) as JSON in out; GPUQ_ENOENT
 * when there is no such job for this caller, or the store's error. */
int head_job_trace(struct head *h, int64_t tenant_id, uint64_t id, struct buf *out);

#endif
