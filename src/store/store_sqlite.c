/* store_sqlite.c: the embedded SQLite store (default backend). WAL mode with
 * synchronous=FULL: a committed transaction survives power loss. Writes use
 * one connection (the committer's; with synchronous=FULL it writes the WAL
 * through walbuf.h, a commit's frames in one call at its sync); reads use a
 * second connection behind a mutex, so readers never see uncommitted state
 * and never block the writer.
 * Schema migrations are versioned with PRAGMA user_version.
 *
 * The WAL is written as zeros before SQLite first opens it and is kept at
 * close (SQLITE_FCNTL_PERSIST_WAL): every commit then overwrites blocks the
 * file already has, and an fdatasync that need not also make a new file size
 * and new blocks durable costs about half as much (0.17 against 0.34 ms a
 * commit on the 2-core project machine: bench/README.md, "the WAL on disk").
 * beanstalkd preallocates its binlog files too (fallocate), which on this
 * disk gains about half as much as zeros do.
 *
 * Checkpoints copy the WAL's pages into the database file. The committer
 * runs one once the WAL holds STORE_WAL_CHECKPOINT_PAGES frames, as SQLite's
 * automatic checkpoint would, and that stalls it, and every commit queued
 * behind it, for several milliseconds. With one job at a time
 * that stall delays one job in some 500, and copying in the background
 * instead would slow many (the copies and their two fsyncs land beside them;
 * bench/README.md, 2026-11-28). Under load, when the committer is writing
 * batches (a commit that adds CKPT_BUSY_FRAMES frames or more), the stall
 * delays every waiting commit: then the committer's WAL hook wakes a thread
 * of its own every CKPT_BG_FRAMES frames, whose PASSIVE checkpoint, through a
 * third connection, copies what is committed without blocking the writer.
 * The committer's own checkpoint at STORE_WAL_CHECKPOINT_PAGES then has
 * little left to copy, and the WAL starts again from its head after it as
 * before, however busy the writer. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/err.h"
#include "common/log.h"
#include "store/store.h"
#include "store/walbuf.h"

#define MOD "store"
/* The writer connection's VFS when its commits sync (walbuf.h). */
#define WRITER_VFS "gpuq-walbuf"

/* The background checkpoint (see the top of the file): woken every
 * CKPT_BG_FRAMES frames, while commits add CKPT_BUSY_FRAMES frames or more. */
#define CKPT_BG_FRAMES (STORE_WAL_CHECKPOINT_PAGES / 8)
#define CKPT_BUSY_FRAMES 24

/* Migration N brings the schema from user_version N to N+1. Never edit a
 * shipped migration; append a new one. */
static const char *const migrations[] = {
    "CREATE TABLE tenants(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
    " tier INTEGER NOT NULL, key_hash TEXT NOT NULL UNIQUE, created_ms INTEGER NOT NULL);"
    "CREATE TABLE worker_tokens(id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
    " token_hash TEXT NOT NULL UNIQUE, created_ms INTEGER NOT NULL);"
    "CREATE TABLE jobs(id INTEGER PRIMARY KEY, tenant_id INTEGER NOT NULL,"
    " capability TEXT NOT NULL, model TEXT NOT NULL, params TEXT NOT NULL,"
    " width INTEGER, height INTEGER, steps INTEGER, frames INTEGER, lane INTEGER,"
    " tier INTEGER, idem_key TEXT NOT NULL, body_hash TEXT NOT NULL, deadline_ms INTEGER,"
    " state INTEGER NOT NULL, phase INTEGER, progress REAL, attempt INTEGER,"
    " worker_id TEXT, exclude_worker TEXT, cost_s REAL, error_class TEXT, error_message TEXT,"
    " result_type TEXT, result_bytes INTEGER, created_ms INTEGER, started_ms INTEGER,"
    " finished_ms INTEGER, eta_start_ms INTEGER, eta_finish_ms INTEGER);"
    "CREATE UNIQUE INDEX jobs_idem ON jobs(tenant_id, idem_key) WHERE idem_key <> '';"
    "CREATE INDEX jobs_tenant ON jobs(tenant_id, id);"
    "CREATE INDEX jobs_live ON jobs(state) WHERE state < 2;"
    "CREATE TABLE results(job_id INTEGER PRIMARY KEY, content_type TEXT NOT NULL,"
    " data BLOB NOT NULL, finished_ms INTEGER NOT NULL);",
    /* 2: the lifecycle (failed set, timeout, budget spent), the attempt history
     * and the (capability, model) pairs workers ever declared. */
    "ALTER TABLE jobs ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN failed TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE jobs ADD COLUMN timeout_ms INTEGER NOT NULL DEFAULT 0;"
    "CREATE TABLE attempts(job_id INTEGER NOT NULL, n INTEGER NOT NULL, worker TEXT NOT NULL,"
    " started_ms INTEGER, ended_ms INTEGER, outcome TEXT NOT NULL, error_class TEXT NOT NULL,"
    " error TEXT NOT NULL, PRIMARY KEY(job_id, n));"
    "CREATE TABLE served(capability TEXT NOT NULL, model TEXT NOT NULL,"
    " PRIMARY KEY(capability, model));",
    /* 3: uploaded input files (POST /v1/inputs) and which job names which. */
    "CREATE TABLE inputs(id TEXT PRIMARY KEY, tenant_id INTEGER NOT NULL,"
    " content_type TEXT NOT NULL, bytes INTEGER NOT NULL, sha256 TEXT NOT NULL,"
    " data BLOB NOT NULL, created_ms INTEGER NOT NULL);"
    "CREATE TABLE job_inputs(job_id INTEGER NOT NULL, name TEXT NOT NULL,"
    " input_id TEXT NOT NULL, PRIMARY KEY(job_id, name));"
    "CREATE INDEX job_inputs_input ON job_inputs(input_id);",
    /* 4: batches (R6): one row per batch, its jobs' ids in submission order. */
    "CREATE TABLE batches(id INTEGER PRIMARY KEY, tenant_id INTEGER NOT NULL,"
    " created_ms INTEGER NOT NULL, njobs INTEGER NOT NULL, job_ids TEXT NOT NULL);",
    /* 5: results carry the time they were stored (the retention sweep deletes
     * the oldest first); older rows take their job's finish. */
    "UPDATE results SET finished_ms = coalesce((SELECT finished_ms FROM jobs"
    " WHERE jobs.id = results.job_id), 0);"
    "CREATE INDEX results_finished ON results(finished_ms);",
};

#define JOB_COLS                                                                              \
    "id, tenant_id, capability, model, params, width, height, steps, frames, lane, tier,"   \
    " idem_key, body_hash, deadline_ms, state, phase, progress, attempt, worker_id,"         \
    " exclude_worker, cost_s, error_class, error_message, result_type, result_bytes,"        \
    " created_ms, started_ms, finished_ms, eta_start_ms, eta_finish_ms, failures, failed,"       \
    " timeout_ms"
#define JOB_NCOLS 33

