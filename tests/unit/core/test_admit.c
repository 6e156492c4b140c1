/* test_admit.c: admission and lanes with scripted time — the token bucket and
 * its Retry-After, the lane wait bound's 429 and the booked room a retry finds
 * after waiting it, the too-large 4xx, each batch tenant's share of the queue,
 * fair-share order of GPU-seconds (2:1 by weight) through the scheduler, an
 * idle tenant earning no credit, the reserved interactive pool lending to
 * batch and getting the GPU back at the next job boundary, interactive never
 * behind an unstarted batch job, and the ETA of an interactive job behind a
 * batch flood; the interactive headroom (Erlang C; batch refused a start that
 * would break it, allowed once interactive is idle, the GPU back to
 * interactive at the batch job's end); a refused batch's tokens and tags given
 * back (admit_undo); admit_room; rooms booked after the latest one by their
 * own drain time; a retry a hair before its time is on time; the measured
 * throughput (while work waits, over busy time); the rate for ETAs (one
 * window) and a batch ETA beside the headroom. (Tier aging: test_sched's
 * test_queue_paid_first_free_not_starved.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "core/admit.h"
#include "core/headroom.h"
#include "core/sched.h"

#define S(x) ((int64_t)((x) * 1e9))

static struct admit_request req(const char *tenant, enum sched_lane lane, double cost,
                                uint64_t booking)
{
    struct admit_request r = {tenant, "image.fast", lane, cost, booking};
    return r;
}

static void test_token_bucket(void **state)
{
    (void)state;
    struct admit_policy p;
    admit_policy_defaults(&p);
    struct admit *a = admit_create(&p);
    struct admit_tenant_policy tp = {"acme", 1, 60, 60, 0}; /* 1 GPU-s per second, 60 burst */
    assert_int_equal(admit_tenant_set(a, &tp), 0);
    admit_capacity(a, SCHED_LANE_BATCH, 100, 0);
    struct admit_verdict v;
    struct admit_request r = req("acme", SCHED_LANE_BATCH, 20, 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(admit_decide(a, &r, 0, &v), 0);
        assert_int_equal(v.outcome, ADMIT_OK);
        assert_int_equal(admit_accept(a, &r, 0, NULL), 0);
    }
    /* Bucket empty: the next 20 GPU-seconds take 20 s to refill. */
    struct admit_request r4 = req("acme", SCHED_LANE_BATCH, 20, 44);
    assert_int_equal(admit_decide(a, &r4, 0, &v), 0);
    assert_int_equal(v.outcome, ADMIT_RETRY);
    assert_int_equal(v.reason, ADMIT_R_RATE);
    assert_float_equal(v.retry_after_s, 20.0, 1e-6);
    assert_int_equal(admit_refuse(a, &r4, &v, 0), 0);
    /* A second client is sent after the first, not at the same instant. */
    struct admit_request r5 = req("acme", SCHED_LANE_BATCH, 20, 55);
    assert_int_equal(admit_decide(a, &r5, S(0.5), &v), 0);
    assert_int_equal(v.outcome, ADMIT_RETRY);
    assert_float_equal(v.room_s, 39.5, 1e-6);
    assert_float_equal(v.retry_after_s, 40, 1e-6); /* whole seconds, rounded up */
    /* The first, back early, is told the rest of its wait; on time, admitted. */
    assert_int_equal(admit_decide(a, &r4, S(19), &v), 0);
    assert_int_equal(v.outcome, ADMIT_RETRY);
    assert_float_equal(v.retry_after_s, 1.0, 1e-6);
    assert_int_equal(admit_decide(a, &r4, S(20), &v), 0);
    assert_int_equal(v.outcome, ADMIT_OK);
    assert_int_equal(admit_accept(a, &r4, S(20), NULL), 0);
    /* One job larger than the burst can never pass: 4xx. */
    struct admit_request big = req("acme", SCHED_LANE_BATCH, 61, 0);
    assert_int_equal(admit_decide(a, &big, S(1000), &v), 0);
    assert_int_equal(v.outcome, ADMIT_TOO_LARGE);
    assert_int_equal(v.reason, ADMIT_R_BURST);
    assert_non_null(strstr(v.why, "burst"));
    /* The interactive lane has no bucket. */
    struct admit_request ri = req("acme", SCHED_LANE_INTERACTIVE, 20, 0);
    assert_int_equal(admit_decide(a, &ri, S(20), &v), 0);
    assert_int_equal(v.outcome, ADMIT_OK);
    admit_destroy(a);
}

