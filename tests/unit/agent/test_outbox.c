/* test_outbox.c: the agent's outbox with scripted head answers and a scripted
 * clock — what is retried (no answer, 5xx, 401, 429), what ends an outcome
 * (2xx delivered; 409, 404, 413, 400 dropped), the backoff, the result file's
 * lifetime, progress coalescing, the bounds, and the sending thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/outbox.h"
#include "common/clock.h"
#include "common/err.h"

#define MS NS_PER_MS

/* The scripted head: answers[i] for the i-th send (rc < 0: no answer); after
 * the script, every send answers `then`. Records what was sent. */
struct script {
    int n, pos;
    int rc[64];
    long status[64];
    long then;
    char sent_kind[256];
    char sent_job[256][OUTBOX_ID_MAX];
    char sent_cls[256][16];
    double sent_progress[256];
    int nsent;
    pthread_mutex_t mu;
};

static void script_init(struct script *s, long then)
{
    memset(s, 0, sizeof *s);
    s->then = then;
    pthread_mutex_init(&s->mu, NULL);
}

static void script_add(struct script *s, int rc, long status)
{
    s->rc[s->n] = rc;
    s->status[s->n] = status;
    s->n++;
}

static int scripted_send(void *ctx, const struct outbox_item *it, long *status)
{
    struct script *s = ctx;
    pthread_mutex_lock(&s->mu);
    if (s->nsent < 256) {
        s->sent_kind[s->nsent] = it->kind == OUTBOX_COMPLETE ? 'C'
                                 : it->kind == OUTBOX_FAIL  ? 'F'
                                                            : 'P';
        snprintf(s->sent_job[s->nsent], OUTBOX_ID_MAX, "%s", it->job_id);
        snprintf(s->sent_cls[s->nsent], 16, "%s", it->cls);
        s->sent_progress[s->nsent] = it->progress;
    }
    s->nsent++;
    int rc = 0;
    if (s->pos < s->n) {
        rc = s->rc[s->pos];
        *status = s->status[s->pos];
        s->pos++;
    } else {
        *status = s->then;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* A result file as the runtime would leave it. */
static void make_file(char *path, size_t size, const char *content)
{
    snprintf(path, size, "/tmp/gpuq-test-outbox-%d-XXXXXX", (int)getpid());
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
    close(fd);
}

static bool exists(const char *path)
{
    return access(path, F_OK) == 0;
}

static void test_verdicts(void **state)
{
    (void)state;
    for (int k = OUTBOX_COMPLETE; k <= OUTBOX_FAIL; k++) {
        assert_int_equal(outbox_verdict(k, 0, 200), OUTBOX_DONE);
        assert_int_equal(outbox_verdict(k, 0, 204), OUTBOX_DONE);
        assert_int_equal(outbox_verdict(k, 0, 409), OUTBOX_DROP);
        assert_int_equal(outbox_verdict(k, 0, 404), OUTBOX_DROP);
        assert_int_equal(outbox_verdict(k, 0, 413), OUTBOX_DROP);
        assert_int_equal(outbox_verdict(k, 0, 400), OUTBOX_DROP);
        assert_int_equal(outbox_verdict(k, GPUQ_EIO, 0), OUTBOX_RETRY);
        assert_int_equal(outbox_verdict(k, 0, 500), OUTBOX_RETRY);
        assert_int_equal(outbox_verdict(k, 0, 503), OUTBOX_RETRY);
        assert_int_equal(outbox_verdict(k, 0, 401), OUTBOX_RETRY);
        assert_int_equal(outbox_verdict(k, 0, 429), OUTBOX_RETRY);
    }
    /* Progress is best effort: never retried. */
    assert_int_equal(outbox_verdict(OUTBOX_PROGRESS, 0, 200), OUTBOX_DONE);
    assert_int_equal(outbox_verdict(OUTBOX_PROGRESS, GPUQ_EIO, 0), OUTBOX_DROP);
    assert_int_equal(outbox_verdict(OUTBOX_PROGRESS, 0, 503), OUTBOX_DROP);
}

static void test_delay_doubles_to_cap(void **state)
{
    (void)state;
    const int64_t want[] = {200, 400, 800, 1600, 3200, 5000, 5000};
    for (int i = 0; i < 7; i++)
        assert_int_equal(outbox_delay_ms(i + 1, 200, 5000), want[i]);
    assert_int_equal(outbox_delay_ms(1000000, 200, 5000), 5000);
}

/* A completion while the head is away: retried with backoff, never before it
 * is due, delivered once the head answers 200; the file goes only then. */
static void test_complete_retried_until_delivered(void **state)
{
    (void)state;
    struct script s;
    script_init(&s, 200);
    script_add(&s, GPUQ_EIO, 0);
    script_add(&s, 0, 503);
    script_add(&s, GPUQ_EIO, 0);
    struct outbox ob;
    outbox_init(&ob, 8, 1 << 20, 200, 5000, scripted_send, &s);
    char path[128];
    make_file(path, sizeof path, "PNGDATA");
    int64_t t = 1000 * MS;
    outbox_put_complete(&ob, "h-gpu0", "42", 1, NULL, path, "image/png", 7, 10, 20, true, t);
    assert_true(outbox_full(&ob) == false);

    bool tried;
    int64_t next = outbox_step(&ob, t, &tried);
    assert_true(tried);
    assert_int_equal(next, t + 200 * MS);
    /* Not due yet: nothing is sent. */
    next = outbox_step(&ob, t + 199 * MS, &tried);
    assert_false(tried);
    assert_int_equal(next, t + 200 * MS);
    t += 200 * MS;
    next = outbox_step(&ob, t, &tried); /* 503 */
    assert_true(tried);
    assert_int_equal(next, t + 400 * MS);
    t += 400 * MS;
    next = outbox_step(&ob, t, &tried); /* unreachable */
    assert_int_equal(next, t + 800 * MS);
    assert_true(exists(path));
    assert_int_equal(outbox_outcomes_for(&ob, "h-gpu0", NULL, NULL, 0), 1);
    t += 800 * MS;
    next = outbox_step(&ob, t, &tried); /* 200 */
    assert_true(tried);
    assert_int_equal(next, INT64_MAX);
    assert_false(exists(path));
    assert_int_equal(s.nsent, 4);
    struct outbox_stats st;
    outbox_stats(&ob, &st);
    assert_int_equal(st.items, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.delivered, 1);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(st.retries, 3);
    assert_int_equal(outbox_outcomes_for(&ob, "h-gpu0", NULL, NULL, 0), 0);
    outbox_fini(&ob);
}

/* Network errors and 5xx are retried for as long as it takes: 60 failures,
 * the delay capped at max, then delivered. */
static void test_retried_forever_with_capped_delay(void **state)
{
    (void)state;
    struct script s;
    script_init(&s, 200);
    for (int i = 0; i < 60; i++)
        script_add(&s, i % 2 ? GPUQ_EIO : 0, i % 2 ? 0 : 502);
    struct outbox ob;
    outbox_init(&ob, 8, 1 << 20, 200, 5000, scripted_send, &s);
    int64_t t = 0;
    outbox_put_fail(&ob, "h-gpu0", "7", 2, NULL, "crash", "runtime died", t);
    bool tried;
    int64_t next = t;
    int sends = 0;
    while ((next = outbox_step(&ob, next, &tried)) != INT64_MAX) {
        assert_true(tried);
        sends++;
        assert_true(sends <= 61);
        if (sends >= 6) /* 200, 400, 800, 1600, 3200, then 5000 each */
            assert_int_equal(next - t, 5000 * MS);
        t = next;
    }
    assert_int_equal(sends, 60);
    assert_int_equal(s.nsent, 61);
    assert_int_equal(s.sent_kind[60], 'F');
    assert_string_equal(s.sent_cls[60], "crash");
    struct outbox_stats st;
    outbox_stats(&ob, &st);
    assert_int_equal(st.delivered, 1);
    outbox_fini(&ob);
}

/* 409 (fenced off), 404 (unknown job), 413 and 400 end an outcome: dropped,
 * its file removed, counted. */
static void test_final_refusals_drop(void **state)
{
    (void)state;
    const long answers[] = {409, 404, 413, 400};
    for (int i = 0; i < 4; i++) {
        struct script s;
        script_init(&s, answers[i]);
        struct outbox ob;
        outbox_init(&ob, 8, 1 << 20, 200, 5000, scripted_send, &s);
        char path[128];
        make_file(path, sizeof path, "x");
        outbox_put_complete(&ob, "h-gpu0", "9", 3, NULL, path, "image/png", 1, 0, 5, false, 0);
        bool tried;
        assert_int_equal(outbox_step(&ob, 0, &tried), INT64_MAX);
        assert_true(tried);
        assert_false(exists(path));
        assert_int_equal(s.nsent, 1);
        struct outbox_stats st;
        outbox_stats(&ob, &st);
        assert_int_equal(st.items, 0);
        assert_int_equal(st.dropped, 1);
        assert_int_equal(st.delivered, 0);
        outbox_fini(&ob);
    }
}

/* When the head answers again, what waited on its backoff is due at once. */
static void test_answer_makes_waiting_items_due(void **state)
{
    (void)state;
    struct script s;
    script_init(&s, 200);
    for (int i = 0; i < 5; i++)
        script_add(&s, GPUQ_EIO, 0);
    struct outbox ob;
    outbox_init(&ob, 8, 1 << 20, 200, 5000, scripted_send, &s);
    int64_t t = 0;
    outbox_put_fail(&ob, "h-gpu0", "1", 1, NULL, "oom", "a", t);
    bool tried;
    int64_t next = t;
    for (int i = 0; i < 5; i++) /* A backs off: 200 … 3200 ms */
        next = outbox_step(&ob, next, &tried);
    int64_t a_due = next;
    assert_int_equal(a_due, (200 + 400 + 800 + 1600 + 3200) * MS);
    /* B is queued 1 s before A's next try, and is answered 200 at once. */
    int64_t tb = a_due - 1000 * MS;
    outbox_put_fail(&ob, "h-gpu1", "2", 1, NULL, "oom", "b", tb);
    next = outbox_step(&ob, tb, &tried);
    assert_true(tried);
    assert_string_equal(s.sent_job[5], "2");
    assert_int_equal(next, tb); /* A is due now, not in a second */
    outbox_step(&ob, tb, &tried);
    assert_true(tried);
    assert_string_equal(s.sent_job[6], "1");
    struct outbox_stats st;
    outbox_stats(&ob, &st);
    assert_int_equal(st.delivered, 2);
    outbox_fini(&ob);
}

/* Due items go in the order they were queued. */
static void test_fifo_among_due(void **state)
{
    (void)state;
    struct script s;
    script_init(&s, 200);
    struct outbox ob;
    outbox_init(&ob, 8, 1 << 20, 200, 5000, scripted_send, &s);
    outbox_put_fail(&ob, "w", "10", 1, NULL, "oom", "", 0);
    outbox_put_fail(&ob, "w", "11", 1, NULL, "oom", "", 0);
    outbox_put_fail(&ob, "w", "12", 1, NULL, "oom", "", 0);
    bool tried;
    do
        outbox_step(&ob, 0, &tried);
    while (tried);
    assert_int_equal(s.nsent, 3);
    assert_string_equal(s.sent_job[0], "10");
    assert_string_equal(s.sent_job[1], "11");
    assert_string_equal(s.sent_job[2], "12");
    outbox_fini(&ob);
}

/* Progress: the newest report of an attempt replaces an unsent one; it is
 * dropped once the attempt's outcome is queued, and never retried. */
static void test_progress_coalesced_and_dropped(void **state)
{
    (void)state;
    struct script s;
    script_init(&s, 200);
    script_add(&s, GPUQ_EIO, 0);
    struct outbox ob;
    outbox_init(&ob, 8, 1 << 20, 200, 5000, scripted_send, &s);
    outbox_put_progress(&ob, "w", "5", 1, NULL, "generating", 0.25, NULL, 0);
    outbox_put_progress(&ob, "w", "5", 1, NULL, "generating", 0.5, NULL, 0);
    bool tried;
    assert_int_equal(outbox_step(&ob, 0, &tried), INT64_MAX); /* no answer: dropped */
    assert_int_equal(s.nsent, 1);
    assert_true(s.sent_progress[0] == 0.5);
    assert_int_equal(outbox_step(&ob, 10 * NS_PER_S, &tried), INT64_MAX);
    assert_false(tried);

    outbox_put_progress(&ob, "w", "5", 1, NULL, "generating", 0.75, NULL, 0);
    outbox_put_fail(&ob, "w", "5", 1, NULL, "cuda", "boom", 0);
    outbox_put_progress(&ob, "w", "5", 1, NULL, "generating", 0.9, NULL, 0); /* too late */
    do
        outbox_step(&ob, 0, &tried);
    while (tried);
    assert_int_equal(s.nsent, 2);
    assert_int_equal(s.sent_kind[1], 'F');
    /* Progress is not an outcome: not listed for the heartbeat, not counted. */
    outbox_put_progress(&ob, "w", "6", 1, NULL, "loading", 0, "loading x", 0);
    assert_int_equal(outbox_outcomes_for(&ob, "w", NULL, NULL, 0), 0);
    outbox_fini(&ob);
}

/* The bounds say "take no new work"; an outcome is never refused. */
static void test_full_by_count_and_bytes_never_refuses(void **state)
{
    (void)state;
    struct script s;
    script_init(&s, 200);
    struct outbox ob;
    outbox_init(&ob, 2, 100, 200, 5000, scripted_send, &s);
    outbox_put_fail(&ob, "w", "1", 1, NULL, "oom", "", 0);
    assert_false(outbox_full(&ob));
    outbox_put_fail(&ob, "w", "2", 1, NULL, "oom", "", 0);
    assert_true(outbox_full(&ob));
    outbox_put_fail(&ob, "w", "3", 1, NULL, "oom", "", 0);
    assert_int_equal(outbox_outcomes_for(&ob, "w", NULL, NULL, 0), 3);
    bool tried;
    do
        outbox_step(&ob, 0, &tried);
    while (tried);
    assert_false(outbox_full(&ob));
    assert_int_equal(s.nsent, 3);

    char p1[128], p2[128];
    make_file(p1, sizeof p1, "a");
    make_file(p2, sizeof p2, "b");
    outbox_put_complete(&ob, "w", "4", 1, NULL, p1, "image/png", 60, 0, 0, false, 0);
    assert_false(outbox_full(&ob));
    outbox_put_complete(&ob, "w", "5", 1, NULL, p2, "image/png", 60, 0, 0, false, 0);
    assert_true(outbox_full(&ob)); /* 120 bytes ≥ 100 */
    struct outbox_stats st;
    outbox_stats(&ob, &st);
    assert_int_equal(st.bytes, 120);
    /* Stopping with outcomes undelivered removes their files. */
    outbox_fini(&ob);
    assert_false(exists(p1));
    assert_false(exists(p2));
}

/* The heartbeat's list: outcomes of one worker, sending ones included. */
static void test_outcomes_for_worker(void **state)
{
    (void)state;
    struct script s;
    script_init(&s, 200);
    struct outbox ob;
    outbox_init(&ob, 8, 1 << 20, 200, 5000, scripted_send, &s);
    outbox_put_fail(&ob, "a-gpu0", "1", 2, NULL, "oom", "", 0);
    outbox_put_fail(&ob, "a-gpu1", "2", 1, NULL, "oom", "", 0);
    outbox_put_fail(&ob, "a-gpu0", "3", 4, NULL, "oom", "", 0);
    char ids[4][OUTBOX_ID_MAX];
    int64_t att[4];
    assert_int_equal(outbox_outcomes_for(&ob, "a-gpu0", ids, att, 4), 2);
    assert_string_equal(ids[0], "1");
    assert_int_equal(att[0], 2);
    assert_string_equal(ids[1], "3");
    assert_int_equal(att[1], 4);
    assert_int_equal(outbox_outcomes_for(&ob, "a-gpu0", ids, att, 1), 2); /* counts past max */
    outbox_fini(&ob);
}

/* The on-send hook's view: how often it ran, and whether the outcomes of
 * workers "a" and "b" waited behind a request when it last did. */
struct hook_view {
    struct outbox *ob;
    int calls;
    bool a_behind, b_behind;
};

static void on_send_hook(void *arg)
{
    struct hook_view *v = arg;
    v->calls++;
    v->a_behind = outbox_waits_behind(v->ob, "a");
    v->b_behind = outbox_waits_behind(v->ob, "b");
}

/* An outcome never sent waits behind a request that is out; the hook runs
 * once reports are marked as leaving and before their request; progress
 * neither counts nor calls it; a retried outcome has left once. */
static void test_waits_behind_and_the_send_hook(void **state)
{
    (void)state;
    struct script s;
    script_init(&s, 200);
    script_add(&s, 0, 200);       /* a's progress */
    script_add(&s, GPUQ_EIO, 0);  /* a's failure: no answer */
    struct outbox ob;
    outbox_init(&ob, 8, 1 << 20, 200, 5000, scripted_send, &s);
    struct hook_view v = {.ob = &ob};
    outbox_set_on_send(&ob, on_send_hook, &v);
    outbox_put_progress(&ob, "a", "1", 1, NULL, "generating", 0.5, "", 0);
    outbox_put_fail(&ob, "a", "2", 1, NULL, "oom", "", 0);
    outbox_put_fail(&ob, "b", "3", 1, NULL, "oom", "", 0);
    /* Nothing is out: each would leave at once. */
    assert_false(outbox_waits_behind(&ob, "a"));
    assert_false(outbox_waits_behind(&ob, "b"));
    bool tried;
    outbox_step(&ob, 0, &tried); /* a's progress: no hook */
    assert_true(tried);
    assert_int_equal(v.calls, 0);
    outbox_step(&ob, 0, &tried); /* a's failure, unanswered: kept for a retry */
    assert_true(tried);
    assert_int_equal(v.calls, 1);
    assert_false(v.a_behind); /* it is the one leaving */
    assert_true(v.b_behind);  /* b's waits behind it */
    assert_int_equal(outbox_outcomes_for(&ob, "a", NULL, NULL, 0), 1);
    outbox_step(&ob, 0, &tried); /* b's failure */
    assert_int_equal(v.calls, 2);
    assert_false(v.a_behind); /* a's has left once, and is not due */
    assert_false(v.b_behind);
    outbox_step(&ob, 200 * MS, &tried); /* a's retry, delivered */
    assert_int_equal(v.calls, 3);
    assert_int_equal(outbox_outcomes_for(&ob, "a", NULL, NULL, 0), 0);
    outbox_fini(&ob);
}

static void count_hook(void *arg)
{
    (*(int *)arg)++;
}

/* The room hook: once a worker has found the outbox full (outbox_full true),
 * the first step that leaves it below its bounds runs the hook, once; a full
 * outbox nobody asked about, or one still full after a step, runs nothing. */
static void test_room_hook_after_full(void **state)
{
    (void)state;
    struct script s;
    script_init(&s, 200);
    script_add(&s, GPUQ_EIO, 0); /* the first try: no answer */
    struct outbox ob;
    outbox_init(&ob, 2, 1 << 20, 200, 5000, scripted_send, &s);
    int rooms = 0;
    outbox_set_on_room(&ob, count_hook, &rooms);
    outbox_put_fail(&ob, "w", "1", 1, NULL, "oom", "", 0);
    outbox_put_fail(&ob, "w", "2", 1, NULL, "oom", "", 0);
    outbox_put_fail(&ob, "w", "3", 1, NULL, "oom", "", 0);
    bool tried;
    outbox_step(&ob, 0, &tried); /* no answer: all three still held */
    assert_true(tried);
    assert_int_equal(rooms, 0); /* full, but nobody asked */
    assert_true(outbox_full(&ob)); /* a worker finds it full */
    outbox_step(&ob, 0, &tried); /* "2" delivered: 2 left, still full */
    assert_true(tried);
    assert_true(outbox_full(&ob));
    assert_int_equal(rooms, 0);
    outbox_step(&ob, 0, &tried); /* "3" delivered: room */
    assert_int_equal(rooms, 1);
    assert_false(outbox_full(&ob));
    outbox_step(&ob, 200 * MS, &tried); /* "1" retried, delivered: no second call */
    assert_true(tried);
    assert_int_equal(rooms, 1);
    assert_int_equal(outbox_outcomes_for(&ob, "w", NULL, NULL, 0), 0);
    /* Full again and asked: the next answer that leaves room calls it again. */
    outbox_put_fail(&ob, "w", "4", 1, NULL, "oom", "", 0);
    outbox_put_fail(&ob, "w", "5", 1, NULL, "oom", "", 0);
    assert_true(outbox_full(&ob));
    outbox_step(&ob, 200 * MS, &tried);
    assert_int_equal(rooms, 2);
    outbox_fini(&ob);
}

/* A sender that blocks until released, to look at the outbox mid-send. */
struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool entered, release;
    long status;
    int calls;
};

static int gated_send(void *ctx, const struct outbox_item *it, long *status)
{
    (void)it;
    struct gate *g = ctx;
    pthread_mutex_lock(&g->mu);
    g->calls++;
    g->entered = true;
    pthread_cond_broadcast(&g->cv);
    while (!g->release)
        pthread_cond_wait(&g->cv, &g->mu);
    *status = g->status;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

/* While a send is out (a slow head), putting more never waits for it, and the
 * item being sent still counts for the heartbeat. The thread then delivers
 * everything and stops. */
static void test_thread_put_never_waits_for_a_slow_send(void **state)
{
    (void)state;
    struct gate g = {.status = 200};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    struct outbox ob;
    outbox_init(&ob, 8, 1 << 20, 1, 5, gated_send, &g);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, outbox_main, &ob), 0);
    outbox_put_fail(&ob, "w", "1", 1, NULL, "oom", "", clock_mono_ns());
    pthread_mutex_lock(&g.mu);
    while (!g.entered)
        pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);

    int64_t t0 = clock_mono_ns();
    for (int i = 2; i <= 20; i++) {
        char id[16];
        snprintf(id, sizeof id, "%d", i);
        outbox_put_fail(&ob, "w", id, 1, NULL, "oom", "", clock_mono_ns());
    }
    assert_true(clock_mono_ns() - t0 < 500 * MS);
    assert_int_equal(outbox_outcomes_for(&ob, "w", NULL, NULL, 0), 20);

    pthread_mutex_lock(&g.mu);
    g.release = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    for (int i = 0; i < 1000 && outbox_outcomes_for(&ob, "w", NULL, NULL, 0) > 0; i++) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(outbox_outcomes_for(&ob, "w", NULL, NULL, 0), 0);
    assert_int_equal(g.calls, 20);
    outbox_stop(&ob);
    pthread_join(th, NULL);
    outbox_fini(&ob);
}

