/* test_jobs.c: the job table's jobs at rest (head/jobs.h, issue 20) — a
 * queued job put at rest comes back from jobs_find with the same record and
 * the same counts; jobs that must stay in full do; recovery's straight-to-rest
 * insert; idempotency lookups; jobs_foreach and jobs_sweep over many. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "head/jobs.h"
#include "store/store.h"

#define HASH_A "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

/* A committed-to-be queued job as the API would make it. */
static void make_rec(struct job_rec *r, uint64_t id, const char *idem)
{
    memset(r, 0, sizeof *r);
    r->id = id;
    r->tenant_id = 7;
    snprintf(r->capability, sizeof r->capability, "image.fast");
    snprintf(r->model, sizeof r->model, "image-v2");
    char params[96];
    snprintf(params, sizeof params, "{\"prompt\":\"a fox\",\"seed\":%llu}", (unsigned long long)id);
    r->params_json = xstrdup(params);
    r->width = 512;
    r->height = 768;
    r->steps = 30;
    r->frames = 2;
    r->lane = LANE_BATCH;
    r->tier = TIER_FREE;
    snprintf(r->idem_key, sizeof r->idem_key, "%s", idem ? idem : "");
    snprintf(r->body_hash, sizeof r->body_hash, "%s", HASH_A);
    lc_init(&r->lc, 0, 45000);
    r->cost_s = 2.5;
    r->tag_s = 1.25;
    r->created_ms = 1700000000000 + (int64_t)id;
    r->admitted = true;
    snprintf(r->tenant_name, sizeof r->tenant_name, "acme");
    r->order_ns = 99 + (int64_t)id;
}

/* a: a job back from rest; b: the record it was made from. The body hash is
 * kept only with an idempotency key (only a replay of the key compares it). */
static void assert_same(const struct job_rec *a, const struct job_rec *b)
{
    assert_int_equal(a->id, b->id);
    assert_int_equal(a->tenant_id, b->tenant_id);
    assert_string_equal(a->capability, b->capability);
    assert_string_equal(a->model, b->model);
    assert_string_equal(a->params_json, b->params_json);
    assert_int_equal(a->width, b->width);
    assert_int_equal(a->height, b->height);
    assert_int_equal(a->steps, b->steps);
    assert_int_equal(a->frames, b->frames);
    assert_int_equal(a->lane, b->lane);
    assert_int_equal(a->tier, b->tier);
    assert_string_equal(a->idem_key, b->idem_key);
    assert_string_equal(a->body_hash, b->idem_key[0] ? b->body_hash : "");
    assert_int_equal(a->lc.state, b->lc.state);
    assert_int_equal(a->lc.attempt, b->lc.attempt);
    assert_int_equal(a->lc.deadline_ms, b->lc.deadline_ms);
    assert_int_equal(a->lc.timeout_ms, b->lc.timeout_ms);
    assert_true(a->cost_s == b->cost_s);
    assert_true(a->tag_s == b->tag_s);
    assert_int_equal(a->created_ms, b->created_ms);
    assert_int_equal(a->admitted, b->admitted);
    assert_string_equal(a->tenant_name, b->tenant_name);
    assert_int_equal(a->order_ns, b->order_ns);
    assert_int_equal(a->nattempts, b->nattempts);
}

/* The counts (jobs_queue_stats takes the lock itself: called with it held,
 * this lets go around the call). */
static long long queued_count(struct jobs *t, long long *depth, int64_t *backlog_ms)
{
    long long states[JOB_NSTATES];
    struct jobs_queue *v = NULL;
    int cap = 0;
    jobs_unlock(t);
    int n = jobs_queue_stats(t, states, &v, &cap);
    jobs_lock(t);
    *depth = n > 0 ? v[0].depth : 0;
    *backlog_ms = n > 0 ? v[0].backlog_ms : 0;
    free(v);
    return states[LC_QUEUED];
}