enum stmt_id {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_SAVEPOINT,
    ST_RELEASE,
    ST_ROLLBACK_TO,
    ST_JOB_INSERT,
    ST_JOB_UPDATE,
    ST_RESULT_PUT,
    ST_TENANT_INSERT,
    ST_TOKEN_INSERT,
    ST_TENANT_UPDATE,
    ST_ATTEMPT_PUT,
    ST_SERVED_PUT,
    ST_BATCH_INSERT,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_SAVEPOINT] = "SAVEPOINT op",
    [ST_RELEASE] = "RELEASE op",
    [ST_ROLLBACK_TO] = "ROLLBACK TO op",
    [ST_JOB_INSERT] = "INSERT INTO jobs(" JOB_COLS ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,"
                      "?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    [ST_JOB_UPDATE] = "UPDATE jobs SET state=?2, phase=?3, progress=?4, attempt=?5, worker_id=?6,"
                      " exclude_worker=?7, error_class=?8, error_message=?9, result_type=?10,"
                      " result_bytes=?11, started_ms=?12, finished_ms=?13, eta_start_ms=?14,"
                      " eta_finish_ms=?15, failures=?16, failed=?17, deadline_ms=?18,"
                      " timeout_ms=?19 WHERE id=?1",
    /* finished_ms: now, by the system clock, for the retention sweep */
    [ST_RESULT_PUT] = "INSERT OR REPLACE INTO results(job_id, content_type, data, finished_ms)"
                      " VALUES (?,?,?,CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))",
    [ST_TENANT_INSERT] = "INSERT INTO tenants(name, tier, key_hash, created_ms) VALUES (?,?,?,?)",
    [ST_TOKEN_INSERT] = "INSERT INTO worker_tokens(name, token_hash, created_ms) VALUES (?,?,?)",
    [ST_TENANT_UPDATE] = "UPDATE tenants SET name=?2, key_hash=?3 WHERE id=?1",
    [ST_ATTEMPT_PUT] = "INSERT OR REPLACE INTO attempts(job_id, n, worker, started_ms, ended_ms,"
                       " outcome, error_class, error) VALUES (?,?,?,?,?,?,?,?)",
    [ST_SERVED_PUT] = "INSERT OR IGNORE INTO served(capability, model) VALUES (?,?)",
    [ST_BATCH_INSERT] = "INSERT INTO batches(id, tenant_id, created_ms, njobs, job_ids)"
                        " VALUES (?,?,?,?,?)",
};

struct store_sqlite {
    struct store base;
    sqlite3 *wdb;                 /* committer thread only */
    sqlite3_stmt *st[ST_COUNT];
    sqlite3 *rdb;                 /* readers, serialized by rlock */
    pthread_mutex_t rlock;
    sqlite3_stmt *idem_st;        /* on rdb: sq_job_find_idem's, prepared at its first use */
    /* The background checkpoint (see the top of the file). */
    sqlite3 *cdb;                 /* the checkpointer thread only */
    int wal_frames, ckpt_mark;    /* WAL frames now and at the last wake-up (committer only) */
    int ckpt_rc, ckpt_rc_bg;      /* the last checkpoint's result: committer's, checkpointer's */
    pthread_mutex_t ckpt_lock;    /* a leaf: guards ckpt_wanted and ckpt_stop */
    pthread_cond_t ckpt_wake;
    bool ckpt_wanted, ckpt_stop, ckpt_started;
    pthread_t ckpt_thread;
};

static struct store_sqlite *ss(struct store *s)
{
    return (struct store_sqlite *)s;
}

/* Maps a SQLite result to a project error; fsync failures are fatal (DESIGN.md). */
static int map_rc(sqlite3 *db, int rc, const char *what)
{
    if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW)
        return 0;
    int ext = sqlite3_extended_errcode(db);
    if (ext == SQLITE_IOERR_FSYNC || ext == SQLITE_IOERR_DIR_FSYNC) {
        log_error(MOD, "%s: fsync failed (%s); stopping to keep the store honest", what,
                  sqlite3_errmsg(db));
        abort();
    }
    if ((rc & 0xff) == SQLITE_CONSTRAINT)
        return GPUQ_EEXIST;
    log_warn(MOD, "%s: %s", what, sqlite3_errmsg(db));
    return GPUQ_EIO;
}

static int step_reset(struct store_sqlite *s, enum stmt_id id)
{
    sqlite3_stmt *st = s->st[id];
    int rc = sqlite3_step(st);
    int err = map_rc(s->wdb, rc, stmt_sql[id]);
    if (st) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
    return err;
}

static int sq_begin(struct store *s)
{
    return step_reset(ss(s), ST_BEGIN);
}

static int sq_commit(struct store *s)
{
    struct store_sqlite *q = ss(s);
    int err = step_reset(q, ST_COMMIT);
    if (err && sqlite3_get_autocommit(q->wdb) == 0)
        step_reset(q, ST_ROLLBACK);
    return err;
}

static int sq_rollback(struct store *s)
{
    struct store_sqlite *q = ss(s);
    if (sqlite3_get_autocommit(q->wdb))
        return 0;
    return step_reset(q, ST_ROLLBACK);
}

static int sq_savepoint(struct store *s)
{
    return step_reset(ss(s), ST_SAVEPOINT);
}

static int sq_release(struct store *s, int ok)
{
    struct store_sqlite *q = ss(s);
    if (!ok) {
        int err = step_reset(q, ST_ROLLBACK_TO);
        if (err)
            return err;
    }
    return step_reset(q, ST_RELEASE);
}

static void bind_text(sqlite3_stmt *st, int i, const char *v)
{
    sqlite3_bind_text(st, i, v ? v : "", -1, SQLITE_TRANSIENT);
}

/* For a value that outlives the statement's step: sq_job_insert's, whose
 * record and locals live until its step_reset has run and cleared the
 * bindings. SQLite then reads the text where it is instead of copying each
 * of the insert's eleven strings first. */
static void bind_text_static(sqlite3_stmt *st, int i, const char *v)
{
    sqlite3_bind_text(st, i, v ? v : "", -1, SQLITE_STATIC);
}

static void bind_opt_ms(sqlite3_stmt *st, int i, int64_t v)
{
    if (v)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

/* The failed set as stored: worker ids (which hold no comma) joined by commas. */
static void failed_text(const struct lc_job *lc, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < lc->nfailed && n < size; i++)
        n += (size_t)snprintf(out + n, size - n, "%s%s", i ? "," : "", lc->failed[i]);
}

static void failed_parse(const char *text, struct lc_job *lc)
{
    lc->nfailed = 0;
    while (*text && lc->nfailed < LC_MAX_FAILED) {
        size_t len = strcspn(text, ",");
        if (len > 0 && len < SCHED_NAME_MAX)
            snprintf(lc->failed[lc->nfailed++], SCHED_NAME_MAX, "%.*s", (int)len, text);
        text += len + (text[len] == ',');
    }
}

