/* test_walbuf.c: the VFS that writes a WAL commit in one call (store/
 * walbuf.h), on real files in a temporary directory. A commit reaches the
 * file in one write (the kernel's count of this process's write calls,
 * /proc/self/io, beside the same commits through the default VFS); another
 * connection sees every commit at once; transactions larger than the
 * buffer, spilled mid-way or rolled back, leave a whole database; and a
 * write that fails fails its commit, which then leaves nothing behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/walbuf.h"

#define VFS "walbuf-test"

static char g_dir[64];
static char g_path[128];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/test_walbuf.XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    snprintf(g_path, sizeof g_path, "%s/t.db", g_dir);
    assert_int_equal(walbuf_register(VFS, NULL), SQLITE_OK);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    const char *sfx[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s%s", g_path, sfx[i]);
        unlink(p);
    }
    rmdir(g_dir);
    return 0;
}

static void exec_ok(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK)
        fail_msg("%s: %s", sql, msg ? msg : sqlite3_errstr(rc));
}

/* A connection as the store's writer has it: WAL, every commit synced. */
static sqlite3 *open_db(const char *vfs)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(g_path, &db,
                                     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                         SQLITE_OPEN_NOMUTEX,
                                     vfs),
                     SQLITE_OK);
    exec_ok(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                " PRAGMA wal_autocheckpoint=0;");
    return db;
}

static int64_t count(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

/* This process's write calls so far (write, pwrite, ...), by the kernel. */
static long long write_calls(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    if (!f)
        return -1;
    char line[128];
    long long n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "syscw: %lld", &n) == 1)
            break;
    fclose(f);
    return n;
}

/* Write calls a commit of one row into a table with two indexes (three
 * pages a commit) costs through vfs, over 50 commits. */
static double writes_a_commit(const char *vfs)
{
    sqlite3 *db = open_db(vfs);
    exec_ok(db, "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, a INT, b TEXT);"
                "CREATE INDEX IF NOT EXISTS t_a ON t(a); CREATE INDEX IF NOT EXISTS t_b ON t(b);"
                "INSERT INTO t(a, b) VALUES(0, 'warm-up');");
    long long before = write_calls();
    char sql[128];
    for (int i = 1; i <= 50; i++) {
        snprintf(sql, sizeof sql, "INSERT INTO t(a, b) VALUES(%d, 'row %d');", i, i);
        exec_ok(db, sql);
    }
    long long after = write_calls();
    sqlite3_close(db);
    return (double)(after - before) / 50;
}

static void test_a_commit_reaches_the_file_in_one_write(void **state)
{
    (void)state;
    if (write_calls() < 0)
        skip(); /* no /proc/self/io here */
    double plain = writes_a_commit(NULL);
    double gathered = writes_a_commit(VFS);
    print_message("# write calls a commit: %.2f by default, %.2f through %s\n", plain, gathered,
                  VFS);
    assert_true(plain >= 6.0); /* three frames, each a header and a page */
    assert_true(gathered <= 1.0);
}

static void test_another_connection_sees_every_commit_at_once(void **state)
{
    (void)state;
    sqlite3 *w = open_db(VFS);
    exec_ok(w, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);");
    sqlite3 *r = open_db(NULL);
    char sql[96];
    for (int i = 1; i <= 200; i++) {
        snprintf(sql, sizeof sql, "INSERT INTO t(v) VALUES('v%d');", i);
        exec_ok(w, sql);
        assert_int_equal(count(r, "SELECT count(*) FROM t"), i);
        snprintf(sql, sizeof sql, "SELECT count(*) FROM t WHERE v = 'v%d'", i);
        assert_int_equal(count(r, sql), 1);
    }
    sqlite3_close(r);
    sqlite3_close(w);
}

/* Begins a transaction and prepares sql in it. */
static sqlite3_stmt *begin_with(sqlite3 *db, const char *sql)
{
    exec_ok(db, "BEGIN");
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    return st;
}

/* 40 rows of 64 KiB, 2.5 MiB: more than WALBUF_BYTES (each row's bytes
 * derived from its number, their sum kept beside them to check later). */