static void test_lane_wait_429_and_retry_after(void **state)
{
    (void)state;
    struct admit_policy p;
    admit_policy_defaults(&p);
    p.max_wait_s[SCHED_LANE_INTERACTIVE] = 10;
    struct admit *a = admit_create(&p);
    admit_capacity(a, SCHED_LANE_INTERACTIVE, 2, 0); /* 2 GPU-seconds per second */
    struct admit_verdict v;
    struct admit_request r = req("ui", SCHED_LANE_INTERACTIVE, 4, 0);
    for (int i = 0; i < 5; i++) { /* 20 GPU-seconds = 10 s at 2/s: the bound */
        assert_int_equal(admit_decide(a, &r, 0, &v), 0);
        assert_int_equal(v.outcome, ADMIT_OK);
        admit_accept(a, &r, 0, NULL);
    }
    assert_float_equal(admit_backlog(a, NULL, SCHED_LANE_INTERACTIVE, NULL), 20, 1e-9);
    assert_float_equal(admit_backlog(a, "image.fast", -1, "ui"), 20, 1e-9);
    struct admit_request r6 = req("ui", SCHED_LANE_INTERACTIVE, 4, 66);
    assert_int_equal(admit_decide(a, &r6, 0, &v), 0);
    assert_int_equal(v.outcome, ADMIT_RETRY);
    assert_int_equal(v.reason, ADMIT_R_LANE_WAIT);
    assert_float_equal(v.retry_after_s, 2.0, 1e-9); /* 4 GPU-s over at 2/s */
    assert_float_equal(v.backlog_gpu_s, 20, 1e-9);
    assert_non_null(strstr(v.why, "exceeds the bound of 10 s"));
    admit_refuse(a, &r6, &v, 0);
    /* A newcomer at t=1 queues after the booked room. */
    struct admit_request r7 = req("ui", SCHED_LANE_INTERACTIVE, 4, 0);
    assert_int_equal(admit_decide(a, &r7, S(1), &v), 0);
    assert_int_equal(v.outcome, ADMIT_RETRY);
    assert_float_equal(v.retry_after_s, 4.0, 1e-9);
    /* By t=2 one job started (4 GPU-s drained): the retry that waited is admitted. */
    admit_dequeued(a, "ui", "image.fast", SCHED_LANE_INTERACTIVE, 4, S(0), S(2));
    assert_int_equal(admit_decide(a, &r7, S(2), &v), 0);
    assert_int_equal(v.outcome, ADMIT_RETRY); /* the room is r6's */
    assert_int_equal(admit_decide(a, &r6, S(2), &v), 0);
    assert_int_equal(v.outcome, ADMIT_OK);
    admit_accept(a, &r6, S(2), NULL);
    /* Never admissible: one job over the bound. */
    struct admit_request huge = req("ui", SCHED_LANE_INTERACTIVE, 20000000, 0);
    assert_int_equal(admit_decide(a, &huge, S(2), &v), 0);
    assert_int_equal(v.outcome, ADMIT_TOO_LARGE);
    assert_int_equal(v.reason, ADMIT_R_JOB_COST);
    admit_destroy(a);
}

static void test_concurrency_cap(void **state)
{
    (void)state;
    struct admit *a = admit_create(NULL);
    struct admit_tenant_policy tp = {"k", 1, 0, 0, 2};
    admit_tenant_set(a, &tp);
    admit_capacity(a, SCHED_LANE_BATCH, 1, 0);
    struct admit_verdict v;
    struct admit_request r = req("k", SCHED_LANE_BATCH, 1, 0);
    admit_accept(a, &r, 0, NULL);
    admit_accept(a, &r, 0, NULL);
    admit_decide(a, &r, 0, &v);
    assert_int_equal(v.outcome, ADMIT_RETRY);
    assert_int_equal(v.reason, ADMIT_R_INFLIGHT);
    assert_true(v.retry_after_s >= 1);
    admit_dequeued(a, "k", "image.fast", SCHED_LANE_BATCH, 1, 1, S(1));
    admit_ended(a, "k", SCHED_LANE_BATCH, 1, S(2));
    admit_decide(a, &r, S(2), &v);
    assert_int_equal(v.outcome, ADMIT_OK);
    admit_destroy(a);
}

/* A flooding tenant fills only its share of the batch queue. */
static void test_batch_share_of_queue(void **state)
{
    (void)state;
    struct admit_policy p;
    admit_policy_defaults(&p);
    p.max_wait_s[SCHED_LANE_BATCH] = 100;
    struct admit *a = admit_create(&p);
    admit_capacity(a, SCHED_LANE_BATCH, 1, 0);
    struct admit_verdict v;
    struct admit_request ra = req("a", SCHED_LANE_BATCH, 10, 0);
    int na = 0;
    while (admit_decide(a, &ra, 0, &v) == 0 && v.outcome == ADMIT_OK) {
        admit_accept(a, &ra, 0, NULL);
        na++;
    }
    assert_int_equal(na, 10); /* alone: the whole lane, 100 GPU-s */
    struct admit_request rb = req("b", SCHED_LANE_BATCH, 10, 0);
    assert_int_equal(admit_decide(a, &rb, 0, &v), 0);
    assert_int_equal(v.outcome, ADMIT_OK); /* b's share: 0.5 GPU-s/s, 50 GPU-s of queue */
    int nb = 0;
    while (admit_decide(a, &rb, 0, &v) == 0 && v.outcome == ADMIT_OK) {
        admit_accept(a, &rb, 0, NULL);
        nb++;
    }
    assert_int_equal(nb, 5);
    assert_float_equal(v.throughput, 0.5, 1e-9);
    assert_float_equal(admit_backlog(a, NULL, SCHED_LANE_BATCH, "b"), 50, 1e-9);
    /* R13: with both configured at weight 1, each can be promised half. */
    struct admit_tenant_policy ta = {"a", 1, 0, 0, 0}, tb = {"b", 1, 0, 0, 0};
    admit_tenant_set(a, &ta);
    admit_tenant_set(a, &tb);
    assert_float_equal(admit_tenant_budget(a, "a", 0), 30, 1e-9);
    admit_destroy(a);
}

static void mk_worker(struct worker_info *w, const char *id, bool reserved)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->id, sizeof(w->id), "%s", id);
    snprintf(w->gpu_class, sizeof(w->gpu_class), "RTX 5090");
    snprintf(w->caps[w->ncaps++], SCHED_NAME_MAX, "image.fast");
    w->concurrency = 1;
    w->vram_total_mb = 32768;
    w->vram_free_mb = 32768;
    w->speed = 1.0;
    w->healthy = true;
    w->reserved = reserved;
}