static int sq_job_insert(struct store *s, const struct job_rec *j)
{
    struct store_sqlite *q = ss(s);
    sqlite3_stmt *st = q->st[ST_JOB_INSERT];
    int i = 1;
    sqlite3_bind_int64(st, i++, (sqlite3_int64)j->id);
    sqlite3_bind_int64(st, i++, j->tenant_id);
    bind_text_static(st, i++, j->capability);
    bind_text_static(st, i++, j->model);
    bind_text_static(st, i++, j->params_json ? j->params_json : "{}");
    sqlite3_bind_int(st, i++, (int)j->width);
    sqlite3_bind_int(st, i++, (int)j->height);
    sqlite3_bind_int(st, i++, (int)j->steps);
    sqlite3_bind_int(st, i++, (int)j->frames);
    sqlite3_bind_int(st, i++, j->lane);
    sqlite3_bind_int(st, i++, j->tier);
    bind_text_static(st, i++, j->idem_key);
    bind_text_static(st, i++, j->body_hash);
    sqlite3_bind_int64(st, i++, j->lc.deadline_ms);
    sqlite3_bind_int(st, i++, j->lc.state);
    sqlite3_bind_int(st, i++, j->phase);
    sqlite3_bind_double(st, i++, j->progress);
    sqlite3_bind_int(st, i++, j->lc.attempt);
    bind_text_static(st, i++, j->lc.worker);
    bind_text_static(st, i++, "");
    sqlite3_bind_double(st, i++, j->cost_s);
    bind_text_static(st, i++, j->error_class);
    bind_text_static(st, i++, j->error_message);
    bind_text_static(st, i++, j->result_type);
    sqlite3_bind_int64(st, i++, j->result_bytes);
    sqlite3_bind_int64(st, i++, j->created_ms);
    bind_opt_ms(st, i++, j->started_ms);
    bind_opt_ms(st, i++, j->finished_ms);
    sqlite3_bind_int64(st, i++, j->eta_start_ms);
    sqlite3_bind_int64(st, i++, j->eta_finish_ms);
    char failed[LC_MAX_FAILED * SCHED_NAME_MAX];
    failed_text(&j->lc, failed, sizeof failed);
    sqlite3_bind_int(st, i++, j->lc.failures);
    bind_text_static(st, i++, failed);
    sqlite3_bind_int64(st, i++, j->lc.timeout_ms);
    return step_reset(q, ST_JOB_INSERT);
}

static int sq_job_update(struct store *s, const struct job_rec *j)
{
    struct store_sqlite *q = ss(s);
    sqlite3_stmt *st = q->st[ST_JOB_UPDATE];
    sqlite3_bind_int64(st, 1, (sqlite3_int64)j->id);
    sqlite3_bind_int(st, 2, j->lc.state);
    sqlite3_bind_int(st, 3, j->phase);
    sqlite3_bind_double(st, 4, j->progress);
    sqlite3_bind_int(st, 5, j->lc.attempt);
    bind_text(st, 6, j->lc.worker);
    bind_text(st, 7, "");
    bind_text(st, 8, j->error_class);
    bind_text(st, 9, j->error_message);
    bind_text(st, 10, j->result_type);
    sqlite3_bind_int64(st, 11, j->result_bytes);
    bind_opt_ms(st, 12, j->started_ms);
    bind_opt_ms(st, 13, j->finished_ms);
    sqlite3_bind_int64(st, 14, j->eta_start_ms);
    sqlite3_bind_int64(st, 15, j->eta_finish_ms);
    char failed[LC_MAX_FAILED * SCHED_NAME_MAX];
    failed_text(&j->lc, failed, sizeof failed);
    sqlite3_bind_int(st, 16, j->lc.failures);
    bind_text(st, 17, failed);
    sqlite3_bind_int64(st, 18, j->lc.deadline_ms);
    sqlite3_bind_int64(st, 19, j->lc.timeout_ms);
    int err = step_reset(q, ST_JOB_UPDATE);
    if (!err && sqlite3_changes(q->wdb) == 0)
        return GPUQ_ENOENT;
    return err;
}

static int sq_result_put(struct store *s, uint64_t job_id, const char *type, const void *data,
                         size_t len)
{
    struct store_sqlite *q = ss(s);
    sqlite3_stmt *st = q->st[ST_RESULT_PUT];
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job_id);
    bind_text(st, 2, type);
    sqlite3_bind_blob64(st, 3, data ? data : "", len, SQLITE_STATIC);
    return step_reset(q, ST_RESULT_PUT);
}

static int sq_attempt_put(struct store *s, uint64_t job_id, const struct lc_attempt *a)
{
    struct store_sqlite *q = ss(s);
    sqlite3_stmt *st = q->st[ST_ATTEMPT_PUT];
    sqlite3_bind_int64(st, 1, (sqlite3_int64)job_id);
    sqlite3_bind_int(st, 2, a->n);
    bind_text(st, 3, a->worker);
    bind_opt_ms(st, 4, a->started_ms);
    bind_opt_ms(st, 5, a->ended_ms);
    bind_text(st, 6, lc_outcome_name(a->outcome));
    bind_text(st, 7, a->error_class);
    bind_text(st, 8, a->error);
    return step_reset(q, ST_ATTEMPT_PUT);
}

static int sq_served_put(struct store *s, const char *capability, const char *model)
{
    struct store_sqlite *q = ss(s);
    sqlite3_stmt *st = q->st[ST_SERVED_PUT];
    bind_text(st, 1, capability);
    bind_text(st, 2, model);
    return step_reset(q, ST_SERVED_PUT);
}

/* A batch's job ids are kept as one text of decimal ids separated by commas. */
static int sq_batch_insert(struct store *s, const struct batch_rec *b)
{
    struct store_sqlite *q = ss(s);
    sqlite3_stmt *st = q->st[ST_BATCH_INSERT];
    size_t cap = (size_t)b->njobs * 21 + 1, used = 0;
    char *ids = xmalloc(cap);
    ids[0] = '\0';
    for (int i = 0; i < b->njobs; i++)
        used += (size_t)snprintf(ids + used, cap - used, "%s%llu", i ? "," : "",
                                 (unsigned long long)b->job_ids[i]);
    sqlite3_bind_int64(st, 1, (sqlite3_int64)b->id);
    sqlite3_bind_int64(st, 2, b->tenant_id);
    sqlite3_bind_int64(st, 3, b->created_ms);
    sqlite3_bind_int(st, 4, b->njobs);
    sqlite3_bind_text(st, 5, ids, (int)used, SQLITE_TRANSIENT);
    int err = step_reset(q, ST_BATCH_INSERT);
    free(ids);
    return err;
}

static int sq_tenant_insert(struct store *s, struct tenant_rec *t)
{
    struct store_sqlite *q = ss(s);
    sqlite3_stmt *st = q->st[ST_TENANT_INSERT];
    bind_text(st, 1, t->name);
    sqlite3_bind_int(st, 2, t->tier);
    bind_text(st, 3, t->key_hash);
    sqlite3_bind_int64(st, 4, t->created_ms);
    int err = step_reset(q, ST_TENANT_INSERT);
    if (!err)
        t->id = sqlite3_last_insert_rowid(q->wdb);
    return err;
}

static int sq_token_insert(struct store *s, struct token_rec *t)
{
    struct store_sqlite *q = ss(s);
    sqlite3_stmt *st = q->st[ST_TOKEN_INSERT];
    bind_text(st, 1, t->name);
    bind_text(st, 2, t->token_hash);
    sqlite3_bind_int64(st, 3, t->created_ms);
    int err = step_reset(q, ST_TOKEN_INSERT);
    if (!err)
        t->id = sqlite3_last_insert_rowid(q->wdb);
    return err;
}

static int sq_tenant_update(struct store *s, const struct tenant_rec *t)
{
    struct store_sqlite *q = ss(s);
    sqlite3_stmt *st = q->st[ST_TENANT_UPDATE];
    sqlite3_bind_int64(st, 1, t->id);
    bind_text(st, 2, t->name);
    bind_text(st, 3, t->key_hash);
    int err = step_reset(q, ST_TENANT_UPDATE);
    if (!err && sqlite3_changes(q->wdb) != 1)
        err = GPUQ_ENOENT;
    return err;
}