/* The scripted batch call: answers the request with `status` and each item
 * with item[i] (by position in the call); records each call's size. */
struct bscript {
    int rc;
    long status;
    long item[OUTBOX_BATCH_MAX];
    int calls;
    int sizes[16];
    char jobs[16][OUTBOX_BATCH_MAX][OUTBOX_ID_MAX];
};

/* The single-send script and the batch script side by side in one ctx. */
struct both {
    struct script s;
    struct bscript *b;
};

static int scripted_batch(void *ctx, struct outbox_item *const *items, int n, long *status,
                          long *statuses)
{
    struct bscript *b = ((struct both *)ctx)->b; /* scripted_send sees its first member */
    if (b->calls < 16) {
        b->sizes[b->calls] = n;
        for (int i = 0; i < n; i++)
            snprintf(b->jobs[b->calls][i], OUTBOX_ID_MAX, "%s", items[i]->job_id);
    }
    b->calls++;
    *status = b->status;
    for (int i = 0; i < n; i++)
        statuses[i] = b->item[i];
    return b->rc;
}

/* Due completions go in one request; each item's own answer decides it: 200
 * delivered (file removed), 409 dropped, 503 retried with backoff, alone. */
static void test_batch_one_request_per_item_verdicts(void **state)
{
    (void)state;
    struct both ctx;
    struct bscript b = {.status = 200, .item = {200, 409, 503}};
    script_init(&ctx.s, 200);
    ctx.b = &b;
    struct outbox ob;
    outbox_init(&ob, 32, 1 << 30, 200, 5000, scripted_send, &ctx);
    outbox_set_batch(&ob, scripted_batch);
    char p[3][64];
    const char *jobs[3] = {"1", "2", "3"};
    for (int i = 0; i < 3; i++) {
        make_file(p[i], sizeof p[i], "png");
        outbox_put_complete(&ob, "w", jobs[i], 1, NULL, p[i], "image/png", 3, 0, 5, false, 0);
    }
    /* A failure is never batched: it goes by itself, in its FIFO turn. */
    outbox_put_fail(&ob, "w", "4", 1, NULL, "oom", "x", 0);
    bool tried;
    outbox_step(&ob, 0, &tried);
    assert_true(tried);
    assert_int_equal(b.calls, 1);
    assert_int_equal(b.sizes[0], 3);
    assert_string_equal(b.jobs[0][0], "1");
    assert_string_equal(b.jobs[0][2], "3");
    assert_false(exists(p[0]));
    assert_false(exists(p[1]));
    assert_true(exists(p[2]));
    struct outbox_stats st;
    outbox_stats(&ob, &st);
    assert_int_equal(st.delivered, 1);
    assert_int_equal(st.dropped, 1);
    assert_int_equal(st.retries, 1);
    /* Next: the failure alone (the retried completion is not due yet). */
    outbox_step(&ob, 1 * MS, &tried);
    assert_true(tried);
    assert_int_equal(ctx.s.nsent, 1);
    assert_int_equal(ctx.s.sent_kind[0], 'F');
    assert_int_equal(b.calls, 1);
    /* The 503 kept its backoff through the batch's own 200, but the head's
     * answer to the failure makes it due at once; it goes in a batch of one. */
    b.item[0] = 200;
    outbox_step(&ob, 2 * MS, &tried);
    assert_true(tried);
    assert_int_equal(b.calls, 2);
    assert_int_equal(b.sizes[1], 1);
    assert_string_equal(b.jobs[1][0], "3");
    assert_false(exists(p[2]));
    assert_int_equal(outbox_outcomes_for(&ob, "w", NULL, NULL, 0), 0);
    outbox_fini(&ob);
}

