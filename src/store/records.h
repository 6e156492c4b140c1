/* records.h: the durable records of the head — jobs (with their attempt
 * history), tenants, worker tokens — as the store keeps them and the head
 * holds them in memory. A job's life (state, attempts, worker, failed set,
 * deadline, timeout) is the core's struct lc_job, embedded: one copy. */
#ifndef GPUQ_STORE_RECORDS_H
#define GPUQ_STORE_RECORDS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/lifecycle.h"

#define REC_NAME_MAX 64
#define REC_IDEM_MAX 129
#define REC_HASH_HEX 65

/* The lifecycle's states under the API's names; the numbers are enum
 * lc_state's (persisted). */
enum job_state {
    JOB_QUEUED = LC_QUEUED,
    JOB_RUNNING = LC_RUNNING,
    JOB_SUCCEEDED = LC_SUCCEEDED,
    JOB_FAILED = LC_FAILED,
    JOB_CANCELLED = LC_CANCELLED,
    JOB_DEAD = LC_DEAD,
    JOB_EXPIRED = LC_EXPIRED,
};
#define JOB_NSTATES 7

enum job_phase { PHASE_NONE = 0, PHASE_ASSIGNED = 1, PHASE_LOADING = 2, PHASE_GENERATING = 3 };

enum job_lane { LANE_INTERACTIVE = 0, LANE_BATCH = 1 };
enum job_tier { TIER_PAID = 0, TIER_FREE = 1 };

/* A job. Invariants: lc holds the lifecycle's invariants (lifecycle.h);
 * terminal states have finished_ms set; result_bytes > 0 only when SUCCEEDED;
 * attempts[] are the ended attempts, oldest first (nattempts of them).
 * params_json and attempts are owned by the record (job_rec_free_fields). */
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
    struct lc_job lc;                /* state, attempt, worker, failed set, deadline, timeout */
    enum job_phase phase;
    double progress;
    double cost_s;
    double tag_s;             /* nominal GPU-seconds for the fair-share tag (memory only; 0 = cost_s) */
    char error_class[16];
    char error_message[256];
    char result_type[REC_NAME_MAX];
    int64_t result_bytes;
    int64_t created_ms, started_ms, finished_ms;
    /* Shown, not stored: computed when the job is read (0 = none). */
    int64_t eta_start_ms, eta_finish_ms;
    char waiting_reason[160];        /* queued: why it cannot start now ("" = it can) */
    /* Admission (not stored): counted by head_admit, under this tenant name;
     * order_ns: the batch lane's fair-queuing tag (0 = submit order). */
    bool admitted;
    char tenant_name[REC_NAME_MAX];
    int64_t order_ns;
    struct lc_attempt *attempts;
    int nattempts;
};

/* An uploaded input file (its bytes are kept beside it in the store).
 * Invariant: id is "in_" + 32 lowercase hex digits; bytes is the data's length. */
#define REC_INPUT_ID 40
struct input_rec {
    char id[REC_INPUT_ID];
    int64_t tenant_id;
    char content_type[REC_NAME_MAX];
    int64_t bytes;
    char sha256[REC_HASH_HEX];
    int64_t created_ms;
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

/* A batch (R6): many jobs submitted at once under one id. Invariant: job_ids
 * holds njobs ids (1..BATCH_REC_MAX_JOBS) in submission order, all of tenant_id;
 * job_ids is owned by whoever holds the record. */
#define BATCH_REC_MAX_JOBS 100000
struct batch_rec {
    uint64_t id;
    int64_t tenant_id;
    int64_t created_ms;
    int njobs;
    uint64_t *job_ids;
};

const char *job_state_name(enum job_state s);
const char *job_phase_name(enum job_phase p);
const char *job_lane_name(enum job_lane l);
const char *job_tier_name(enum job_tier t);
int job_lane_parse(const char *s, enum job_lane *out);
int job_tier_parse(const char *s, enum job_tier *out);
int job_state_parse(const char *s, enum job_state *out);
bool job_state_terminal(enum job_state s);

static inline enum job_state job_rec_state(const struct job_rec *j)
{
    return (enum job_state)j->lc.state;
}

/* job_rec_copy: a deep copy (params and attempts); dst owns its copies. */
void job_rec_copy(struct job_rec *dst, const struct job_rec *src);
/* job_rec_add_attempt appends an ended attempt to the history. */
void job_rec_add_attempt(struct job_rec *j, const struct lc_attempt *a);
/* job_outcome_parse: the inverse of lc_outcome_name (unknown names: LC_OUT_LOST). */
enum lc_outcome job_outcome_parse(const char *s);

#endif