static void copy_col(sqlite3_stmt *st, int i, char *dst, size_t size)
{
    const char *v = (const char *)sqlite3_column_text(st, i);
    size_t n = v ? strnlen(v, size - 1) : 0;
    memcpy(dst, v ? v : "", n);
    dst[n] = '\0';
}

static void row_to_job(sqlite3_stmt *st, struct job_rec *j)
{
    memset(j, 0, sizeof *j);
    int i = 0;
    j->id = (uint64_t)sqlite3_column_int64(st, i++);
    j->tenant_id = sqlite3_column_int64(st, i++);
    copy_col(st, i++, j->capability, sizeof j->capability);
    copy_col(st, i++, j->model, sizeof j->model);
    const unsigned char *params = sqlite3_column_text(st, i++);
    j->params_json = xstrdup(params ? (const char *)params : "{}");
    j->width = (uint32_t)sqlite3_column_int(st, i++);
    j->height = (uint32_t)sqlite3_column_int(st, i++);
    j->steps = (uint32_t)sqlite3_column_int(st, i++);
    j->frames = (uint32_t)sqlite3_column_int(st, i++);
    j->lane = (enum job_lane)sqlite3_column_int(st, i++);
    j->tier = (enum job_tier)sqlite3_column_int(st, i++);
    copy_col(st, i++, j->idem_key, sizeof j->idem_key);
    copy_col(st, i++, j->body_hash, sizeof j->body_hash);
    j->lc.deadline_ms = sqlite3_column_int64(st, i++);
    j->lc.state = (enum lc_state)sqlite3_column_int(st, i++);
    j->phase = (enum job_phase)sqlite3_column_int(st, i++);
    j->progress = sqlite3_column_double(st, i++);
    j->lc.attempt = sqlite3_column_int(st, i++);
    copy_col(st, i++, j->lc.worker, sizeof j->lc.worker);
    i++; /* exclude_worker: schema 1's single exclusion, replaced by the failed set */
    j->cost_s = sqlite3_column_double(st, i++);
    copy_col(st, i++, j->error_class, sizeof j->error_class);
    copy_col(st, i++, j->error_message, sizeof j->error_message);
    copy_col(st, i++, j->result_type, sizeof j->result_type);
    j->result_bytes = sqlite3_column_int64(st, i++);
    j->created_ms = sqlite3_column_int64(st, i++);
    j->started_ms = sqlite3_column_int64(st, i++);
    j->finished_ms = sqlite3_column_int64(st, i++);
    i += 2; /* eta_start_ms, eta_finish_ms: computed when read, not kept */
    j->lc.failures = sqlite3_column_int(st, i++);
    const unsigned char *failed = sqlite3_column_text(st, i++);
    failed_parse(failed ? (const char *)failed : "", &j->lc);
    j->lc.timeout_ms = sqlite3_column_int64(st, i++);
}

/* Reads a job's attempt history on the read connection (its lock held).
 * *cached: the statement, prepared on first use and kept for the next job
 * (the caller finalizes it); a pass over many jobs prepares it once. A job
 * never attempted (lc.attempt 0) has no history: no query at all — on a
 * restart with a deep queue that is nearly every row. */
static int read_attempts(sqlite3 *db, sqlite3_stmt **cached, struct job_rec *j)
{
    if (j->lc.attempt == 0)
        return 0;
    int rc = SQLITE_OK;
    if (!*cached)
        rc = sqlite3_prepare_v2(db,
                                "SELECT n, worker, started_ms, ended_ms, outcome, error_class,"
                                " error FROM attempts WHERE job_id = ?1 ORDER BY n",
                                -1, cached, NULL);
    sqlite3_stmt *st = *cached;
    int err = map_rc(db, rc, "attempts");
    if (!err) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)j->id);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            struct lc_attempt a = {0};
            char outcome[32];
            a.n = sqlite3_column_int(st, 0);
            copy_col(st, 1, a.worker, sizeof a.worker);
            a.started_ms = sqlite3_column_int64(st, 2);
            a.ended_ms = sqlite3_column_int64(st, 3);
            copy_col(st, 4, outcome, sizeof outcome);
            a.outcome = job_outcome_parse(outcome);
            copy_col(st, 5, a.error_class, sizeof a.error_class);
            copy_col(st, 6, a.error, sizeof a.error);
            job_rec_add_attempt(j, &a);
        }
        err = map_rc(db, rc, "attempts");
    }
    if (st) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
    return err;
}

/* Runs a read query on the read connection; bind() binds parameters, row() sees each row. */
static int read_query(struct store_sqlite *q, const char *sql,
                      void (*bind)(sqlite3_stmt *st, const void *arg), const void *barg,
                      void (*row)(sqlite3_stmt *st, void *arg), void *rarg)
{
    pthread_mutex_lock(&q->rlock);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(q->rdb, sql, -1, &st, NULL);
    int err = map_rc(q->rdb, rc, sql);
    if (!err) {
        if (bind)
            bind(st, barg);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW)
            row(st, rarg);
        err = map_rc(q->rdb, rc, sql);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&q->rlock);
    return err;
}

struct cb_pair {
    void *cb;
    void *arg;
    int count;
    sqlite3 *db;          /* job rows: where their attempts are read */
    sqlite3_stmt *att;    /* job rows: the attempts query (read_attempts) */
};

static void tenant_row(sqlite3_stmt *st, void *arg)
{
    struct cb_pair *p = arg;
    struct tenant_rec t = {0};
    t.id = sqlite3_column_int64(st, 0);
    copy_col(st, 1, t.name, sizeof t.name);
    t.tier = (enum job_tier)sqlite3_column_int(st, 2);
    copy_col(st, 3, t.key_hash, sizeof t.key_hash);
    t.created_ms = sqlite3_column_int64(st, 4);
    ((store_tenant_cb)p->cb)(p->arg, &t);
}

static int sq_load_tenants(struct store *s, store_tenant_cb cb, void *arg)
{
    struct cb_pair p = {(void *)cb, arg, 0};
    return read_query(ss(s), "SELECT id, name, tier, key_hash, created_ms FROM tenants ORDER BY id",
                      NULL, NULL, tenant_row, &p);
}

static void token_row(sqlite3_stmt *st, void *arg)
{
    struct cb_pair *p = arg;
    struct token_rec t = {0};
    t.id = sqlite3_column_int64(st, 0);
    copy_col(st, 1, t.name, sizeof t.name);
    copy_col(st, 2, t.token_hash, sizeof t.token_hash);
    t.created_ms = sqlite3_column_int64(st, 3);
    ((store_token_cb)p->cb)(p->arg, &t);
}

static int sq_load_tokens(struct store *s, store_token_cb cb, void *arg)
{
    struct cb_pair p = {(void *)cb, arg, 0};
    return read_query(ss(s),
                      "SELECT id, name, token_hash, created_ms FROM worker_tokens"
                      " WHERE token_hash NOT LIKE 'revoked:%' ORDER BY id",
                      NULL, NULL, token_row, &p);
}

static void bind_token_id(sqlite3_stmt *st, const void *arg)
{
    sqlite3_bind_int64(st, 1, *(const int64_t *)arg);
}

