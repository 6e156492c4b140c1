/* sqlite_commit.c: gpuq-bench-sqlite, the baseline of `make bench`: how many
 * single-row commits per second SQLite manages on this machine, durable as
 * gpuqd's store is (WAL, synchronous=FULL), one INSERT of a job-sized row per
 * transaction, for --duration seconds in a fresh temp dir (removed after).
 * This is what a server committing each submit on its own could reach; group
 * commit is how gpuqd goes past it.
 *
 * --wal-prealloc BYTES measures the same commits with the WAL file already
 * written (zeros, fsynced) before the first commit, as gpuqd's store keeps
 * its WAL: an fdatasync of a file that grows also writes its new size and
 * blocks, about twice the cost of one that overwrites blocks already there,
 * and a fresh database's WAL grows until its first checkpoint restarts it.
 * SQLite reads a WAL of zeros as empty (no valid header) and writes its
 * header and frames over the zeros from offset 0; it never truncates the
 * file (no journal_size_limit). Both ways create the table, close and open
 * the database again, so the zeros are the only difference. */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "lat.h"

#define ROW_BYTES 300
/* Upper bound of --wal-prealloc: 1 GiB, far past a checkpoint's worth. */
#define WAL_PREALLOC_MAX (1LL << 30)
/* The first commits, timed apart: SQLite's default wal_autocheckpoint is
 * 1000 pages and a single-row commit writes about one frame, so these are
 * the commits during which a fresh WAL grows; after its first checkpoint it
 * is written again from the start, over blocks already there. */
#define FIRST_COMMITS 1000

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

/* fsync_path: fsync the file or directory PATH (a directory: so that a file
 * created in it is there after a crash too). */
static int fsync_path(const char *path, int flags)
{
    int fd = open(path, flags | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        fprintf(stderr, "gpuq-bench-sqlite: fsync %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* wal_prealloc: write BYTES zeros to the WAL file WAL (in DIR), then fsync
 * it and DIR, so that every block the commits write is already allocated
 * and the file's size does not change under their fdatasync. */
static int wal_prealloc(const char *wal, const char *dir, long long bytes)
{
    static const char zeros[1 << 16];
    int fd = open(wal, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "gpuq-bench-sqlite: create %s: %s\n", wal, strerror(errno));
        return -1;
    }
    long long left = bytes;
    while (left > 0) {
        size_t n = left < (long long)sizeof zeros ? (size_t)left : sizeof zeros;
        ssize_t w = write(fd, zeros, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            fprintf(stderr, "gpuq-bench-sqlite: write %s: %s\n", wal,
                    w < 0 ? strerror(errno) : "short write");
            close(fd);
            return -1;
        }
        left -= w;
    }
    if (fsync(fd) != 0) {
        fprintf(stderr, "gpuq-bench-sqlite: fsync %s: %s\n", wal, strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    return fsync_path(dir, O_RDONLY | O_DIRECTORY);
}

int main(int argc, char **argv)
{
    double duration_s = 3;
    int kv = 0;
    long long prealloc = 0;
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
        } else if (strcmp(argv[i], "--wal-prealloc") == 0 && i + 1 < argc) {
            char *end = NULL;
            errno = 0;
            prealloc = strtoll(argv[++i], &end, 10);
            if (errno || end == argv[i] || *end || prealloc < 0 || prealloc > WAL_PREALLOC_MAX) {
                fprintf(stderr, "gpuq-bench-sqlite: --wal-prealloc: bytes, an integer in "
                                "[0, %lld], not '%s'\n",
                        WAL_PREALLOC_MAX, argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--kv") == 0) {
            kv = 1;
        } else {
            fprintf(stderr, "usage: gpuq-bench-sqlite [--duration S] [--dir PARENT] "
                            "[--wal-prealloc BYTES] [--kv]\n");
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
    long long wal_end = -1;
    struct lat all, first; /* every commit's time; the first FIRST_COMMITS' */
    lat_init(&all);
    lat_init(&first);
    sqlite3 *db = NULL;
    sqlite3_stmt *ins = NULL;
    /* The schema first, in its own connection: closing it checkpoints and
     * removes the WAL, which --wal-prealloc then writes anew. */
    if (sqlite3_open(path, &db) != SQLITE_OK) {
        fprintf(stderr, "gpuq-bench-sqlite: open %s: %s\n", path, sqlite3_errmsg(db));
        goto out;
    }
    if (exec(db, "PRAGMA journal_mode=WAL") || exec(db, "PRAGMA synchronous=FULL") ||
        exec(db, "CREATE TABLE jobs (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, "
                 "state INTEGER NOT NULL, created_ms INTEGER NOT NULL, body TEXT NOT NULL)"))
        goto out;
    if (sqlite3_close(db) != SQLITE_OK) {
        fprintf(stderr, "gpuq-bench-sqlite: close %s: %s\n", path, sqlite3_errmsg(db));
        goto out;
    }
    db = NULL;
    if (prealloc > 0 && wal_prealloc(wal, dir, prealloc) != 0)
        goto out;
    if (sqlite3_open(path, &db) != SQLITE_OK) {
        fprintf(stderr, "gpuq-bench-sqlite: open %s: %s\n", path, sqlite3_errmsg(db));
        goto out;
    }
    if (exec(db, "PRAGMA journal_mode=WAL") || exec(db, "PRAGMA synchronous=FULL"))
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
        int64_t c0 = now;
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
        lat_add(&all, now - c0);
        if (commits <= FIRST_COMMITS)
            lat_add(&first, now - c0);
    }
    double secs = (double)(now - t0) / 1e9;
    /* The WAL's size at the end, before close: with --wal-prealloc it should
     * still be the preallocated size (SQLite wrote over the zeros). */
    struct stat st;
    if (stat(wal, &st) == 0)
        wal_end = (long long)st.st_size;
    double p50 = (double)lat_pct(&all, 50) / 1e6, p99 = (double)lat_pct(&all, 99) / 1e6;
    double first50 = (double)lat_pct(&first, 50) / 1e6;
    if (kv)
        printf("sqlite_commits=%lld\nsqlite_commits_per_s=%.0f\nsqlite_commit_p50_ms=%.3f\n"
               "sqlite_commit_p99_ms=%.3f\nsqlite_first_commits=%d\n"
               "sqlite_first_commits_p50_ms=%.3f\nsqlite_wal_prealloc_bytes=%lld\n"
               "sqlite_wal_bytes_end=%lld\n",
               commits, (double)commits / secs, p50, p99, FIRST_COMMITS, first50, prealloc,
               wal_end);
    else
        printf("gpuq-bench-sqlite: %lld single-row commits in %.2f s: %.0f commits/s, "
               "p50 %.3f ms, p99 %.3f ms, p50 of the first %d %.3f ms (WAL, synchronous=FULL; "
               "WAL preallocated: %lld bytes; at the end: %lld bytes)\n",
               commits, secs, (double)commits / secs, p50, p99, FIRST_COMMITS, first50, prealloc,
               wal_end);
    rc = 0;
out:
    lat_fini(&all);
    lat_fini(&first);
    sqlite3_finalize(ins);
    sqlite3_close(db);
    unlink(wal);
    unlink(shm);
    unlink(path);
    rmdir(dir);
    return rc;
}