/* An older head answers the batch 404: no item is dropped or delayed; from
 * then on every result goes alone, through the single call. */
static void test_batch_unknown_to_head_falls_back_to_single(void **state)
{
    (void)state;
    struct both ctx;
    struct bscript b = {.status = 404};
    script_init(&ctx.s, 200);
    ctx.b = &b;
    struct outbox ob;
    outbox_init(&ob, 32, 1 << 30, 200, 5000, scripted_send, &ctx);
    outbox_set_batch(&ob, scripted_batch);
    char p[2][64];
    make_file(p[0], sizeof p[0], "a");
    make_file(p[1], sizeof p[1], "b");
    outbox_put_complete(&ob, "w", "1", 1, NULL, p[0], "image/png", 1, 0, 5, false, 0);
    outbox_put_complete(&ob, "w", "2", 1, NULL, p[1], "image/png", 1, 0, 5, false, 0);
    bool tried;
    outbox_step(&ob, 0, &tried);
    assert_int_equal(b.calls, 1);
    struct outbox_stats st;
    outbox_stats(&ob, &st);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(st.retries, 0);
    outbox_step(&ob, 0, &tried); /* due at once, by itself */
    outbox_step(&ob, 0, &tried);
    assert_int_equal(b.calls, 1);
    assert_int_equal(ctx.s.nsent, 2);
    assert_string_equal(ctx.s.sent_job[0], "1");
    assert_string_equal(ctx.s.sent_job[1], "2");
    assert_int_equal(outbox_outcomes_for(&ob, "w", NULL, NULL, 0), 0);
    assert_false(exists(p[0]) || exists(p[1]));
    outbox_fini(&ob);
}