static int write_once(struct store_sqlite *q, const char *sql,
                      void (*bind)(sqlite3_stmt *st, const void *arg), const void *barg,
                      int *changes);

static int sq_token_revoke(struct store *s, int64_t id)
{
    int changed = 0;
    int err = write_once(ss(s),
                         "UPDATE worker_tokens SET token_hash = 'revoked:' || id WHERE id = ?1"
                         " AND token_hash NOT LIKE 'revoked:%'",
                         bind_token_id, &id, &changed);
    return err ? err : changed ? 0 : GPUQ_ENOENT;
}

static void job_row(sqlite3_stmt *st, void *arg)
{
    struct cb_pair *p = arg;
    struct job_rec j;
    row_to_job(st, &j);
    read_attempts(p->db, &p->att, &j);
    p->count++;
    ((store_job_cb)p->cb)(p->arg, &j);
}

static void bind_since(sqlite3_stmt *st, const void *arg)
{
    sqlite3_bind_int64(st, 1, *(const int64_t *)arg);
}

/* The live jobs' count and the highest id (about the table's rows). */
static void live_of_rows(sqlite3_stmt *st, void *arg)
{
    int64_t *v = arg;
    v[0] = sqlite3_column_int64(st, 0);
    v[1] = sqlite3_column_int64(st, 1);
}

/* Two ways to the same rows, in id order. By index, when the live jobs are
 * a small part of the table (the usual case: a short queue and a long
 * history), so a restart's time follows them, not the history: queued and
 * running jobs each come from the partial index jobs_live in id order
 * ("state < 2" lets the planner use it), and the three parts merge without
 * a sort. The recent finished ones are looked for from the lowest id among
 * the results stored since since_ms on (through results_finished, named:
 * left to itself the planner walks the results from the oldest); a recent
 * failure older than that stays out of memory, and reads of it go to the
 * store, as for any finished job that left memory. By one scan of the
 * table, when the live jobs are most of it (a deep queue): reading the rows
 * in order is cheaper then than reaching each through the index (1,000,000
 * queued: about 1.5 s against 2.0 s to /healthz). */
static const char load_by_index[] =
    "SELECT " JOB_COLS " FROM jobs WHERE state = 0 AND state < 2"
    " UNION ALL SELECT " JOB_COLS " FROM jobs WHERE state = 1 AND state < 2"
    " UNION ALL SELECT " JOB_COLS " FROM jobs WHERE id >= (SELECT"
    " coalesce(min(job_id), (SELECT coalesce(max(id), 0) + 1 FROM jobs))"
    " FROM results INDEXED BY results_finished WHERE finished_ms >= ?1) AND state >= 2"
    " AND finished_ms >= ?1 ORDER BY id";
static const char load_by_scan[] =
    "SELECT " JOB_COLS " FROM jobs WHERE state < 2 UNION ALL SELECT " JOB_COLS
    " FROM jobs WHERE state >= 2 AND finished_ms >= ?1 ORDER BY id";

static int sq_load_jobs(struct store *s, int64_t since_ms, store_job_cb cb, void *arg)
{
    int64_t n[2] = {0, 0};
    int err = read_query(ss(s),
                         "SELECT (SELECT count(*) FROM jobs WHERE state < 2),"
                         " (SELECT coalesce(max(id), 0) FROM jobs)",
                         NULL, NULL, live_of_rows, n);
    if (err)
        return err;
    struct cb_pair p = {(void *)cb, arg, 0, ss(s)->rdb, NULL};
    err = read_query(ss(s), n[0] * 4 < n[1] ? load_by_index : load_by_scan, bind_since,
                     &since_ms, job_row, &p);
    pthread_mutex_lock(&ss(s)->rlock);
    sqlite3_finalize(p.att);
    pthread_mutex_unlock(&ss(s)->rlock);
    return err;
}

struct one_job {
    struct job_rec *out;
    int found;
    sqlite3 *db;
};

static void one_job_row(sqlite3_stmt *st, void *arg)
{
    struct one_job *o = arg;
    sqlite3_stmt *att = NULL;
    row_to_job(st, o->out);
    read_attempts(o->db, &att, o->out);
    sqlite3_finalize(att);
    o->found = 1;
}

static void bind_id(sqlite3_stmt *st, const void *arg)
{
    sqlite3_bind_int64(st, 1, (sqlite3_int64) * (const uint64_t *)arg);
}

static int sq_job_get(struct store *s, uint64_t id, struct job_rec *out)
{
    struct one_job o = {out, 0, ss(s)->rdb};
    int err = read_query(ss(s), "SELECT " JOB_COLS " FROM jobs WHERE id = ?1", bind_id, &id,
                         one_job_row, &o);
    if (err)
        return err;
    return o.found ? 0 : GPUQ_ENOENT;
}

/* The job of an idempotency key: its id from the index jobs_idem alone (the
 * statement kept on the read connection: most keys asked are new ones, and a
 * miss then costs one index probe), then the job when out asks for it.
 * "idem_key <> ''" lets the planner use that partial index. */
static int sq_job_find_idem(struct store *s, int64_t tenant_id, const char *key,
                            struct job_rec *out)
{
    struct store_sqlite *q = ss(s);
    static const char sql[] =
        "SELECT id FROM jobs WHERE tenant_id = ?1 AND idem_key = ?2 AND idem_key <> ''";
    uint64_t id = 0;
    pthread_mutex_lock(&q->rlock);
    int rc = q->idem_st ? SQLITE_OK : sqlite3_prepare_v2(q->rdb, sql, -1, &q->idem_st, NULL);
    int err = map_rc(q->rdb, rc, sql);
    if (!err) {
        sqlite3_bind_int64(q->idem_st, 1, tenant_id);
        sqlite3_bind_text(q->idem_st, 2, key, -1, SQLITE_STATIC);
        rc = sqlite3_step(q->idem_st);
        if (rc == SQLITE_ROW)
            id = (uint64_t)sqlite3_column_int64(q->idem_st, 0);
        else
            err = map_rc(q->rdb, rc, sql);
        sqlite3_reset(q->idem_st);
        sqlite3_clear_bindings(q->idem_st);
    }
    pthread_mutex_unlock(&q->rlock);
    if (err)
        return err;
    if (!id)
        return GPUQ_ENOENT;
    return out ? sq_job_get(s, id, out) : 0;
}

static void bind_filter(sqlite3_stmt *st, const void *arg)
{
    const struct store_list_filter *f = arg;
    sqlite3_bind_int64(st, 1, f->tenant_id);
    sqlite3_bind_int64(st, 2, f->before_id ? (sqlite3_int64)f->before_id : INT64_MAX);
    sqlite3_bind_int(st, 3, f->state);
    if (f->capability)
        sqlite3_bind_text(st, 4, f->capability, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 4);
    sqlite3_bind_int(st, 5, f->limit);
}

static int sq_job_list(struct store *s, const struct store_list_filter *f, store_job_cb cb,
                       void *arg)
{
    struct cb_pair p = {(void *)cb, arg, 0, ss(s)->rdb, NULL};
    int err = read_query(ss(s),
                         "SELECT " JOB_COLS " FROM jobs WHERE tenant_id = ?1 AND id < ?2"
                         " AND (?3 < 0 OR state = ?3) AND (?4 IS NULL OR capability = ?4)"
                         " ORDER BY id DESC LIMIT ?5",
                         bind_filter, f, job_row, &p);
    pthread_mutex_lock(&ss(s)->rlock);
    sqlite3_finalize(p.att);
    pthread_mutex_unlock(&ss(s)->rlock);
    return err;
}

