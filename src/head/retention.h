/* retention.h: results are kept for [jobs] result_retention_h after they were
 * stored (result_retention_s, when set, replaces it: short retentions, tests),
 * then deleted by a periodic sweep. The sweep runs through the committer like
 * any write, so submits never wait behind it, and deletes at most
 * RETENTION_BATCH results per pass: a backlog (after a long downtime, or a
 * shortened retention) is worked off one bounded pass per head tick. Inputs'
 * links to jobs past the same retention are dropped by the input sweep
 * (inputs.h). A result that was deleted answers 410 Gone (docs/api).
 * retention_tick also lets finished jobs leave memory after [jobs]
 * keep_finished_s; reads of them, and replays of their idempotency keys,
 * fall back to the store. */
#ifndef GPUQ_HEAD_RETENTION_H
#define GPUQ_HEAD_RETENTION_H

#include <stdint.h>

#include "head/config.h"

struct head;

#define RETENTION_BATCH 256          /* results deleted per pass at most */
#define RETENTION_MAX_INTERVAL_S 60  /* a pass at least this often */

/* The retention in milliseconds that cfg asks for. */
int64_t retention_ms(const struct head_config *cfg);

/* From the head's tick: starts a pass when one is due and none runs. A pass
 * that deleted a full batch makes the next one due at once. */
void retention_tick(struct head *h);

#endif