static struct sched *mk_sched(void)
{
    struct sched *s = sched_create(NULL);
    struct model_info m = {"image-v2", 22528, 0, MODEL_GENERATION};
    assert_int_equal(sched_model_set(s, &m), 0);
    assert_int_equal(sched_model_prior(s, "image-v2", 1.0, 0, 0, 0, 0), 0);
    return s;
}

static void add_job(struct sched *s, uint64_t id, enum sched_lane lane, int64_t order, int64_t now)
{
    struct job_spec j;
    memset(&j, 0, sizeof(j));
    j.id = id;
    snprintf(j.capability, sizeof(j.capability), "image.fast");
    snprintf(j.model, sizeof(j.model), "image-v2");
    j.lane = lane;
    j.submit_ns = now;
    j.order_ns = order;
    assert_int_equal(sched_job_add(s, &j, now), 0);
}

/* Fair share: tenants of weights 2 and 1 flooding the batch lane get
 * GPU-seconds 2:1 in start order. */
static void test_fair_share_order(void **state)
{
    (void)state;
    struct admit *a = admit_create(NULL);
    struct admit_tenant_policy ta = {"big", 2, 0, 0, 0}, tb = {"small", 1, 0, 0, 0};
    admit_tenant_set(a, &ta);
    admit_tenant_set(a, &tb);
    admit_capacity(a, SCHED_LANE_BATCH, 1, 0);
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "g0", false);
    sched_worker_update(s, &w, 0);
    int64_t order[40];
    /* "small" submits first, all 20 of its jobs; then "big" its 20. */
    for (int i = 0; i < 40; i++) {
        const char *t = i < 20 ? "small" : "big";
        struct admit_request r = req(t, SCHED_LANE_BATCH, 1, 0);
        assert_int_equal(admit_accept(a, &r, S(i * 0.001), &order[i]), 0);
        add_job(s, (uint64_t)i + 1, SCHED_LANE_BATCH, order[i], S(i * 0.001));
    }
    int big = 0, small = 0;
    int64_t now = S(1);
    for (int k = 0; k < 30; k++) {
        sched_dispatch(s, now, NULL, NULL);
        uint64_t id;
        assert_int_equal(sched_take(s, "g0", now, &id), 0);
        int i = (int)id - 1;
        admit_dequeued(a, i < 20 ? "small" : "big", "image.fast", SCHED_LANE_BATCH, 1, order[i],
                       now);
        if (i < 20)
            small++;
        else
            big++;
        now += S(1);
        assert_int_equal(sched_job_finished(s, id, true, 0, S(1), now), 0);
        if (k == 14) { /* half way: already 2:1 although "small" came first */
            assert_int_equal(big, 10);
            assert_int_equal(small, 5);
        }
    }
    assert_int_equal(big, 20);
    assert_int_equal(small, 10);
    /* An idle tenant earns no credit: a newcomer now starts at virtual time. */
    int64_t late;
    struct admit_request rn = req("new", SCHED_LANE_BATCH, 1, 0);
    admit_accept(a, &rn, now, &late);
    assert_true(late >= order[9]);
    sched_destroy(s);
    admit_destroy(a);
}

/* R8: a reserved GPU runs batch only on a free slot while no interactive job
 * waits, and takes interactive work first at the batch job's end. */
static void test_reserved_pool_lends_and_returns(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "r0", true);
    sched_worker_update(s, &w, 0);
    for (uint64_t id = 1; id <= 3; id++)
        add_job(s, id, SCHED_LANE_BATCH, 0, S(0));
    /* Interactive idle: the reserved GPU lends itself to one batch job; the
     * others wait in the queue, not on the GPU. */
    assert_int_equal(sched_dispatch(s, S(0), NULL, NULL), 1);
    uint64_t id;
    assert_int_equal(sched_take(s, "r0", S(0), &id), 0);
    assert_int_equal(id, 1);
    struct sched_stats st;
    sched_stats(s, &st);
    assert_int_equal(st.queued, 2);
    assert_int_equal(st.placed, 0);
    /* Interactive work arrives while the batch job runs. */
    add_job(s, 10, SCHED_LANE_INTERACTIVE, 0, S(0.5));
    sched_dispatch(s, S(0.5), NULL, NULL);
    double start, finish;
    assert_int_equal(sched_job_eta(s, 10, S(0.5), &start, &finish), 0);
    assert_true(start <= 0.6); /* the batch job's rest, not the batch queue */
    /* Job boundary: the GPU goes back to interactive. */
    assert_int_equal(sched_job_finished(s, 1, true, 0, S(1), S(1)), 0);
    sched_dispatch(s, S(1), NULL, NULL);
    assert_int_equal(sched_take(s, "r0", S(1), &id), 0);
    assert_int_equal(id, 10);
    /* Interactive idle again: lends again. */
    assert_int_equal(sched_job_finished(s, 10, true, 0, S(1), S(2)), 0);
    assert_int_equal(sched_dispatch(s, S(2), NULL, NULL), 1);
    assert_int_equal(sched_take(s, "r0", S(2), &id), 0);
    assert_int_equal(id, 2);
    sched_destroy(s);
}

