/* sqlite_commit.c: gpuq-bench-sqlite, the baseline of `make bench`: how many
 * single-row commits per second SQLite manages on this machine, durable as
 * gpuqd's store is (WAL, synchronous=FULL), one INSERT of a job-sized row per
 * transaction, for --duration seconds in a fresh temp dir (removed after).
 * This is what a server committing each submit on its own could reach; group
 * commit is how gpuqd goes past it. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"

#define ROW_BYTES 300

static int exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "gpuq-bench-sqlite: %s: %s\n", sql, err ? err : "?");
        sqlite3_free(err);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    double duration_s = 3;
    int kv = 0;
    const char *parent = getenv("TMPDIR");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--duration") == 0 && i + 1 < argc) {
            duration_s = strtod(argv[++i], NULL);
            if (duration_s <= 0 || duration_s > 600) {
                fprintf(stderr, "gpuq-bench-sqlite: --duration: seconds in (0, 600]\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
            parent = argv[++i];
        } else if (strcmp(argv[i], "--kv") == 0) {
            kv = 1;
        } else {
            fprintf(stderr, "usage: gpuq-bench-sqlite [--duration S] [--dir PARENT] [--kv]\n");
            return 2;
        }
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/gpuq-bench-sqlite.XXXXXX", parent && *parent ? parent : "/tmp");
    if (!mkdtemp(dir)) {
        perror("gpuq-bench-sqlite: mkdtemp");
        return 1;
    }
    char path[4200], wal[4300], shm[4300];
    snprintf(path, sizeof path, "%s/base.db", dir);
    snprintf(wal, sizeof wal, "%s-wal", path);
    snprintf(shm, sizeof shm, "%s-shm", path);

    int rc = 1;
    sqlite3 *db = NULL;
    sqlite3_stmt *ins = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK) {
        fprintf(stderr, "gpuq-bench-sqlite: open %s: %s\n", path, sqlite3_errmsg(db));
        goto out;
    }
    if (exec(db, "PRAGMA journal_mode=WAL") || exec(db, "PRAGMA synchronous=FULL") ||
        exec(db, "CREATE TABLE jobs (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, "
                 "state INTEGER NOT NULL, created_ms INTEGER NOT NULL, body TEXT NOT NULL)"))
        goto out;
    if (sqlite3_prepare_v2(db, "INSERT INTO jobs (tenant, state, created_ms, body) "
                               "VALUES ('bench', 0, ?1, ?2)",
                           -1, &ins, NULL) != SQLITE_OK) {
        fprintf(stderr, "gpuq-bench-sqlite: prepare: %s\n", sqlite3_errmsg(db));
        goto out;
    }
    char body[ROW_BYTES + 1];
    memset(body, 'x', ROW_BYTES);
    body[ROW_BYTES] = '\0';

    long long commits = 0;
    int64_t t0 = clock_mono_ns();
    int64_t end = t0 + (int64_t)(duration_s * 1e9);
    int64_t now = t0;
    while (now < end) {
        if (exec(db, "BEGIN"))
            goto out;
        sqlite3_bind_int64(ins, 1, clock_wall_ms());
        sqlite3_bind_text(ins, 2, body, ROW_BYTES, SQLITE_STATIC);
        if (sqlite3_step(ins) != SQLITE_DONE) {
            fprintf(stderr, "gpuq-bench-sqlite: insert: %s\n", sqlite3_errmsg(db));
            goto out;
        }
        sqlite3_reset(ins);
        if (exec(db, "COMMIT"))
            goto out;
        commits++;
        now = clock_mono_ns();
    }
    double secs = (double)(now - t0) / 1e9;
    if (kv)
        printf("sqlite_commits=%lld\nsqlite_commits_per_s=%.0f\n", commits, (double)commits / secs);
    else
        printf("gpuq-bench-sqlite: %lld single-row commits in %.2f s: %.0f commits/s "
               "(WAL, synchronous=FULL)\n",
               commits, secs, (double)commits / secs);
    rc = 0;
out:
    sqlite3_finalize(ins);
    sqlite3_close(db);
    unlink(wal);
    unlink(shm);
    unlink(path);
    rmdir(dir);
    return rc;
}