static void served_row(sqlite3_stmt *st, void *arg)
{
    struct cb_pair *p = arg;
    char cap[SCHED_NAME_MAX], model[SCHED_NAME_MAX];
    copy_col(st, 0, cap, sizeof cap);
    copy_col(st, 1, model, sizeof model);
    ((store_served_cb)p->cb)(p->arg, cap, model);
}

static int sq_load_served(struct store *s, store_served_cb cb, void *arg)
{
    struct cb_pair p = {(void *)cb, arg, 0, NULL};
    return read_query(ss(s), "SELECT capability, model FROM served ORDER BY capability, model",
                      NULL, NULL, served_row, &p);
}

static void batch_row(sqlite3_stmt *st, void *arg)
{
    struct cb_pair *p = arg;
    struct batch_rec b = {0};
    b.id = (uint64_t)sqlite3_column_int64(st, 0);
    b.tenant_id = sqlite3_column_int64(st, 1);
    b.created_ms = sqlite3_column_int64(st, 2);
    int n = sqlite3_column_int(st, 3);
    const char *ids = (const char *)sqlite3_column_text(st, 4);
    if (n < 0 || n > BATCH_REC_MAX_JOBS || !ids) {
        log_warn(MOD, "batch %llu: malformed row skipped", (unsigned long long)b.id);
        return;
    }
    b.job_ids = xcalloc((size_t)n + 1, sizeof *b.job_ids);
    for (const char *c = ids; *c && b.njobs < n;) {
        char *end;
        unsigned long long v = strtoull(c, &end, 10);
        if (end == c)
            break;
        b.job_ids[b.njobs++] = v;
        c = *end == ',' ? end + 1 : end;
    }
    ((store_batch_cb)p->cb)(p->arg, &b);
}

static int sq_load_batches(struct store *s, store_batch_cb cb, void *arg)
{
    struct cb_pair p = {(void *)cb, arg, 0, NULL};
    return read_query(ss(s), "SELECT id, tenant_id, created_ms, njobs, job_ids FROM batches"
                      " ORDER BY id", NULL, NULL, batch_row, &p);
}

static void max_id_row(sqlite3_stmt *st, void *arg)
{
    *(uint64_t *)arg = (uint64_t)sqlite3_column_int64(st, 0);
}

static int sq_max_job_id(struct store *s, uint64_t *out)
{
    *out = 0;
    return read_query(ss(s), "SELECT COALESCE(MAX(id), 0) FROM jobs", NULL, NULL, max_id_row,
                      out);
}

struct result_out {
    char *type;
    size_t type_size;
    void *data;
    size_t len;
    int found;
};

static void result_row(sqlite3_stmt *st, void *arg)
{
    struct result_out *r = arg;
    copy_col(st, 0, r->type, r->type_size);
    int n = sqlite3_column_bytes(st, 1);
    r->data = xmalloc((size_t)n);
    if (n)
        memcpy(r->data, sqlite3_column_blob(st, 1), (size_t)n);
    r->len = (size_t)n;
    r->found = 1;
}

static int sq_result_get(struct store *s, uint64_t job_id, char *type, size_t type_size,
                         void **data, size_t *len)
{
    struct result_out r = {type, type_size, NULL, 0, 0};
    int err = read_query(ss(s), "SELECT content_type, data FROM results WHERE job_id = ?1",
                         bind_id, &job_id, result_row, &r);
    if (err)
        return err;
    if (!r.found)
        return GPUQ_ENOENT;
    *data = r.data;
    *len = r.len;
    return 0;
}

struct prune_args {
    int64_t cutoff_ms;
    int limit;
};

static void bind_prune(sqlite3_stmt *st, const void *arg)
{
    const struct prune_args *a = arg;
    sqlite3_bind_int64(st, 1, a->cutoff_ms);
    sqlite3_bind_int(st, 2, a->limit);
}

static int sq_prune_results(struct store *s, int64_t cutoff_ms, int limit, int *deleted)
{
    struct prune_args a = {cutoff_ms, limit};
    *deleted = 0;
    /* job 0 is the committer's probe row, never a job's: left alone */
    return write_once(ss(s),
                      "DELETE FROM results WHERE job_id IN (SELECT job_id FROM results"
                      " WHERE finished_ms < ?1 AND job_id <> 0 ORDER BY finished_ms LIMIT ?2)",
                      bind_prune, &a, deleted);
}

/* ---- inputs ---- */

/* Runs one write statement on the committer's connection; *changes (if not
 * NULL) gets the rows it changed. */
static int write_once(struct store_sqlite *q, const char *sql,
                      void (*bind)(sqlite3_stmt *st, const void *arg), const void *barg,
                      int *changes)
{
    sqlite3_stmt *st = NULL;
    int err = map_rc(q->wdb, sqlite3_prepare_v2(q->wdb, sql, -1, &st, NULL), sql);
    if (!err) {
        bind(st, barg);
        err = map_rc(q->wdb, sqlite3_step(st), sql);
    }
    sqlite3_finalize(st);
    if (!err && changes)
        *changes = sqlite3_changes(q->wdb);
    return err;
}

struct input_put_args {
    const struct input_rec *r;
    const void *data;
    size_t len;
};

static void bind_input_put(sqlite3_stmt *st, const void *arg)
{
    const struct input_put_args *a = arg;
    bind_text(st, 1, a->r->id);
    sqlite3_bind_int64(st, 2, a->r->tenant_id);
    bind_text(st, 3, a->r->content_type);
    sqlite3_bind_int64(st, 4, a->r->bytes);
    bind_text(st, 5, a->r->sha256);
    sqlite3_bind_blob64(st, 6, a->data ? a->data : "", a->len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, a->r->created_ms);
}

static int sq_input_put(struct store *s, const struct input_rec *r, const void *data, size_t len)
{
    struct input_put_args a = {r, data, len};
    return write_once(ss(s),
                      "INSERT INTO inputs(id, tenant_id, content_type, bytes, sha256, data,"
                      " created_ms) VALUES (?,?,?,?,?,?,?)",
                      bind_input_put, &a, NULL);
}

struct input_get_out {
    struct input_rec *r;
    void **data;
    size_t *len;
    int found;
};

static void bind_text1(sqlite3_stmt *st, const void *arg)
{
    bind_text(st, 1, arg);
}

static void input_row(sqlite3_stmt *st, void *arg)
{
    struct input_get_out *o = arg;
    memset(o->r, 0, sizeof *o->r);
    copy_col(st, 0, o->r->id, sizeof o->r->id);
    o->r->tenant_id = sqlite3_column_int64(st, 1);
    copy_col(st, 2, o->r->content_type, sizeof o->r->content_type);
    o->r->bytes = sqlite3_column_int64(st, 3);
    copy_col(st, 4, o->r->sha256, sizeof o->r->sha256);
    o->r->created_ms = sqlite3_column_int64(st, 5);
    if (o->data) {
        int n = sqlite3_column_bytes(st, 6);
        *o->data = xmalloc((size_t)n + 1);
        if (n)
            memcpy(*o->data, sqlite3_column_blob(st, 6), (size_t)n);
        *o->len = (size_t)n;
    }
    o->found = 1;
}