/* An interactive job never waits behind a batch job that has not started. */
static void test_interactive_ahead_of_unstarted_batch(void **state)
{
    (void)state;
    struct sched *s = mk_sched();
    struct worker_info w;
    mk_worker(&w, "g0", false);
    sched_worker_update(s, &w, 0);
    add_job(s, 1, SCHED_LANE_BATCH, 0, 0);
    add_job(s, 2, SCHED_LANE_BATCH, 0, 0);
    assert_int_equal(sched_dispatch(s, 0, NULL, NULL), 1); /* one, on the free slot */
    /* Placed, not yet taken, when an interactive job comes. */
    add_job(s, 3, SCHED_LANE_INTERACTIVE, 0, S(0.1));
    assert_int_equal(sched_dispatch(s, S(0.1), NULL, NULL), 1);
    uint64_t id;
    assert_int_equal(sched_take(s, "g0", S(0.1), &id), 0);
    assert_int_equal(id, 3);
    /* The 16-batch-jobs case: 4 GPUs busy with 10 s batch jobs and 12 more
     * queued; an interactive job's ETA and its real start agree. */
    sched_destroy(s);
    s = mk_sched();
    assert_int_equal(sched_model_prior(s, "image-v2", 10.0, 0, 0, 0, 0), 0);
    char ids[4][8];
    for (int g = 0; g < 4; g++) {
        snprintf(ids[g], sizeof(ids[g]), "g%d", g);
        mk_worker(&w, ids[g], false);
        sched_worker_update(s, &w, 0);
    }
    for (uint64_t j = 1; j <= 16; j++)
        add_job(s, j, SCHED_LANE_BATCH, 0, 0);
    sched_dispatch(s, 0, NULL, NULL);
    for (int g = 0; g < 4; g++)
        assert_int_equal(sched_take(s, ids[g], 0, &id), 0);
    add_job(s, 100, SCHED_LANE_INTERACTIVE, 0, S(2.5));
    sched_dispatch(s, S(2.5), NULL, NULL);
    double start, finish;
    assert_int_equal(sched_job_eta(s, 100, S(2.5), &start, &finish), 0);
    assert_float_equal(start, 7.5, 0.01); /* the running jobs' rest: 10 - 2.5 */
    /* g0's job ends: the interactive job is the next one it takes. */
    assert_int_equal(sched_job_finished(s, 1, true, 0, S(10), S(10)), 0);
    sched_dispatch(s, S(10), NULL, NULL);
    bool got = false;
    for (int g = 0; g < 4 && !got; g++)
        if (sched_take(s, ids[g], S(10), &id) == 0)
            got = id == 100;
    assert_true(got);
    sched_destroy(s);
}

/* Erlang C: more GPUs, fewer waits; the headroom is the smallest c that keeps
 * P(wait > t) within the share. */
static void test_headroom_erlang(void **state)
{
    (void)state;
    assert_true(headroom_p_wait(2, 2.0, 2.5, 1.0) >= 1.0); /* c <= a: unstable */
    double prev = 1.0;
    for (int c = 3; c <= 8; c++) {
        double p = headroom_p_wait(c, 2.0, 2.5, 1.0);
        assert_true(p < prev);
        prev = p;
    }
    int c = headroom_servers(2.0, 2.5, 1.0, 0.01, 16);
    assert_true(headroom_p_wait(c, 2.0, 2.5, 1.0) <= 0.01);
    assert_true(headroom_p_wait(c - 1, 2.0, 2.5, 1.0) > 0.01);
    assert_int_equal(c, 6); /* 2 Erlangs of 2.5 s jobs, 1% over 1 s: 6 GPUs */
    assert_int_equal(headroom_servers(0, 2.5, 1.0, 0.01, 16), 0);
    assert_int_equal(headroom_servers(30, 1, 0, 0.01, 4), 5); /* none enough */
}

/* A sched with n one-slot GPUs, a 10 s headroom window and a strict headroom
 * (P(wait > 1 s) <= 0.01), after 30 s of interactive jobs of 1 s arriving
 * every 0.5 s (2 Erlangs), each run at once. */
static struct sched *interactive_every(int n, double gap_s, int64_t *now);

static struct sched *busy_interactive(int n, int64_t *now)
{
    return interactive_every(n, 0.5, now);
}

/* busy_interactive with an arrival every gap_s (1 / gap_s Erlangs). */
static struct sched *interactive_every(int n, double gap_s, int64_t *now)
{
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.headroom_window_s = 10;
    cfg.headroom_wait_s = 1;
    cfg.headroom_share = 0.01;
    struct sched *s = sched_create(&cfg);
    struct model_info m = {"image-v2", 22528, 0, MODEL_GENERATION};
    assert_int_equal(sched_model_set(s, &m), 0);
    assert_int_equal(sched_model_prior(s, "image-v2", 1.0, 0, 0, 0, 0), 0);
    for (int i = 0; i < n; i++) {
        struct worker_info w;
        char id[16];
        snprintf(id, sizeof id, "g%d", i);
        mk_worker(&w, id, false);
        w.speed = 1.0 - 0.01 * i; /* g0 best for interactive */
        sched_worker_update(s, &w, 0);
    }
    uint64_t id = 1000;
    for (int64_t t = 0; t < S(30); t += S(gap_s)) {
        add_job(s, id, SCHED_LANE_INTERACTIVE, 0, t);
        sched_dispatch(s, t, NULL, NULL);
        char gid[16];
        uint64_t got = 0;
        for (int i = 0; i < n && !got; i++) {
            snprintf(gid, sizeof gid, "g%d", i);
            if (sched_take(s, gid, t, &got) != 0)
                got = 0;
        }
        assert_int_equal(got, id);
        assert_int_equal(sched_job_finished(s, got, true, 0, S(1), t + S(0.45)), 0);
        id++;
    }
    *now = S(30);
    return s;
}