static void test_rest_and_back_same_record_and_counts(void **state)
{
    (void)state;
    struct jobs *t = jobs_create();
    struct job_rec r, want;
    make_rec(&r, 5, "order-1");
    job_rec_copy(&want, &r);
    jobs_lock(t);
    struct hjob *j = jobs_insert(t, &r);
    jobs_mark_committed(t, j);
    j->version = 3;
    long long depth;
    int64_t backlog;
    assert_int_equal(queued_count(t, &depth, &backlog), 1);
    assert_true(jobs_freeze(t, j));
    size_t full, rest;
    jobs_memory(t, &full, &rest);
    assert_int_equal(full, 0);
    assert_int_equal(rest, 1);
    assert_int_equal(queued_count(t, &depth, &backlog), 1); /* still counted */
    assert_int_equal(depth, 1);
    assert_int_equal(backlog, 2500);

    j = jobs_find_idem(t, 7, "order-1"); /* brings it back */
    assert_non_null(j);
    assert_true(j->committed);
    assert_int_equal(j->version, 3);
    assert_same(&j->rec, &want);
    jobs_memory(t, &full, &rest);
    assert_int_equal(full, 1);
    assert_int_equal(rest, 0);
    assert_int_equal(queued_count(t, &depth, &backlog), 1);
    assert_int_equal(backlog, 2500);
    assert_null(jobs_find(t, 6));
    jobs_unlock(t);
    job_rec_free_fields(&want);
    job_rec_free_fields(&r);
    jobs_destroy(t);
}