/* No answer at all: every item of the batch is retried with backoff, none dropped. */
static void test_batch_without_answer_retries_all(void **state)
{
    (void)state;
    struct both ctx;
    struct bscript b = {.rc = GPUQ_EIO};
    script_init(&ctx.s, 200);
    ctx.b = &b;
    struct outbox ob;
    outbox_init(&ob, 32, 1 << 30, 200, 5000, scripted_send, &ctx);
    outbox_set_batch(&ob, scripted_batch);
    char p[2][64];
    make_file(p[0], sizeof p[0], "a");
    make_file(p[1], sizeof p[1], "b");
    outbox_put_complete(&ob, "w", "1", 1, NULL, p[0], "image/png", 1, 0, 5, false, 0);
    outbox_put_complete(&ob, "w", "2", 1, NULL, p[1], "image/png", 1, 0, 5, false, 0);
    bool tried;
    int64_t next = outbox_step(&ob, 0, &tried);
    assert_int_equal(next, 200 * MS);
    assert_true(exists(p[0]) && exists(p[1]));
    b.rc = 0;
    b.status = 200;
    b.item[0] = b.item[1] = 200;
    outbox_step(&ob, next, &tried);
    assert_int_equal(b.calls, 2);
    assert_int_equal(b.sizes[1], 2);
    assert_int_equal(outbox_outcomes_for(&ob, "w", NULL, NULL, 0), 0);
    outbox_fini(&ob);
}