static void count_placed(uint64_t job_id, const char *worker_id, const struct sched_explain *why,
                         void *arg)
{
    (void)job_id;
    (void)worker_id;
    (void)why;
    (*(int *)arg)++;
}

/* The headroom: batch is refused the starts that would leave fewer GPUs free
 * of batch than interactive needs, on the GPUs best for interactive first;
 * it gets them all once interactive is idle; and a GPU lent to batch takes
 * interactive work first at the batch job's end. */
static void test_headroom_batch(void **state)
{
    (void)state;
    int64_t now;
    struct sched *s = busy_interactive(8, &now);
    struct headroom_figures hf;
    assert_int_equal(sched_headroom_get(s, "image.fast", now, &hf), 0);
    assert_true(hf.erlangs > 1.5 && hf.erlangs < 2.5);
    assert_true(hf.service_s > 0.9 && hf.service_s < 1.1);
    int need = hf.gpus;
    assert_true(need >= 4 && need < 8);
    for (uint64_t id = 1; id <= 8; id++)
        add_job(s, id, SCHED_LANE_BATCH, 0, now);
    int placed = 0;
    sched_dispatch(s, now, count_placed, &placed);
    assert_int_equal(placed, 8 - need); /* the rest wait in the queue */
    /* The GPUs best for interactive stay free: g0 takes nothing. */
    uint64_t got;
    assert_int_equal(sched_take(s, "g0", now, &got), GPUQ_EAGAIN);
    char last[16];
    snprintf(last, sizeof last, "g%d", 7);
    assert_int_equal(sched_take(s, last, now, &got), 0);
    assert_true(got >= 1 && got <= 8);
    uint64_t lent = got;
    /* Its batch job ends while an interactive job and batch jobs wait: the
     * GPU takes the interactive one (job boundary). */
    add_job(s, 500, SCHED_LANE_INTERACTIVE, 0, now + S(0.5));
    assert_int_equal(sched_job_finished(s, lent, true, 0, S(1), now + S(1)), 0);
    for (int i = 0; i < 8; i++) { /* the other GPUs start what they hold */
        char gid[16];
        snprintf(gid, sizeof gid, "g%d", i);
        uint64_t x;
        while (sched_take(s, gid, now + S(1), &x) == 0)
            if (x == 500)
                lent = 0;
    }
    sched_dispatch(s, now + S(1), NULL, NULL);
    if (lent) { /* not taken yet: it was placed on g7 or another free GPU */
        int n = 0;
        for (int i = 0; i < 8; i++) {
            char gid[16];
            snprintf(gid, sizeof gid, "g%d", i);
            uint64_t x;
            if (sched_take(s, gid, now + S(1), &x) == 0 && x == 500)
                n++;
        }
        assert_int_equal(n, 1);
    }
    /* Interactive idle for many windows: the waiting batch jobs get every GPU. */
    int64_t later = now + S(200);
    for (int i = 0; i < 8; i++) {
        char gid[16];
        snprintf(gid, sizeof gid, "g%d", i);
        uint64_t x;
        while (sched_take(s, gid, later, &x) == 0)
            sched_job_finished(s, x, true, 0, S(1), later);
    }
    assert_int_equal(sched_headroom_get(s, "image.fast", later, &hf), 0);
    assert_int_equal(hf.gpus, 0);
    struct sched_stats st;
    sched_dispatch(s, later, NULL, NULL);
    sched_stats(s, &st);
    assert_int_equal(st.queued, 0);
    sched_destroy(s);
}

/* A batch refused as a whole gives back the tokens and the fair-share tags
 * its admitted jobs took. */
static void test_undo_refunds_tokens(void **state)
{
    (void)state;
    struct admit *a = admit_create(NULL);
    struct admit_tenant_policy tp = {"acme", 1, 60, 60, 0};
    assert_int_equal(admit_tenant_set(a, &tp), 0);
    struct admit_request r = req("acme", SCHED_LANE_BATCH, 20, 0);
    struct admit_verdict v;
    int64_t order[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(admit_decide(a, &r, S(1), &v), 0);
        assert_int_equal(v.outcome, ADMIT_OK);
        assert_int_equal(admit_accept(a, &r, S(1), &order[i]), 0);
    }
    assert_int_equal(admit_decide(a, &r, S(1), &v), 0);
    assert_int_equal(v.outcome, ADMIT_RETRY);
    assert_int_equal(v.reason, ADMIT_R_RATE);
    for (int i = 2; i >= 0; i--)
        admit_undo(a, &r, order[i], S(1));
    assert_true(admit_backlog(a, NULL, -1, "acme") == 0);
    struct admit_request big = req("acme", SCHED_LANE_BATCH, 60, 0);
    assert_int_equal(admit_decide(a, &big, S(1), &v), 0);
    assert_int_equal(v.outcome, ADMIT_OK); /* the whole bucket is back */
    int64_t o;
    assert_int_equal(admit_accept(a, &big, S(1), &o), 0);
    assert_true(o == order[0]); /* the first tag again: no fair-share debt left */
    /* admit_room: the queue alone. */
    double ex;
    assert_int_equal(admit_room(a, &r, S(1), &ex), 0);
    assert_true(ex > 0); /* no tokens left for 20 GPU-seconds */
    assert_int_equal(admit_room(a, &r, S(21), &ex), 0);
    assert_true(ex <= 0);
    admit_destroy(a);
}