static void test_jobs_that_stay_in_full(void **state)
{
    (void)state;
    struct jobs *t = jobs_create();
    struct job_rec r;
    jobs_lock(t);
    /* Not yet durable. */
    make_rec(&r, 1, NULL);
    struct hjob *j = jobs_insert(t, &r);
    assert_false(jobs_freeze(t, j));
    /* A deadline (on the timed list). */
    make_rec(&r, 2, NULL);
    r.lc.deadline_ms = 1800000000000;
    j = jobs_insert(t, &r);
    jobs_mark_committed(t, j);
    assert_false(jobs_freeze(t, j));
    /* Attempted before (its history and failed set). */
    make_rec(&r, 3, NULL);
    r.lc.attempt = 1;
    j = jobs_insert(t, &r);
    jobs_mark_committed(t, j);
    assert_false(jobs_freeze(t, j));
    /* Someone watches it. */
    make_rec(&r, 4, NULL);
    j = jobs_insert(t, &r);
    jobs_mark_committed(t, j);
    struct job_watch w = {0};
    jobs_watch(t, j, &w);
    assert_false(jobs_freeze(t, j));
    assert_true(jobs_unwatch(t, j, &w));
    assert_true(jobs_freeze(t, j));
    /* A body hash it could not give back exactly (upper case), with an
     * idempotency key (a replay compares it); without a key it is not kept. */
    make_rec(&r, 5, "k5");
    for (char *p = r.body_hash; *p; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    j = jobs_insert(t, &r);
    jobs_mark_committed(t, j);
    assert_false(jobs_freeze(t, j));
    make_rec(&r, 7, NULL);
    for (char *p = r.body_hash; *p; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    j = jobs_insert(t, &r);
    jobs_mark_committed(t, j);
    assert_true(jobs_freeze(t, j));
    /* Running. */
    make_rec(&r, 6, NULL);
    r.lc.state = LC_RUNNING;
    assert_false(jobs_insert_at_rest(t, &r));
    job_rec_free_fields(&r);
    size_t full, rest;
    jobs_memory(t, &full, &rest);
    assert_int_equal(full, 4);
    assert_int_equal(rest, 2);
    jobs_unlock(t);
    jobs_destroy(t);
}

struct sum {
    long long n;
    uint64_t ids;
    bool params_ok;
};

static void add_job(void *arg, const struct hjob *j)
{
    struct sum *s = arg;
    char want[96];
    snprintf(want, sizeof want, "{\"prompt\":\"a fox\",\"seed\":%llu}",
             (unsigned long long)j->rec.id);
    s->n++;
    s->ids += j->rec.id;
    s->params_ok = s->params_ok && !strcmp(j->rec.params_json, want) &&
                   !strcmp(j->rec.body_hash, j->rec.idem_key[0] ? HASH_A : "") &&
                   !strcmp(j->rec.model, "image-v2");
}

static void test_many_at_rest_foreach_find_sweep(void **state)
{
    (void)state;
    enum { N = 20000 };
    struct jobs *t = jobs_create();
    jobs_lock(t);
    for (uint64_t id = 1; id <= N; id++) {
        struct job_rec r;
        char key[32];
        snprintf(key, sizeof key, "k%llu", (unsigned long long)id);
        make_rec(&r, id, id % 2 ? key : NULL);
        assert_true(jobs_insert_at_rest(t, &r));
        assert_null(r.params_json); /* taken */
    }
    assert_int_equal(jobs_next_id(t), N + 1);
    long long depth;
    int64_t backlog;
    assert_int_equal(queued_count(t, &depth, &backlog), N);
    assert_int_equal(backlog, (int64_t)N * 2500);
    struct sum s = {0, 0, true};
    jobs_foreach(t, add_job, &s);
    assert_int_equal(s.n, N);
    assert_int_equal(s.ids, (uint64_t)N * (N + 1) / 2);
    assert_true(s.params_ok);

    /* Back in full, each the same; the slabs empty and go. */
    for (uint64_t id = 1; id <= N; id++) {
        struct hjob *j = jobs_find(t, id);
        assert_non_null(j);
        struct job_rec want;
        char key[32];
        snprintf(key, sizeof key, "k%llu", (unsigned long long)id);
        make_rec(&want, id, id % 2 ? key : NULL);
        assert_same(&j->rec, &want);
        job_rec_free_fields(&want);
    }
    size_t full, rest;
    jobs_memory(t, &full, &rest);
    assert_int_equal(full, N);
    assert_int_equal(rest, 0);
    /* The sweep puts them at rest again; idempotency lookups still find them. */
    assert_int_equal(jobs_sweep(t, 0, -1), 0);
    jobs_memory(t, &full, &rest);
    assert_int_equal(full, 0);
    assert_int_equal(rest, N);
    struct hjob *j = jobs_find_idem(t, 7, "k777");
    assert_non_null(j);
    assert_int_equal(j->rec.id, 777);
    assert_null(jobs_find_idem(t, 7, "k778")); /* even ids had no key */
    assert_int_equal(queued_count(t, &depth, &backlog), N);
    jobs_unlock(t);
    jobs_destroy(t);
}

/* A job whose params exceed a slab rests in a slab of its own, between
 * small ones; every one comes back the same, and its slab goes with it. */
static void test_job_larger_than_a_slab(void **state)
{
    (void)state;
    struct jobs *t = jobs_create();
    jobs_lock(t);
    enum { BIG = 3 << 20 };
    for (uint64_t id = 1; id <= 3; id++) {
        struct job_rec r;
        make_rec(&r, id, id == 2 ? "big-one" : NULL);
        if (id == 2) {
            free(r.params_json);
            r.params_json = xmalloc(BIG + 1);
            memset(r.params_json, 'x', BIG);
            r.params_json[BIG] = '\0';
        }
        assert_true(jobs_insert_at_rest(t, &r));
    }
    for (uint64_t id = 3; id >= 1; id--) {
        struct hjob *j = jobs_find(t, id);
        assert_non_null(j);
        if (id == 2) {
            assert_int_equal(strlen(j->rec.params_json), BIG);
            assert_string_equal(j->rec.idem_key, "big-one");
            assert_string_equal(j->rec.body_hash, HASH_A);
        } else {
            struct job_rec want;
            make_rec(&want, id, NULL);
            assert_same(&j->rec, &want);
            job_rec_free_fields(&want);
        }
    }
    size_t full, rest;
    jobs_memory(t, &full, &rest);
    assert_int_equal(full, 3);
    assert_int_equal(rest, 0);
    jobs_unlock(t);
    jobs_destroy(t);
}

/* A watcher counting its firings, and what state it saw. */
struct counted {
    struct job_watch w; /* first */
    int fired;
    enum lc_state seen;
};

static void count_fire(struct job_watch *w, struct hjob *j)
{
    struct counted *c = (struct counted *)w;
    c->fired++;
    c->seen = j->rec.lc.state;
}

/* until_end watchers (GET ?wait&until=end) stay through changes on the way
 * and fire at the end; plain ones fire on the first change; a removal fires
 * both kinds. */
static void test_until_end_watchers_fire_at_the_end_only(void **state)
{
    (void)state;
    struct jobs *t = jobs_create();
    struct job_rec r;
    jobs_lock(t);
    make_rec(&r, 1, NULL);
    struct hjob *j = jobs_insert(t, &r);
    jobs_mark_committed(t, j);
    struct counted plain = {.w = {.fire = count_fire}};
    struct counted end = {.w = {.fire = count_fire, .until_end = true}};
    jobs_watch(t, j, &end.w);
    jobs_watch(t, j, &plain.w);
    j->rec.lc.state = LC_RUNNING;
    jobs_changed(t, j);
    assert_int_equal(plain.fired, 1);
    assert_int_equal(end.fired, 0);
    j->rec.progress = 0.5;
    jobs_changed(t, j); /* plain was one-shot: nobody else fires */
    assert_int_equal(plain.fired, 1);
    assert_int_equal(end.fired, 0);
    j->rec.lc.state = LC_SUCCEEDED;
    jobs_changed(t, j);
    assert_int_equal(end.fired, 1);
    assert_int_equal(end.seen, LC_SUCCEEDED);
    jobs_changed(t, j); /* fired once: gone from the list */
    assert_int_equal(end.fired, 1);
    /* A removal ends every wait, until_end or not. */
    make_rec(&r, 2, NULL);
    j = jobs_insert(t, &r);
    jobs_mark_committed(t, j);
    struct counted gone = {.w = {.fire = count_fire, .until_end = true}};
    jobs_watch(t, j, &gone.w);
    jobs_remove(t, j);
    assert_int_equal(gone.fired, 1);
    jobs_unlock(t);
    jobs_destroy(t);
}

/* A committed job of id, finished (succeeded) at ms (lock held). */
static struct hjob *finished_job(struct jobs *t, uint64_t id, int64_t ms)
{
    struct job_rec r;
    make_rec(&r, id, NULL);
    struct hjob *j = jobs_insert(t, &r);
    jobs_mark_committed(t, j);
    j->rec.lc.state = LC_SUCCEEDED;
    j->rec.finished_ms = ms;
    jobs_retrack(t, j);
    return j;
}

/* keep_finished_max: the sweep keeps the newest max finished jobs nobody
 * waits on (hash order is not finish order here), and one somebody waits on
 * besides; queued jobs stay. Jobs that finished in the same millisecond as
 * the last one past max go with it. */
static void test_sweep_keeps_the_newest_max_finished(void **state)
{
    (void)state;
    enum { N = 1000, MAX = 100 };
    const int64_t base = 1700000000000;
    struct jobs *t = jobs_create();
    jobs_lock(t);
    struct hjob *watched = NULL;
    for (uint64_t id = 1; id <= N; id++) {
        int64_t off = (int64_t)((id * 7919) % N); /* every offset once, shuffled */
        struct hjob *j = finished_job(t, id, base + off);
        if (off == 0)
            watched = j;
    }
    struct counted waiter = {.w = {.fire = count_fire, .until_end = true}};
    jobs_watch(t, watched, &waiter.w); /* the oldest, but somebody waits on it */
    for (uint64_t id = N + 1; id <= N + 5; id++) {
        struct job_rec r;
        make_rec(&r, id, NULL);
        jobs_mark_committed(t, jobs_insert(t, &r));
    }
    assert_int_equal(jobs_finished(t), N);
    assert_int_equal(jobs_sweep(t, 0, N), 0); /* within max: by time only, none old enough */
    assert_int_equal(jobs_sweep(t, 0, MAX), N - 1 - MAX);
    assert_int_equal(jobs_finished(t), MAX + 1);
    for (uint64_t id = 1; id <= N; id++) {
        int64_t off = (int64_t)((id * 7919) % N);
        struct hjob *j = jobs_find(t, id);
        assert_int_equal(j != NULL, off == 0 || off >= N - MAX);
    }
    long long depth;
    int64_t backlog;
    assert_int_equal(queued_count(t, &depth, &backlog), 5);
    /* 50 more that finished at offset 940: the 50 past max are 900..939 and
     * ten of the 51 at 940, and all 51 go: 59 stay (941..999). */
    for (uint64_t id = N + 6; id < N + 56; id++)
        finished_job(t, id, base + 940);
    assert_int_equal(jobs_finished(t), MAX + 1 + 50);
    assert_int_equal(jobs_sweep(t, 0, MAX), 40 + 51);
    assert_int_equal(jobs_finished(t), 59 + 1);
    assert_null(jobs_find(t, N + 6));
    /* By time as before: everything finished before the cutoff goes. */
    assert_int_equal(jobs_sweep(t, base + N, -1), 59);
    assert_int_equal(jobs_finished(t), 1);
    jobs_unwatch(t, watched, &waiter.w);
    assert_int_equal(jobs_sweep(t, base + N, -1), 1);
    assert_int_equal(queued_count(t, &depth, &backlog), 5);
    jobs_unlock(t);
    jobs_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rest_and_back_same_record_and_counts),
        cmocka_unit_test(test_jobs_that_stay_in_full),
        cmocka_unit_test(test_many_at_rest_foreach_find_sweep),
        cmocka_unit_test(test_job_larger_than_a_slab),
        cmocka_unit_test(test_until_end_watchers_fire_at_the_end_only),
        cmocka_unit_test(test_sweep_keeps_the_newest_max_finished),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
