/* records.h: the durable records of the head — jobs, tenants, worker tokens —
 * as the store keeps them and the head holds them in memory. */
#ifndef GPUQ_STORE_RECORDS_H
#define GPUQ_STORE_RECORDS_H

#include <stdbool.h>
#include <stdint.h>

#define REC_NAME_MAX 64
#define REC_IDEM_MAX 129
#define REC_HASH_HEX 65

enum job_state {
    JOB_QUEUED = 0,
    JOB_RUNNING = 1,
    JOB_SUCCEEDED = 2,
    JOB_FAILED = 3,
    JOB_CANCELLED = 4,
};

enum job_phase { PHASE_NONE = 0, PHASE_ASSIGNED = 1, PHASE_LOADING = 2, PHASE_GENERATING = 3 };

enum job_lane { LANE_INTERACTIVE = 0, LANE_BATCH = 1 };
enum job_tier { TIER_PAID = 0, TIER_FREE = 1 };

/* A job. Invariants: state RUNNING ⇔ worker_id non-empty and attempt >= 1;
 * terminal states have finished_ms set; result_bytes > 0 only when SUCCEEDED.
 * params_json is a normalized JSON object text, owned by the record. */
struct job_rec {
    uint64_t id;
    int64_t tenant_id;
    char capability[REC_NAME_MAX];
    char model[REC_NAME_MAX];
    char *params_json;
    uint32_t width, height, steps, frames;
    enum job_lane lane;
    enum job_tier tier;
    char idem_key[REC_IDEM_MAX];     /* "" = none */
    char body_hash[REC_HASH_HEX];    /* SHA-256 of the normalized request, for idempotency */
    int64_t deadline_ms;             /* 0 = none */
    enum job_state state;
    enum job_phase phase;
    double progress;
    int attempt;                     /* assignments so far; the current one when RUNNING */
    char worker_id[REC_NAME_MAX];    /* current (RUNNING) or last worker */
    char exclude_worker[REC_NAME_MAX]; /* the worker that failed the last attempt */
    double cost_s;
    char error_class[16];
    char error_message[256];
    char result_type[REC_NAME_MAX];
    int64_t result_bytes;
    int64_t created_ms, started_ms, finished_ms;
    int64_t eta_start_ms, eta_finish_ms;
};

struct tenant_rec {
    int64_t id;
    char name[REC_NAME_MAX];
    enum job_tier tier;
    char key_hash[REC_HASH_HEX];
    int64_t created_ms;
};

struct token_rec {
    int64_t id;
    char name[REC_NAME_MAX];
    char token_hash[REC_HASH_HEX];
    int64_t created_ms;
};

const char *job_state_name(enum job_state s);
const char *job_phase_name(enum job_phase p);
const char *job_lane_name(enum job_lane l);
const char *job_tier_name(enum job_tier t);
int job_lane_parse(const char *s, enum job_lane *out);
int job_tier_parse(const char *s, enum job_tier *out);
int job_state_parse(const char *s, enum job_state *out);
bool job_state_terminal(enum job_state s);

#endif