static void big_transaction(sqlite3 *db, int from, const char *end)
{
    sqlite3_stmt *st = begin_with(db, "INSERT INTO big(id, sum, data) VALUES(?, ?, ?)");
    static unsigned char data[64 << 10];
    for (int i = from; i < from + 40; i++) {
        int64_t sum = 0;
        for (size_t k = 0; k < sizeof data; k++) {
            data[k] = (unsigned char)((k * 31 + (size_t)i * 7) >> 3);
            sum += data[k];
        }
        sqlite3_bind_int(st, 1, i);
        sqlite3_bind_int64(st, 2, sum);
        sqlite3_bind_blob(st, 3, data, sizeof data, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
        /* an update of an early row: its page may be in the WAL already */
        char sql[96];
        snprintf(sql, sizeof sql, "UPDATE big SET touched = touched + 1 WHERE id = %d", from);
        exec_ok(db, sql);
    }
    sqlite3_finalize(st);
    exec_ok(db, end);
}

/* Two big transactions committed and one rolled back between them, with
 * the page cache set by cache_sql, then read back by the default VFS from
 * the WAL, as another process would. */
static void big_transactions_stay_whole(const char *cache_sql)
{
    sqlite3 *w = open_db(VFS);
    exec_ok(w, cache_sql);
    exec_ok(w, "CREATE TABLE big(id INTEGER PRIMARY KEY, sum INT, touched INT DEFAULT 0, data BLOB);");
    big_transaction(w, 0, "COMMIT");
    big_transaction(w, 100, "ROLLBACK");
    big_transaction(w, 200, "COMMIT");
    exec_ok(w, "INSERT INTO big(id, sum, data) VALUES(999, 0, x'')");
    sqlite3_close(w);

    sqlite3 *r = open_db(NULL);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(r, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    assert_int_equal(count(r, "SELECT count(*) FROM big"), 81);
    assert_int_equal(count(r, "SELECT count(*) FROM big WHERE id >= 100 AND id < 200"), 0);
    assert_int_equal(count(r, "SELECT touched FROM big WHERE id = 0"), 40);
    assert_int_equal(count(r, "SELECT touched FROM big WHERE id = 200"), 40);
    assert_int_equal(sqlite3_prepare_v2(r, "SELECT id, sum, data FROM big WHERE id < 999", -1,
                                        &st, NULL),
                     SQLITE_OK);
    int rows = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *d = sqlite3_column_blob(st, 2);
        int n = sqlite3_column_bytes(st, 2);
        assert_int_equal(n, 64 << 10);
        int64_t sum = 0;
        for (int k = 0; k < n; k++)
            sum += d[k];
        assert_int_equal(sum, sqlite3_column_int64(st, 1));
        rows++;
    }
    sqlite3_finalize(st);
    assert_int_equal(rows, 80);
    sqlite3_close(r);
}

/* A cache of 16 pages: SQLite writes frames before the commit and reads
 * some back, so the buffer goes to the file in small parts. */
static void test_spilled_transactions_stay_whole(void **state)
{
    (void)state;
    big_transactions_stay_whole("PRAGMA cache_size=16;");
}

/* A cache of 64 MiB: every frame is written at the commit, so the buffer
 * fills and goes to the file whole, several times a commit. */
static void test_transactions_larger_than_the_buffer_stay_whole(void **state)
{
    (void)state;
    big_transactions_stay_whole("PRAGMA cache_size=-65536;");
}


static void test_a_failed_write_fails_its_commit_and_leaves_nothing(void **state)
{
    (void)state;
    sqlite3 *w = open_db(VFS);
    exec_ok(w, "PRAGMA cache_size=16;"
               "CREATE TABLE big(id INTEGER PRIMARY KEY, sum INT, touched INT DEFAULT 0, data BLOB);"
               "INSERT INTO big(id, sum, data) VALUES(1, 0, x'00');");
    /* Files may grow by no more than 256 KiB past the WAL's size now: the
     * next big transaction's frames cannot all be written. */
    char wal[160];
    snprintf(wal, sizeof wal, "%s-wal", g_path);
    struct stat stw;
    assert_int_equal(stat(wal, &stw), 0);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)stw.st_size + (256 << 10);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);

    sqlite3_stmt *st = begin_with(w, "INSERT INTO big(id, sum, data) VALUES(?, 0, ?)");
    static unsigned char data[64 << 10];
    int rc = SQLITE_DONE;
    for (int i = 10; i < 50 && rc == SQLITE_DONE; i++) {
        sqlite3_bind_int(st, 1, i);
        sqlite3_bind_blob(st, 2, data, sizeof data, SQLITE_STATIC);
        rc = sqlite3_step(st);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE)
        rc = sqlite3_exec(w, "COMMIT", NULL, NULL, NULL);
    assert_int_not_equal(rc, SQLITE_OK);
    assert_int_not_equal(rc, SQLITE_DONE);
    sqlite3_exec(w, "ROLLBACK", NULL, NULL, NULL); /* if SQLite has not already */

    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    exec_ok(w, "INSERT INTO big(id, sum, data) VALUES(2, 0, x'00');");
    sqlite3 *r = open_db(NULL);
    assert_int_equal(count(r, "SELECT count(*) FROM big"), 2);
    assert_int_equal(count(r, "SELECT count(*) FROM big WHERE id >= 10"), 0);
    sqlite3_close(r);
    sqlite3_close(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_commit_reaches_the_file_in_one_write, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_another_connection_sees_every_commit_at_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_spilled_transactions_stay_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transactions_larger_than_the_buffer_stay_whole,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_failed_write_fails_its_commit_and_leaves_nothing,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
