/* outbox.h: the agent's queue of reports to the head — job outcomes (complete,
 * fail) and progress — sent by one thread of their own so that no worker's
 * controller ever waits for the head (its ping and hang timers keep running
 * while the head is slow or away).
 *
 * An outcome is kept until the head answers for it: 2xx (delivered), 409 (the
 * attempt was fenced off), 404 (the job is unknown), 400 or 413 (refused:
 * logged). Anything else — no answer, 5xx, 401, 429 … — is retried with a
 * per-item backoff (min, doubling, capped at max) for as long as the agent
 * runs. A completion's bytes stay in the file the runtime wrote; the outbox
 * owns that file from outbox_put_complete on and unlinks it when the item
 * leaves. Progress is best effort: one pending report per attempt (a newer one
 * replaces it), tried once, dropped when its attempt's outcome is queued.
 *
 * Bounds: outbox_full() is true at max_items outcomes or max_bytes of result
 * files. A full outbox refuses nothing (a result is never dropped); the agent
 * stops asking the head for new work until it drains, so the outbox holds at
 * most max_items plus the jobs already running when it filled.
 *
 * The sending logic (outbox_step) takes `now` and a send callback, so unit
 * tests script the head's answers and the clock. Locking: mu guards every
 * field; the send callback runs without it on an item marked `sending`,
 * which only outbox_step removes. */
#ifndef GPUQ_AGENT_OUTBOX_H
#define GPUQ_AGENT_OUTBOX_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define OUTBOX_ID_MAX 64
#define OUTBOX_EPOCH_MAX 20
/* Batches (POST /v1/agent/outcomes): completions whose result is at most
 * OUTBOX_INLINE_MAX bytes travel together, up to OUTBOX_BATCH_MAX of them and
 * OUTBOX_BATCH_BYTES of results a request; larger results, failures and
 * progress go one request each. */
#define OUTBOX_BATCH_MAX 64
#define OUTBOX_INLINE_MAX (64 << 10)
#define OUTBOX_BATCH_BYTES (1 << 20)
/* A batch item's status meaning "send this one alone" (e.g. its file is gone). */
#define OUTBOX_SEND_ALONE (-1L)

enum outbox_kind { OUTBOX_COMPLETE, OUTBOX_FAIL, OUTBOX_PROGRESS };
enum outbox_verdict { OUTBOX_DONE, OUTBOX_DROP, OUTBOX_RETRY };

/* One report. Invariant: kind == OUTBOX_COMPLETE ⇔ its bytes are data
 * (owned; a small result, kept in memory) or the file at path, which the
 * outbox owns; tries counts sends that got no final answer. */
struct outbox_item {
    struct outbox_item *next;
    enum outbox_kind kind;
    char worker_id[OUTBOX_ID_MAX];
    char job_id[OUTBOX_ID_MAX];
    int64_t attempt;
    char epoch[OUTBOX_EPOCH_MAX]; /* the head's epoch of the assignment ("" none): echoed */
    /* complete */
    char path[PATH_MAX];  /* "" when data holds the bytes */
    char *data;           /* owned, or NULL */
    char content_type[128];
    int64_t bytes;
    int64_t load_ms, run_ms;
    bool cold;
    /* fail: class and message; progress: phase in cls, message */
    char cls[16];
    char message[512];
    double progress;
    /* delivery */
    int tries;
    int64_t due_ns;
    bool sending;
    bool alone; /* never batched (the head refused it in a batch, or it could not be read) */
};

/* send: one try at delivering it; 0 with the HTTP status in *status, or a
 * negative error when no answer came. Runs on the outbox thread, unlocked. */
typedef int (*outbox_send_fn)(void *ctx, const struct outbox_item *it, long *status);
/* send_batch: one try at delivering items[0..n) in one request; 0 with the
 * request's HTTP status in *status and, when it is 200, each item's own
 * status in statuses[i] (0: no verdict for it; OUTBOX_SEND_ALONE: deliver it
 * by itself), or a negative error when no answer came. Unlocked, like send. */
typedef int (*outbox_send_batch_fn)(void *ctx, struct outbox_item *const *items, int n,
                                    long *status, long *statuses);

struct outbox_stats {
    int items;        /* outcomes waiting (complete + fail) */
    int64_t bytes;    /* their result files */
    uint64_t delivered, dropped, retries;
};