/* A small result held in memory travels like a file's: delivered in a batch,
 * freed when it leaves; one still waiting at the end is freed too. */
static void test_result_in_memory(void **state)
{
    (void)state;
    struct both ctx;
    struct bscript b = {.status = 200, .item = {200}};
    script_init(&ctx.s, 200);
    ctx.b = &b;
    struct outbox ob;
    outbox_init(&ob, 32, 1 << 30, 200, 5000, scripted_send, &ctx);
    outbox_set_batch(&ob, scripted_batch);
    char *d1 = malloc(4), *d2 = malloc(4);
    memcpy(d1, "png1", 4);
    memcpy(d2, "png2", 4);
    outbox_put_complete_data(&ob, "w", "1", 1, NULL, d1, "image/png", 4, 0, 5, false, 0);
    struct outbox_stats st;
    outbox_stats(&ob, &st);
    assert_int_equal(st.bytes, 4);
    bool tried;
    outbox_step(&ob, 0, &tried);
    assert_int_equal(b.calls, 1);
    assert_int_equal(outbox_outcomes_for(&ob, "w", NULL, NULL, 0), 0);
    outbox_put_complete_data(&ob, "w", "2", 1, NULL, d2, "image/png", 4, 0, 5, false, 0);
    outbox_fini(&ob); /* frees d2 (a leak checker would say otherwise) */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verdicts),
        cmocka_unit_test(test_delay_doubles_to_cap),
        cmocka_unit_test(test_complete_retried_until_delivered),
        cmocka_unit_test(test_retried_forever_with_capped_delay),
        cmocka_unit_test(test_final_refusals_drop),
        cmocka_unit_test(test_answer_makes_waiting_items_due),
        cmocka_unit_test(test_fifo_among_due),
        cmocka_unit_test(test_progress_coalesced_and_dropped),
        cmocka_unit_test(test_full_by_count_and_bytes_never_refuses),
        cmocka_unit_test(test_outcomes_for_worker),
        cmocka_unit_test(test_waits_behind_and_the_send_hook),
        cmocka_unit_test(test_room_hook_after_full),
        cmocka_unit_test(test_thread_put_never_waits_for_a_slow_send),
        cmocka_unit_test(test_batch_one_request_per_item_verdicts),
        cmocka_unit_test(test_batch_unknown_to_head_falls_back_to_single),
        cmocka_unit_test(test_batch_without_answer_retries_all),
        cmocka_unit_test(test_result_in_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