/* Stable tags: a job's fair-share tag is charged its nominal work (tag_s),
 * so an estimate that moves while the tenants flood (9.4 GPU-s at first, 4
 * later) does not inflate the early tags of whichever tenant came first. */
static void test_stable_tags(void **state)
{
    (void)state;
    struct admit *a = admit_create(NULL);
    struct admit_tenant_policy ta = {"big", 2, 0, 0, 0}, tb = {"small", 1, 0, 0, 0};
    admit_tenant_set(a, &ta);
    admit_tenant_set(a, &tb);
    admit_capacity(a, SCHED_LANE_BATCH, 100, 0);
    int64_t o1, o2, o3, o4;
    struct admit_request r1 = {"big", "image.fast", SCHED_LANE_BATCH, 9.4, 0, 5.0};
    struct admit_request r2 = {"big", "image.fast", SCHED_LANE_BATCH, 4.0, 0, 5.0};
    struct admit_request r3 = {"small", "image.fast", SCHED_LANE_BATCH, 4.0, 0, 5.0};
    assert_int_equal(admit_accept(a, &r1, 0, &o1), 0);
    assert_int_equal(admit_accept(a, &r2, 0, &o2), 0);
    assert_int_equal(admit_accept(a, &r3, 0, &o3), 0);
    /* big's second tag is 5 / 2 after its first, whatever the costs were. */
    assert_int_equal(o2 - o1, S(2.5));
    assert_int_equal(o3, o1); /* small starts at the same virtual time */
    /* Without a nominal figure the cost is charged (9.4 / 2). */
    struct admit_request r5 = {"big", "image.fast", SCHED_LANE_BATCH, 9.4, 0, 0};
    assert_int_equal(admit_accept(a, &r5, 0, &o4), 0);
    assert_int_equal(o4 - o2, S(2.5));
    int64_t o6;
    assert_int_equal(admit_accept(a, &r5, 0, &o6), 0);
    assert_int_equal(o6 - o4, S(4.7));
    /* Undo takes back what the tag was charged. */
    admit_undo(a, &r5, o6, 0);
    int64_t o7;
    assert_int_equal(admit_accept(a, &r2, 0, &o7), 0);
    assert_int_equal(o7, o6);
    admit_destroy(a);
}

/* Rooms are spaced by their own drain time: when the rate rose after the
 * latest booking (the fleet grew), a new refusal is booked after that room
 * plus its own cost at the new rate, not at the same instant (a pile of
 * clients admitted at once would overrun the bound together). */
static void test_rooms_spaced_after_the_latest(void **state)
{
    (void)state;
    struct admit_policy p;
    admit_policy_defaults(&p);
    p.max_wait_s[SCHED_LANE_INTERACTIVE] = 10;
    struct admit *a = admit_create(&p);
    admit_capacity(a, SCHED_LANE_INTERACTIVE, 1, 0);
    struct admit_verdict v;
    struct admit_request r = req("ui", SCHED_LANE_INTERACTIVE, 5, 0);
    for (int i = 0; i < 2; i++) { /* 10 GPU-s at 1/s: the bound */
        admit_decide(a, &r, 0, &v);
        assert_int_equal(v.outcome, ADMIT_OK);
        admit_accept(a, &r, 0, NULL);
    }
    struct admit_request r1 = req("ui", SCHED_LANE_INTERACTIVE, 5, 11);
    admit_decide(a, &r1, 0, &v);
    assert_int_equal(v.outcome, ADMIT_RETRY);
    assert_float_equal(v.retry_after_s, 5.0, 1e-9); /* 5 GPU-s over at 1/s */
    admit_refuse(a, &r1, &v, 0);
    /* The fleet grows to 2 GPU-s/s: 15 GPU-s ahead + 8 are 3 over the 20
     * that fit (1.5 s), but the room comes after r1's (due at 5 s) and its
     * own 8 GPU-s at 2/s. */
    admit_capacity(a, SCHED_LANE_INTERACTIVE, 2, 0);
    struct admit_request big = req("ui", SCHED_LANE_INTERACTIVE, 8, 12);
    admit_decide(a, &big, 0, &v);
    assert_int_equal(v.outcome, ADMIT_RETRY);
    assert_float_equal(v.retry_after_s, 5.0 + 8.0 / 2, 1e-9);
    admit_refuse(a, &big, &v, 0);
    struct admit_request r2 = req("ui", SCHED_LANE_INTERACTIVE, 5, 13);
    admit_decide(a, &r2, S(1), &v);
    assert_int_equal(v.outcome, ADMIT_RETRY);
    assert_float_equal(v.room_s, 9.0 - 1 + 5.0 / 2, 1e-9);
    assert_float_equal(v.retry_after_s, 11, 1e-9); /* told in whole seconds */
    admit_refuse(a, &r2, &v, S(1));
    /* The next room is planned after r2's room (11.5 s), not after the 12 s
     * r2 was told: rounding does not pile up along the line. */
    struct admit_request r3 = req("ui", SCHED_LANE_INTERACTIVE, 1, 14);
    admit_decide(a, &r3, S(1), &v);
    assert_int_equal(v.outcome, ADMIT_RETRY);
    assert_float_equal(v.room_s, 11.5 - 1 + 1.0 / 2, 1e-9);
    assert_float_equal(v.retry_after_s, 11, 1e-9);
    admit_refuse(a, &r3, &v, S(1));
    /* Each is admitted at the time it was told. */
    admit_decide(a, &r2, S(12), &v);
    assert_int_equal(v.outcome, ADMIT_OK);
    admit_decide(a, &r3, S(12), &v);
    assert_int_equal(v.outcome, ADMIT_OK);
    admit_destroy(a);
}