struct outbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct outbox_item *first, *last; /* FIFO */
    int items;        /* outcomes in the list (progress not counted) */
    int64_t bytes;
    int max_items;
    int64_t max_bytes;
    int64_t min_delay_ms, max_delay_ms;
    outbox_send_fn send;
    outbox_send_batch_fn send_batch; /* NULL: one request per report */
    void *ctx;
    bool batch_off; /* the head does not know batches (an older head): one by one */
    void (*on_send)(void *arg); /* called, unlocked, as outcomes leave for the head */
    void *on_send_arg;
    void (*on_room)(void *arg); /* called, unlocked, when a full outbox has room again */
    void *on_room_arg;
    bool full_seen; /* outbox_full answered true since it last had room */
    bool stop;
    uint64_t pushed; /* reports queued so far: the thread sleeps only if none came since it looked */
    uint64_t delivered, dropped, retries;
};

void outbox_init(struct outbox *ob, int max_items, int64_t max_bytes, int64_t min_delay_ms,
                 int64_t max_delay_ms, outbox_send_fn send, void *ctx);
/* outbox_set_batch: deliver small completions in batches through fn (see
 * OUTBOX_BATCH_MAX). A head that answers the batch 404 or 405 does not know
 * the call: the outbox falls back to one request per report for good. */
void outbox_set_batch(struct outbox *ob, outbox_send_batch_fn fn);
/* outbox_set_on_send: fn(arg) runs (without the outbox's lock) each time
 * reports are about to be sent, before the request. */
void outbox_set_on_send(struct outbox *ob, void (*fn)(void *arg), void *arg);
/* outbox_set_on_room: fn(arg) runs (without the outbox's lock) when a step
 * finds the outbox below its bounds after outbox_full last answered true, so
 * that workers that stopped taking work may ask again at once. */
void outbox_set_on_room(struct outbox *ob, void (*fn)(void *arg), void *arg);
/* outbox_fini frees what is left, unlinking its result files. */
void outbox_fini(struct outbox *ob);

/* outbox_put_*: queue a report, due at once. They never block on the head and
 * never refuse an outcome (see "Bounds"). The complete's file at path is the
 * outbox's from here on. epoch: the one the head's answer to the poll carried
 * (NULL or "": none), sent back with the report. */
void outbox_put_complete(struct outbox *ob, const char *worker_id, const char *job_id,
                         int64_t attempt, const char *epoch, const char *path,
                         const char *content_type, int64_t bytes, int64_t load_ms, int64_t run_ms,
                         bool cold, int64_t now);
/* outbox_put_complete_data: the same for a small result held in memory: the
 * outbox takes data (malloc'd, bytes long) and frees it when the item leaves. */
void outbox_put_complete_data(struct outbox *ob, const char *worker_id, const char *job_id,
                              int64_t attempt, const char *epoch, char *data,
                              const char *content_type, int64_t bytes, int64_t load_ms,
                              int64_t run_ms, bool cold, int64_t now);
void outbox_put_fail(struct outbox *ob, const char *worker_id, const char *job_id,
                     int64_t attempt, const char *epoch, const char *cls, const char *message,
                     int64_t now);
void outbox_put_progress(struct outbox *ob, const char *worker_id, const char *job_id,
                         int64_t attempt, const char *epoch, const char *phase, double progress,
                         const char *message, int64_t now);

/* outbox_full: at max_items outcomes or max_bytes; take no new work. */
bool outbox_full(struct outbox *ob);
/* outbox_outcomes_for: how many outcomes of worker_id wait (sending included);
 * writes up to max of their (job_id, attempt) to ids/attempts when not NULL. */
int outbox_outcomes_for(struct outbox *ob, const char *worker_id, char (*ids)[OUTBOX_ID_MAX],
                        int64_t *attempts, int max);
/* outbox_waits_behind: an outcome of worker_id that was never sent waits
 * while another report's request is out (so it leaves when that one ends). */
bool outbox_waits_behind(struct outbox *ob, const char *worker_id);
void outbox_stats(struct outbox *ob, struct outbox_stats *out);

/* outbox_verdict: what an answer means for an outcome (progress: any answer
 * or none is final). rc < 0: no answer. */
enum outbox_verdict outbox_verdict(enum outbox_kind kind, int rc, long status);
/* outbox_delay_ms: wait after failed try number `tries` (1-based): min·2^(tries-1) ≤ max. */
int64_t outbox_delay_ms(int tries, int64_t min_ms, int64_t max_ms);

/* outbox_step: tries the first due item (FIFO among due ones) — with the
 * due completions after it that fit one batch, when it is one. Sets *tried
 * when it sent something; returns when the next item is due (INT64_MAX: none
 * waits; may be <= now). An answer from the head makes every waiting item due now. */
int64_t outbox_step(struct outbox *ob, int64_t now, bool *tried);

/* outbox_main: the sending thread (arg: struct outbox *) until outbox_stop. */
void *outbox_main(void *arg);
void outbox_stop(struct outbox *ob);

#endif