static int sq_input_get(struct store *s, const char *id, struct input_rec *out, void **data,
                        size_t *len)
{
    struct input_get_out o = {out, data, len, 0};
    int err = read_query(ss(s),
                         data ? "SELECT id, tenant_id, content_type, bytes, sha256, created_ms,"
                                " data FROM inputs WHERE id = ?1"
                              : "SELECT id, tenant_id, content_type, bytes, sha256, created_ms"
                                " FROM inputs WHERE id = ?1",
                         bind_text1, id, input_row, &o);
    if (err)
        return err;
    return o.found ? 0 : GPUQ_ENOENT;
}

struct input_link_args {
    uint64_t job_id;
    int64_t tenant_id;
    const char *name, *id;
};

static void bind_input_link(sqlite3_stmt *st, const void *arg)
{
    const struct input_link_args *a = arg;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)a->job_id);
    bind_text(st, 2, a->name);
    bind_text(st, 3, a->id);
    sqlite3_bind_int64(st, 4, a->tenant_id);
}

static int sq_input_link(struct store *s, uint64_t job_id, int64_t tenant_id, const char *name,
                         const char *id)
{
    struct input_link_args a = {job_id, tenant_id, name, id};
    int changes = 0;
    int err = write_once(ss(s),
                         "INSERT OR REPLACE INTO job_inputs(job_id, name, input_id)"
                         " SELECT ?1, ?2, id FROM inputs WHERE id = ?3 AND tenant_id = ?4",
                         bind_input_link, &a, &changes);
    if (!err && changes == 0)
        return GPUQ_ENOENT;
    return err;
}

static void bind_two_ms(sqlite3_stmt *st, const void *arg)
{
    const int64_t *ms = arg;
    sqlite3_bind_int64(st, 1, ms[0]);
    if (sqlite3_bind_parameter_count(st) > 1)
        sqlite3_bind_int64(st, 2, ms[1]);
}

static int sq_prune_inputs(struct store *s, int64_t jobs_cutoff_ms, int64_t unused_cutoff_ms,
                           int *deleted)
{
    struct store_sqlite *q = ss(s);
    int64_t ms[2] = {jobs_cutoff_ms, unused_cutoff_ms};
    int err = write_once(q,
                         "DELETE FROM job_inputs WHERE job_id IN (SELECT id FROM jobs WHERE"
                         " state >= 2 AND finished_ms < ?1)",
                         bind_two_ms, ms, NULL);
    if (!err)
        err = write_once(q,
                         "DELETE FROM inputs WHERE created_ms < ?2 AND NOT EXISTS"
                         " (SELECT 1 FROM job_inputs WHERE input_id = inputs.id)",
                         bind_two_ms, ms, deleted);
    return err;
}

static void sq_close(struct store *s)
{
    struct store_sqlite *q = ss(s);
    if (q->ckpt_started) {
        pthread_mutex_lock(&q->ckpt_lock);
        q->ckpt_stop = true;
        pthread_cond_signal(&q->ckpt_wake);
        pthread_mutex_unlock(&q->ckpt_lock);
        pthread_join(q->ckpt_thread, NULL);
    }
    sqlite3_close(q->cdb);
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(q->st[i]);
    sqlite3_close(q->wdb);
    sqlite3_finalize(q->idem_st);
    sqlite3_close(q->rdb);
    pthread_mutex_destroy(&q->rlock);
    pthread_mutex_destroy(&q->ckpt_lock);
    pthread_cond_destroy(&q->ckpt_wake);
    free(q);
}

static const struct store_ops sqlite_ops = {
    .name = "sqlite",
    .close = sq_close,
    .begin = sq_begin,
    .commit = sq_commit,
    .rollback = sq_rollback,
    .savepoint = sq_savepoint,
    .release = sq_release,
    .job_insert = sq_job_insert,
    .job_update = sq_job_update,
    .result_put = sq_result_put,
    .result_get = sq_result_get,
    .tenant_insert = sq_tenant_insert,
    .token_insert = sq_token_insert,
    .token_revoke = sq_token_revoke,
    .tenant_update = sq_tenant_update,
    .attempt_put = sq_attempt_put,
    .served_put = sq_served_put,
    .batch_insert = sq_batch_insert,
    .load_batches = sq_load_batches,
    .load_served = sq_load_served,
    .load_tenants = sq_load_tenants,
    .load_tokens = sq_load_tokens,
    .load_jobs = sq_load_jobs,
    .job_get = sq_job_get,
    .job_find_idem = sq_job_find_idem,
    .job_list = sq_job_list,
    .max_job_id = sq_max_job_id,
    .prune_results = sq_prune_results,
    .input_put = sq_input_put,
    .input_get = sq_input_get,
    .input_link = sq_input_link,
    .prune_inputs = sq_prune_inputs,
};

static int exec(sqlite3 *db, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(err, errlen, "%s: %s", sql, msg ? msg : "error");
        sqlite3_free(msg);
        return GPUQ_EIO;
    }
    return 0;
}

static int migrate(sqlite3 *db, char *err, size_t errlen)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "reading schema version: %s", sqlite3_errmsg(db));
        return GPUQ_EIO;
    }
    int version = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
    sqlite3_finalize(st);
    int target = (int)(sizeof migrations / sizeof migrations[0]);
    if (version > target) {
        snprintf(err, errlen, "store schema version %d is newer than this gpuqd (%d)", version,
                 target);
        return GPUQ_EIO;
    }
    for (int v = version; v < target; v++) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", v + 1);
        if (exec(db, "BEGIN IMMEDIATE", err, errlen) || exec(db, migrations[v], err, errlen) ||
            exec(db, sql, err, errlen) || exec(db, "COMMIT", err, errlen)) {
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            return GPUQ_EIO;
        }
        log_info(MOD, "store schema migrated to version %d", v + 1);
    }
    return 0;
}

/* open_conn opens path through the VFS named vfs (NULL: the default). */
static int open_conn(const char *path, const char *vfs, sqlite3 **out, char *err, size_t errlen)
{
    int rc = sqlite3_open_v2(path, out, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                            SQLITE_OPEN_NOMUTEX, vfs);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "opening %s: %s", path, *out ? sqlite3_errmsg(*out) : "no memory");
        return GPUQ_EIO;
    }
    sqlite3_busy_timeout(*out, 5000);
    return 0;
}

/* wal_preallocate writes zeros from the end of DB-wal up to bytes, then makes
 * them durable. Zeros are never a valid WAL frame, so SQLite reads such a file
 * as its valid frames followed by the end of the log (its recovery stops at
 * the first frame whose salt does not match the header's), and writes its
 * frames at their own offsets, over the zeros. Nothing the file held
 * changes. The caller holds the data directory's lock, so no other process
 * has the database open; the WAL's locks live in DB-shm, so opening and
 * closing DB-wal here takes none of SQLite's away. A failure (a full disk) is
 * logged, not fatal: the WAL then grows as SQLite writes it, as without this. */
