/* fill_store.c: gpuq-fill-store, the loader of the restart benchmark
 * (bench/restart, issue 20): puts N queued jobs into a stopped gpuqd's store
 * the way the head would have — through the store's own job_insert, the code
 * the committer runs for every submit — but many rows a transaction, so a
 * deep queue (1,000,000 jobs) is there in seconds instead of the minutes the
 * API would take on a small machine. The rows look like those of
 * gpuq-loadgen's default submit (image.fast on image-v2, 512x512, 4 steps),
 * each with its own body hash. With --finished they are put in as jobs
 * that succeeded three days ago instead: history a restart must not read.
 * With --read it instead reads every live row with one plain SELECT (each
 * column fetched, nothing kept): the floor under a restart, measured on the
 * same rows.
 *
 *   gpuq-fill-store --data DIR --jobs N --tenant ID [--finished] [--kv]
 *   gpuq-fill-store --data DIR --read [--kv]
 *
 * gpuqd must not be running on DIR. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/token.h"
#include "store/store.h"

#define BATCH_ROWS 20000

static void usage(void)
{
    fprintf(stderr, "usage: gpuq-fill-store --data DIR --jobs N --tenant ID [--finished] [--kv]\n"
                    "       gpuq-fill-store --data DIR --read [--kv]\n");
}

/* The read floor: every live row's columns, one statement, nothing kept. */
static int read_rows(const char *path, long long *rows, double *secs)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        fprintf(stderr, "gpuq-fill-store: %s: %s\n", path, sqlite3_errmsg(db));
        sqlite3_close(db);
        return 1;
    }
    int64_t t0 = clock_mono_ns();
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "SELECT * FROM jobs WHERE state < 2 ORDER BY id", -1, &st,
                                NULL);
    long long n = 0;
    size_t bytes = 0;
    if (rc == SQLITE_OK) {
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            int ncol = sqlite3_column_count(st);
            for (int i = 0; i < ncol; i++) {
                sqlite3_column_text(st, i);
                bytes += (size_t)sqlite3_column_bytes(st, i);
            }
            n++;
        }
    }
    sqlite3_finalize(st);
    *secs = (double)(clock_mono_ns() - t0) / 1e9;
    if (rc != SQLITE_DONE) {
        fprintf(stderr, "gpuq-fill-store: read: %s\n", sqlite3_errmsg(db));
        sqlite3_close(db);
        return 1;
    }
    sqlite3_close(db);
    *rows = n;
    return bytes > 0 || n == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *data = NULL;
    long long njobs = -1;
    long long tenant = 0;
    int kv = 0, read = 0, finished = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc) {
            data = argv[++i];
        } else if (!strcmp(argv[i], "--jobs") && i + 1 < argc) {
            char *end;
            njobs = strtoll(argv[++i], &end, 10);
            if (*end || njobs < 1 || njobs > 100000000) {
                fprintf(stderr, "gpuq-fill-store: --jobs: a count in [1, 100000000]\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--tenant") && i + 1 < argc) {
            char *end;
            tenant = strtoll(argv[++i], &end, 10);
            if (*end || tenant < 1) {
                fprintf(stderr, "gpuq-fill-store: --tenant: a tenant id (>= 1)\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--read")) {
            read = 1;
        } else if (!strcmp(argv[i], "--finished")) {
            finished = 1;
        } else if (!strcmp(argv[i], "--kv")) {
            kv = 1;
        } else {
            usage();
            return 2;
        }
    }
    if (!data || (!read && (njobs < 0 || tenant < 1))) {
        usage();
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/gpuq.db", data);

    if (read) {
        long long rows = 0;
        double secs = 0;
        if (read_rows(path, &rows, &secs))
            return 1;
        if (kv)
            printf("read_rows=%lld\nread_s=%.3f\n", rows, secs);
        else
            printf("read %lld live rows in %.3f s\n", rows, secs);
        return 0;
    }

    struct store_sqlite_options opt = {path, 1};
    struct store *s = NULL;
    char err[256];
    if (store_sqlite_open(&opt, &s, err, sizeof err)) {
        fprintf(stderr, "gpuq-fill-store: %s\n", err);
        return 1;
    }
    uint64_t max_id = 0;
    if (s->ops->max_job_id(s, &max_id)) {
        fprintf(stderr, "gpuq-fill-store: cannot read the highest job id\n");
        store_close(s);
        return 1;
    }
    int64_t t0 = clock_mono_ns();
    int64_t now_ms = clock_wall_ms();
    int rc = 0;
    for (long long done = 0; done < njobs && !rc;) {
        rc = s->ops->begin(s);
        for (int k = 0; k < BATCH_ROWS && done < njobs && !rc; k++, done++) {
            struct job_rec j;
            memset(&j, 0, sizeof j);
            j.id = max_id + 1 + (uint64_t)done;
            j.tenant_id = tenant;
            snprintf(j.capability, sizeof j.capability, "image.fast");
            snprintf(j.model, sizeof j.model, "image-v2");
            char params[192];
            snprintf(params, sizeof params,
                     "{\"frames\":0,\"height\":512,\"prompt\":\"a fox in the snow\",\"seed\":%lld,"
                     "\"sim_ms\":0,\"steps\":4,\"width\":512}",
                     done);
            j.params_json = params;
            j.width = j.height = 512;
            j.steps = 4;
            j.lane = LANE_INTERACTIVE;
            j.tier = TIER_PAID;
            token_hash(params, j.body_hash);
            lc_init(&j.lc, 0, 0);
            j.cost_s = 1.0 / 12;
            j.created_ms = now_ms;
            if (finished) {
                j.lc.state = LC_SUCCEEDED;
                j.lc.attempt = 1;
                j.created_ms = j.started_ms = now_ms - 3 * 86400 * 1000LL;
                j.finished_ms = j.started_ms + 1000;
            }
            rc = s->ops->job_insert(s, &j);
        }
        if (!rc)
            rc = s->ops->commit(s);
        else
            s->ops->rollback(s);
    }
    double secs = (double)(clock_mono_ns() - t0) / 1e9;
    store_close(s);
    if (rc) {
        fprintf(stderr, "gpuq-fill-store: insert failed: %s\n", gpuq_strerror(rc));
        return 1;
    }
    if (kv)
        printf("fill_jobs=%lld\nfill_s=%.3f\n", njobs, secs);
    else
        printf("stored %lld queued jobs in %.3f s\n", njobs, secs);
    return 0;
}
