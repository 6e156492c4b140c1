/* json.h: the API's JSON — parsing and validating requests (job submissions,
 * agent messages) into records, and rendering records as JSON. Every external
 * byte is bounded; an error names the field and the reason. */
#ifndef GPUQ_API_JSON_H
#define GPUQ_API_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "head/config.h"
#include "head/registry.h"
#include "store/records.h"

/* json_is_name: 1..max of lowercase letters, digits, '.', '_' or '-' (and
 * uppercase when upper_ok) — the names of capabilities, models, workers. */
bool json_is_name(const char *s, size_t max, bool upper_ok);

struct api_error {
    int status;              /* HTTP status */
    const char *code;        /* invalid_json, invalid_field, unknown_field, missing_field … */
    char field[64];
    char message[256];
};

void api_error_set(struct api_error *e, int status, const char *code, const char *field,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void json_render_error(struct buf *out, const struct api_error *e);

/* params.extra: nesting allowed (the object itself is depth 1). */
#define PARAMS_EXTRA_DEPTH 8
/* params.inputs: at most this many named inputs per job. */
#define PARAMS_MAX_INPUTS 8
/* An upload id: "in_" and this many lowercase hex digits. */
#define INPUT_ID_HEX 32
bool json_input_id(const char *s);

/* A client's POST /v1/jobs body → a normalized job record (tenant, params_json,
 * body_hash, lane, tier, size fields). idem_header: the Idempotency-Key header or NULL. */
int json_parse_job(const char *body, size_t len, const struct head_config *cfg,
                   const struct tenant_rec *tenant, const char *idem_header, int64_t now_ms,
                   struct job_rec *out, struct api_error *err);
void json_render_job(struct buf *out, const struct job_rec *j, const char *tenant_name);
/* A POST /v1/batches body, {"jobs":[JOB, ...]} with 1..max_jobs jobs: calls
 * each(arg, index, text, len) with every job re-serialized (to be parsed by
 * json_parse_job); each returning nonzero stops the walk. GPUQ_EINVAL with err
 * set when the body itself is malformed. *njobs: the count, when 0 is returned. */
int json_parse_batch(const char *body, size_t len, int max_jobs,
                     int (*each)(void *arg, int index, const char *job, size_t len), void *arg,
                     int *njobs, struct api_error *err);

/* Admin bodies. */
int json_parse_tenant(const char *body, size_t len, char *name, size_t nsize,
                      enum job_tier *tier, struct api_error *err);
int json_parse_token(const char *body, size_t len, char *name, size_t nsize,
                     struct api_error *err);

/* Agent messages (docs/protocol-worker.md). */
int json_parse_register(const char *body, size_t len, struct worker_rec *out,
                        struct api_error *err);
int json_parse_heartbeat(const char *body, size_t len, struct worker_rec *out,
                         struct api_error *err);
/* Progress / fail / deregister share: worker_id, attempt; plus their own fields. */
struct agent_msg {
    char worker_id[SCHED_NAME_MAX];
    int attempt;
    enum job_phase phase;
    double progress;
    char cls[16];
    char message[256];
};
int json_parse_progress(const char *body, size_t len, struct agent_msg *out,
                        struct api_error *err);
int json_parse_fail(const char *body, size_t len, struct agent_msg *out, struct api_error *err);
int json_parse_deregister(const char *body, size_t len, struct agent_msg *out,
                          struct api_error *err);

void json_render_assignment(struct buf *out, const struct job_rec *j);
void json_render_worker(struct buf *out, const struct worker_rec *w, int64_t now_ns);

/* Appends s as a JSON string (with quotes): always valid JSON text, a byte
 * that is not part of valid UTF-8 written as U+FFFD. */
void json_put_string(struct buf *out, const char *s);

/* The length (1..4) of the valid UTF-8 sequence at p (n bytes available), or
 * 0 if none starts there (overlongs, surrogates and > U+10FFFF are invalid). */
size_t json_utf8_seq(const unsigned char *p, size_t n);
bool json_utf8_valid(const char *s, size_t n);

/* A job id as the API writes it: a positive decimal number (digits only, no
 * sign, space or leading zero) within 64 bits. False if s is not one. */
bool json_job_id(const char *s, uint64_t *out);

/* json_render_refusal: admission's refusal (core/admit.h) as an error body
 * with why, the lane, the backlog and throughput the wait came from, and
 * retry_after_s (null when waiting will not help). */
struct admit_verdict;
void json_render_refusal(struct buf *out, const struct admit_verdict *v, const char *lane,
                         double cost_s);

#endif