/* A client that waits exactly the time given is admitted even when its clock
 * lands a hair (under a millisecond) before the room's time; earlier than
 * that it is told the rest of its wait. */
static void test_retry_on_time_within_a_millisecond(void **state)
{
    (void)state;
    struct admit_policy p;
    admit_policy_defaults(&p);
    p.max_wait_s[SCHED_LANE_INTERACTIVE] = 10;
    struct admit *a = admit_create(&p);
    admit_capacity(a, SCHED_LANE_INTERACTIVE, 1, 0);
    struct admit_verdict v;
    struct admit_request r = req("ui", SCHED_LANE_INTERACTIVE, 10, 0);
    admit_accept(a, &r, 0, NULL);
    struct admit_request r1 = req("ui", SCHED_LANE_INTERACTIVE, 3, 21);
    admit_decide(a, &r1, S(0.1), &v);
    assert_int_equal(v.outcome, ADMIT_RETRY);
    assert_float_equal(v.retry_after_s, 3.0, 1e-9);
    admit_refuse(a, &r1, &v, S(0.1));
    admit_decide(a, &r1, S(3.1) - 1, &v); /* 1 ns early: on time */
    assert_int_equal(v.outcome, ADMIT_OK);
    admit_decide(a, &r1, S(3.09), &v); /* 10 ms early: not yet */
    assert_int_equal(v.outcome, ADMIT_RETRY);
    assert_float_equal(v.retry_after_s, 1.0, 1e-9); /* the floor */
    admit_destroy(a);
}

/* Measured throughput: what the lane delivers while work waits, over busy
 * time. Nominal until the lane has had work waiting 5 windows; an idle spell
 * neither dilutes nor forgets the figure; work delivered while nothing
 * waited is not counted; a fleet that doubles doubles it. */
static void test_throughput_while_busy(void **state)
{
    (void)state;
    struct admit_policy p;
    admit_policy_defaults(&p);
    p.throughput_tau_s = 10; /* measured once busy 50 s */
    struct admit *a = admit_create(&p);
    enum sched_lane B = SCHED_LANE_BATCH;
    admit_capacity(a, B, 4, 0);
    struct admit_request r = req("t", B, 2, 0);
    admit_accept(a, &r, 0, NULL); /* one job waits from t=0 to t=60 */
    for (int t = 1; t <= 60; t++) {
        admit_ended(a, "t", B, 2, S(t)); /* 2 GPU-s/s delivered while it waits */
        if (t == 40)
            assert_float_equal(admit_throughput(a, B, S(t)), 4, 1e-9); /* busy 40 s: nominal */
    }
    /* (deliveries come in steps of a second: within 2%) */
    double m = admit_throughput(a, B, S(60));
    assert_float_equal(m, 2, 0.04);
    admit_dequeued(a, "t", "image.fast", B, 2, 0, S(60));
    /* Idle for an hour, with work delivered while nothing waited. */
    admit_ended(a, "t", B, 500, S(100));
    assert_float_equal(admit_throughput(a, B, S(3600)), m, 1e-9);
    /* The fleet doubles: the measured figure keeps its share of nominal. */
    admit_capacity(a, B, 8, S(3600));
    assert_float_equal(admit_throughput(a, B, S(3600)), 2 * m, 1e-9);
    admit_destroy(a);
}

/* The rate for ETAs follows what the lane delivers within one window of busy
 * time, while admission's throughput (five windows) is still nominal:
 * admission's (nominal) figure, not measured, before the lane has had work
 * waiting a window; then 2 GPU-s/s delivered reads 2, and a drop to 1 reads
 * about 1 three windows later. */
static void test_eta_rate_follows_within_a_window(void **state)
{
    (void)state;
    struct admit_policy p;
    admit_policy_defaults(&p);
    p.throughput_tau_s = 10;
    struct admit *a = admit_create(&p);
    enum sched_lane B = SCHED_LANE_BATCH;
    admit_capacity(a, B, 4, 0);
    struct admit_request r = req("t", B, 2, 0);
    admit_accept(a, &r, 0, NULL); /* one job waits throughout */
    bool measured = true;
    for (int t = 1; t <= 30; t++) {
        if (t == 9) { /* busy 9 s < 10: admission's figure, nominal */
            assert_float_equal(admit_eta_rate(a, B, S(t), &measured), 4, 1e-12);
            assert_false(measured);
        }
        admit_ended(a, "t", B, 2, S(t));
    }
    assert_float_equal(admit_eta_rate(a, B, S(30), &measured), 2, 0.2);
    assert_true(measured);
    assert_float_equal(admit_throughput(a, B, S(30)), 4, 1e-9); /* busy 30 s: nominal */
    for (int t = 31; t <= 60; t++)
        admit_ended(a, "t", B, 1, S(t));
    assert_float_equal(admit_eta_rate(a, B, S(60), NULL), 1, 0.12);
    assert_true(admit_throughput(a, B, S(60)) > 1.25); /* five windows still remember 2 */
    admit_destroy(a);
}

