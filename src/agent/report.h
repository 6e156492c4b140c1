/* report.h: what a worker's controller tells the head about its jobs —
 * progress, complete (raw output bytes), fail (with a class) and deregister —
 * per docs/protocol-worker.md, with bounded retries when the head is briefly
 * unreachable. Fenced by attempt: a 409 means the result is no longer wanted. */
#ifndef GPUQ_AGENT_REPORT_H
#define GPUQ_AGENT_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "agent/agent.h"

/* Each returns the final HTTP status, or 0 when the head could not be reached. */
long report_progress(struct worker *w, const struct job *j, const char *phase, double progress,
                     const char *message);
long report_complete(struct worker *w, const struct job *j, const char *content_type,
                     const void *data, size_t len, int64_t load_ms, int64_t run_ms, bool cold);
long report_fail(struct worker *w, const struct job *j, const char *cls, const char *message);
long report_deregister(struct worker *w);

#endif