static void wal_preallocate(const char *db_path, long long bytes)
{
    char wal[4096];
    if (bytes <= 0 || snprintf(wal, sizeof wal, "%s-wal", db_path) >= (int)sizeof wal)
        return;
    int fd = open(wal, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        log_warn(MOD, "preallocating %s: %s", wal, strerror(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    long long at = st.st_size;
    struct statvfs fs;
    if (at >= bytes) {
        close(fd);
        return;
    }
    if (fstatvfs(fd, &fs) != 0 ||
        (long long)fs.f_bavail * (long long)fs.f_frsize < 2 * (bytes - at)) {
        /* Never the one that fills a small disk: the jobs need the room more. */
        log_info(MOD, "WAL %s not preallocated: less than twice %lld bytes free", wal,
                 bytes - at);
        close(fd);
        return;
    }
    static const char zeros[1 << 16];
    int ok = 1;
    while (ok && at < bytes) {
        size_t n = bytes - at < (long long)sizeof zeros ? (size_t)(bytes - at) : sizeof zeros;
        ssize_t w = pwrite(fd, zeros, n, at);
        if (w < 0 && errno == EINTR)
            continue;
        ok = w > 0;
        at += ok ? w : 0;
    }
    if (!ok || fsync(fd) != 0) {
        int e = errno;
        if (ftruncate(fd, st.st_size) != 0) /* give back what was written */
            e = errno;
        log_warn(MOD, "preallocating %s: %s (the WAL grows as it is written instead)", wal,
                 strerror(e));
    } else {
        log_info(MOD, "WAL %s preallocated: %lld bytes", wal, bytes);
    }
    close(fd);
}

/* keep_wal asks SQLite not to delete the WAL when this connection is the last
 * to close, so the next start finds it written (see the top of the file). */
static void keep_wal(sqlite3 *db)
{
    int on = 1;
    sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &on);
}

/* A PASSIVE checkpoint through connection db: BUSY (the other thread's is
 * running) is no error, an fsync that fails is fatal (map_rc), anything else
 * (a full disk) is logged when it first happens: *last keeps the error of
 * the caller's previous checkpoint, which is retried at the next commit. */
static void checkpoint(sqlite3 *db, const char *who, int *last)
{
    int rc = sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    if (rc == SQLITE_BUSY)
        return;
    if (rc != SQLITE_OK) {
        map_rc(db, rc, who); /* aborts on a failed fsync */
        if (rc != *last)
            log_warn(MOD, "%s: %s (the WAL grows until one succeeds)", who, sqlite3_errmsg(db));
    } else if (*last != SQLITE_OK) {
        log_info(MOD, "%s: succeeded again", who);
    }
    *last = rc;
}

static void *checkpointer_main(void *arg)
{
    struct store_sqlite *q = arg;
    pthread_mutex_lock(&q->ckpt_lock);
    for (;;) {
        while (!q->ckpt_wanted && !q->ckpt_stop)
            pthread_cond_wait(&q->ckpt_wake, &q->ckpt_lock);
        if (q->ckpt_stop)
            break;
        q->ckpt_wanted = false;
        pthread_mutex_unlock(&q->ckpt_lock);
        checkpoint(q->cdb, "background checkpoint", &q->ckpt_rc_bg);
        pthread_mutex_lock(&q->ckpt_lock);
    }
    pthread_mutex_unlock(&q->ckpt_lock);
    return NULL;
}

/* The writer's WAL hook, in place of SQLite's automatic checkpoint: called in
 * the committer thread after each commit with the frames the WAL holds. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    (void)name;
    struct store_sqlite *q = arg;
    int added = frames - q->wal_frames;
    if (added < 0) { /* the WAL started again from its head */
        added = frames;
        q->ckpt_mark = 0;
    }
    q->wal_frames = frames;
    if (frames >= STORE_WAL_CHECKPOINT_PAGES) {
        checkpoint(db, "checkpoint", &q->ckpt_rc);
    } else if (added >= CKPT_BUSY_FRAMES && frames - q->ckpt_mark >= CKPT_BG_FRAMES) {
        q->ckpt_mark = frames;
        pthread_mutex_lock(&q->ckpt_lock);
        q->ckpt_wanted = true;
        pthread_cond_signal(&q->ckpt_wake);
        pthread_mutex_unlock(&q->ckpt_lock);
    }
    return SQLITE_OK;
}

/* The writer's VFS: one that writes each commit's WAL frames in one call
 * (walbuf.h) when every commit syncs; else the default. */
static const char *writer_vfs(const struct store_sqlite_options *opt)
{
    if (!opt->synchronous_full)
        return NULL;
    int rc = walbuf_register(WRITER_VFS, NULL);
    if (rc == SQLITE_OK)
        return WRITER_VFS;
    log_warn(MOD, "the WAL's write buffer is off: %s", sqlite3_errstr(rc));
    return NULL;
}

int store_sqlite_open(const struct store_sqlite_options *opt, struct store **out, char *err,
                      size_t errlen)
{
    struct store_sqlite *q = xcalloc(1, sizeof *q);
    q->base.ops = &sqlite_ops;
    pthread_mutex_init(&q->rlock, NULL);
    pthread_mutex_init(&q->ckpt_lock, NULL);
    pthread_cond_init(&q->ckpt_wake, NULL);
    char pragmas[256];
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA journal_mode=WAL; PRAGMA synchronous=%s; PRAGMA foreign_keys=OFF;"
             " PRAGMA wal_autocheckpoint=%d;",
             opt->synchronous_full ? "FULL" : "NORMAL", STORE_WAL_CHECKPOINT_PAGES);
    if (open_conn(opt->path, writer_vfs(opt), &q->wdb, err, errlen) ||
        exec(q->wdb, pragmas, err, errlen) ||
        migrate(q->wdb, err, errlen))
        goto fail;
    /* After the migrations: SQLite deletes a WAL it finds beside an empty
     * database, so the zeros go in once the schema is there. */
    if (opt->wal_prealloc_bytes > 0) {
        keep_wal(q->wdb);
        wal_preallocate(opt->path, opt->wal_prealloc_bytes);
    }
    if (open_conn(opt->path, NULL, &q->rdb, err, errlen))
        goto fail;
    if (opt->wal_prealloc_bytes > 0)
        keep_wal(q->rdb);
    /* The checkpointer's connection syncs as the writer's does: its
     * checkpoint makes the database file durable before the WAL is reused. */
    if (open_conn(opt->path, NULL, &q->cdb, err, errlen) || exec(q->cdb, pragmas, err, errlen))
        goto fail;
    if (opt->wal_prealloc_bytes > 0)
        keep_wal(q->cdb);
    int prc = pthread_create(&q->ckpt_thread, NULL, checkpointer_main, q);
    if (prc != 0) {
        snprintf(err, errlen, "starting the checkpointer thread: %s", strerror(prc));
        goto fail;
    }
    pthread_setname_np(q->ckpt_thread, "checkpointer");
    q->ckpt_started = true;
    sqlite3_wal_hook(q->wdb, wal_hook, q);
    for (int i = 0; i < ST_COUNT; i++) {
        if (sqlite3_prepare_v3(q->wdb, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &q->st[i],
                               NULL) != SQLITE_OK) {
            snprintf(err, errlen, "preparing %s: %s", stmt_sql[i], sqlite3_errmsg(q->wdb));
            goto fail;
        }
    }
    *out = &q->base;
    return 0;
fail:
    sq_close(&q->base);
    return GPUQ_EIO;
}