/* A batch job's ETA while the lane's rate is only nominal: no faster than
 * the GPUs the interactive headroom leaves batch (the speeds of all but the
 * `need` best, less the interactive work that finds those busy: Erlang C),
 * though the nominal figure and the free slots say all 8 GPUs; a measured
 * rate is taken as it is (the headroom is in it). */
static void test_batch_eta_beside_the_headroom(void **state)
{
    (void)state;
    int64_t now;
    struct sched *s = busy_interactive(8, &now);
    struct headroom_figures hf;
    assert_int_equal(sched_headroom_get(s, "image.fast", now, &hf), 0);
    int need = hf.gpus;
    assert_true(need >= 4 && need < 8);
    /* Batch's rate is that of the GPUs past the headroom, less the
     * interactive work that finds the headroom busy; the ETA takes its mean
     * over the spread of the headroom's load, so bound it by one GPU more
     * kept (with that GPU's overflow) and one fewer (none). */
    double hi = 0, lo = 0;
    for (int i = need - 1; i < 8; i++)
        hi += 1.0 - 0.01 * i; /* g0 is best: the slowest stay batch's */
    for (int i = need + 1; i < 8; i++)
        lo += 1.0 - 0.01 * i;
    lo -= headroom_p_wait(need + 1, hf.erlangs, hf.service_s, 0) * hf.erlangs;
    assert_true(lo > 1 && hi < 5);
    for (uint64_t id = 1; id <= 40; id++)
        add_job(s, id, SCHED_LANE_BATCH, 0, now);
    sched_dispatch(s, now, NULL, NULL);
    assert_int_equal(sched_lane_rate(s, SCHED_LANE_BATCH, 8, false), 0);
    double st, fin;
    assert_int_equal(sched_job_eta(s, 40, now, &st, &fin), 0);
    /* 39 jobs of 1 GPU-s go first (queued, or placed on the batch GPUs) */
    assert_true(st >= 38 / hi && st <= 40 / lo);
    assert_int_equal(sched_lane_rate(s, SCHED_LANE_BATCH, 8, true), 0);
    assert_int_equal(sched_job_eta(s, 40, now, &st, &fin), 0);
    assert_true(st < 39 / 7.0); /* every slot, at the measured 8 GPU-s/s */
    /* At a measured 2 GPU-s/s, the jobs placed on the batch GPUs count too. */
    assert_int_equal(sched_lane_rate(s, SCHED_LANE_BATCH, 2, true), 0);
    assert_int_equal(sched_job_eta(s, 40, now, &st, &fin), 0);
    assert_true(st >= 38 / 2.0 && st <= 40 / 2.0);
    sched_destroy(s);
}

/* The ETA of job 40 of 40 queued batch jobs of 1 GPU-s beside an
 * interactive arrival every gap_s, before any batch rate is measured. */
static double batch_eta_beside(double gap_s, int *need)
{
    int64_t now;
    struct sched *s = interactive_every(8, gap_s, &now);
    struct headroom_figures hf;
    assert_int_equal(sched_headroom_get(s, "image.fast", now, &hf), 0);
    *need = hf.gpus;
    for (uint64_t id = 1; id <= 40; id++)
        add_job(s, id, SCHED_LANE_BATCH, 0, now);
    sched_dispatch(s, now, NULL, NULL);
    double st, fin;
    assert_int_equal(sched_job_eta(s, 40, now, &st, &fin), 0);
    sched_destroy(s);
    return st;
}

/* The headroom keeps a whole number of GPUs, a step function of a load it
 * reads from a window of a Poisson stream. A batch ETA priced at the one
 * load read at submit jumped by a GPU's worth of rate (31% here) where that
 * load crossed a step (bench/admission-live: seed 11 read just below a step,
 * seed 7 just above it, and both floods ran beside the same load). Loads
 * 1-2% apart, across the headroom's steps, give ETAs within 10% of each
 * other, and more load never a sooner one. */
static void test_batch_eta_smooth_across_a_headroom_step(void **state)
{
    (void)state;
    int need_first = 0, need = 0;
    double st_prev = 0;
    for (int k = 0; k <= 10; k++) {
        double st = batch_eta_beside(0.60 - 0.01 * k, &need);
        if (k == 0)
            need_first = need;
        else {
            assert_true(st >= st_prev);
            assert_true(st < 1.10 * st_prev);
        }
        st_prev = st;
    }
    assert_true(need > need_first); /* a step was crossed */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_bucket),
        cmocka_unit_test(test_lane_wait_429_and_retry_after),
        cmocka_unit_test(test_concurrency_cap),
        cmocka_unit_test(test_batch_share_of_queue),
        cmocka_unit_test(test_fair_share_order),
        cmocka_unit_test(test_reserved_pool_lends_and_returns),
        cmocka_unit_test(test_interactive_ahead_of_unstarted_batch),
        cmocka_unit_test(test_headroom_erlang),
        cmocka_unit_test(test_headroom_batch),
        cmocka_unit_test(test_undo_refunds_tokens),
        cmocka_unit_test(test_stable_tags),
        cmocka_unit_test(test_rooms_spaced_after_the_latest),
        cmocka_unit_test(test_retry_on_time_within_a_millisecond),
        cmocka_unit_test(test_throughput_while_busy),
        cmocka_unit_test(test_eta_rate_follows_within_a_window),
        cmocka_unit_test(test_batch_eta_beside_the_headroom),
        cmocka_unit_test(test_batch_eta_smooth_across_a_headroom_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
