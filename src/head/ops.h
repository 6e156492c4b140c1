/* ops.h: the operations on jobs that the API layer calls. All return 0 or a
 * negative GPUQ_E*: ENOENT (no such job for this caller), ECONFLICT (state
 * forbids it, or an idempotency key reused with another body), ESTALE (a
 * fenced call names an attempt that is not current), EIO (the store failed:
 * nothing was acknowledged). Records copied out own their params_json. */
#ifndef GPUQ_HEAD_OPS_H
#define GPUQ_HEAD_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "head/head.h"

/* rec: validated and normalized by the API (id, state, times are set here).
 * Takes rec->params_json. *existing: an idempotent replay returned the first job. */
int head_submit(struct head *h, struct job_rec *rec, struct job_rec *out, bool *existing);
/* tenant_id < 0: any tenant (admin). wait_s > 0: long-poll until the job changes
 * from *version (0 = from now), ends, or wait_s passes; *version is updated. */
int head_get(struct head *h, int64_t tenant_id, uint64_t id, int wait_s, uint64_t *version,
             struct job_rec *out);
int head_cancel(struct head *h, int64_t tenant_id, uint64_t id, struct job_rec *out);

/* Agent side, fenced by (worker, attempt). */
int head_progress(struct head *h, uint64_t id, const char *worker, int attempt,
                  enum job_phase phase, double progress);
/* *duplicate: this attempt's result was already accepted (a retried request). */
int head_complete(struct head *h, uint64_t id, const char *worker, int attempt,
                  const char *content_type, const void *data, size_t len, int64_t load_ms,
                  int64_t run_ms, bool *duplicate);
/* Retries elsewhere while attempts remain (never for bad_input); else the job fails. */
int head_fail(struct head *h, uint64_t id, const char *worker, int attempt, const char *cls,
              const char *message, bool *retried);

/* Recovery at start: load jobs from the store into memory and the scheduler. */
int head_recover(struct head *h);

#endif
