/* report.h: how the agent's reports reach the head, per
 * docs/protocol-worker.md. Outcomes and progress are queued in the agent's
 * outbox (outbox.h) and sent by its thread through report_send; only the
 * deregister at the end of a drain is sent directly, by the worker's
 * controller once it has nothing left to do. */
#ifndef GPUQ_AGENT_REPORT_H
#define GPUQ_AGENT_REPORT_H

#include "agent/agent.h"
#include "agent/outbox.h"

/* report_send: the outbox's send callback; ctx is a struct http_client *.
 * One try: 0 with the HTTP status, or a negative error when no answer came. */
int report_send(void *ctx, const struct outbox_item *it, long *status);
/* report_send_batch: the outbox's batch callback (POST /v1/agent/outcomes):
 * small completions in one request, each item's verdict in statuses[]. */
int report_send_batch(void *ctx, struct outbox_item *const *items, int n, long *status,
                      long *statuses);
/* report_deregister: the final HTTP status, or 0 when the head could not be reached. */
long report_deregister(struct worker *w);

#endif
