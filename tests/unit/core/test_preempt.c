/* test_preempt.c: preemption with scripted time (core/preempt.h and
 * lc_preempt) — the victim is the batch job on the GPU that serves the
 * interactive job soonest, then with the least work done; none when a GPU is free, when the
 * wait stays within the bound, or when preemption is off; one pick per
 * interactive job; the freed GPU goes to the interactive job and the victim
 * is queued again; the victim's retry budget and failed set are untouched and
 * a stale attempt cannot be preempted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "core/lifecycle.h"
#include "core/preempt.h"
#include "core/sched.h"

#define S(x) ((int64_t)((x) * 1e9))

static void mk_worker(struct sched *s, const char *id, double speed)
{
    struct worker_info w;
    memset(&w, 0, sizeof(w));
    snprintf(w.id, sizeof(w.id), "%s", id);
    snprintf(w.gpu_class, sizeof(w.gpu_class), "RTX 5090");
    snprintf(w.caps[w.ncaps++], SCHED_NAME_MAX, "image.fast");
    w.concurrency = 1;
    w.vram_total_mb = 32768;
    w.vram_free_mb = 32768 - 22528;
    w.loaded[0] = (struct loaded_model){"image-v2", 22528, false, 0};
    w.nloaded = 1;
    w.speed = speed;
    w.healthy = true;
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
}

static struct sched *mk_sched(double after_s)
{
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.headroom_share = 0; /* the reserved pool and headroom play no part here */
    cfg.preempt_after_s = after_s;
    struct sched *s = sched_create(&cfg);
    struct model_info m = {"image-v2", 22528, 2000, MODEL_GENERATION};
    assert_int_equal(sched_model_set(s, &m), 0);
    assert_int_equal(sched_model_prior(s, "image-v2", 10.0, 0, 0, 0, 0), 0);
    return s;
}

static void add_job(struct sched *s, uint64_t id, enum sched_lane lane, int64_t now)
{
    struct job_spec j;
    memset(&j, 0, sizeof(j));
    j.id = id;
    snprintf(j.capability, sizeof(j.capability), "image.fast");
    snprintf(j.model, sizeof(j.model), "image-v2");
    j.lane = lane;
    j.submit_ns = now;
    assert_int_equal(sched_job_add(s, &j, now), 0);
}

/* Starts batch job id on worker at now. */
static void run_batch(struct sched *s, uint64_t id, const char *worker, int64_t now)
{
    add_job(s, id, SCHED_LANE_BATCH, now);
    assert_true(sched_dispatch(s, now, NULL, NULL) >= 1);
    uint64_t got;
    assert_int_equal(sched_take(s, worker, now, &got), 0);
    assert_int_equal(got, id);
}

/* Two GPUs run batch jobs (10 s each) started at 0 and 2 s; an interactive
 * job arriving at 3 s would wait 7 s: the job started last (least work lost)
 * is the victim, once; the freed GPU then goes to the interactive job. */
static void test_victim_least_work_done(void **state)
{
    (void)state;
    struct sched *s = mk_sched(1.0);
    mk_worker(s, "g0", 1.0);
    mk_worker(s, "g1", 1.0);
    run_batch(s, 1, "g0", S(0));
    run_batch(s, 2, "g1", S(2));
    add_job(s, 10, SCHED_LANE_INTERACTIVE, S(3));
    sched_dispatch(s, S(3), NULL, NULL);
    struct sched_preempt p;
    assert_int_equal(sched_preempt_pick(s, S(3), &p), 1);
    assert_int_equal(p.victim, 2);
    assert_int_equal(p.for_job, 10);
    assert_string_equal(p.worker, "g1");
    assert_float_equal(p.lost_s, 1.0, 1e-6);
    assert_float_equal(p.load_s, 0.0, 1e-9); /* warm */
    assert_true(p.wait_s > 6.9);
    assert_non_null(strstr(p.reason, "interactive job 10"));
    /* One preemption per interactive job; the victim is not picked twice. */
    assert_int_equal(sched_preempt_pick(s, S(3), &p), 0);
    /* The caller ends the attempt, frees the slot and queues the job again:
     * the interactive job gets g1, the batch job waits in the queue. */
    assert_int_equal(sched_job_finished(s, 2, false, 0, 0, S(3)), 0);
    add_job(s, 2, SCHED_LANE_BATCH, S(2));
    sched_dispatch(s, S(3), NULL, NULL);
    uint64_t got;
    assert_int_equal(sched_take(s, "g1", S(3), &got), 0);
    assert_int_equal(got, 10);
    struct sched_stats st;
    sched_stats(s, &st);
    assert_int_equal(st.queued, 1);
    assert_int_equal(sched_preempt_pick(s, S(3.1), &p), 0); /* only batch waits */
    sched_destroy(s);
}

/* None while a GPU able to run the interactive job is free. */
static void test_none_with_a_free_gpu(void **state)
{
    (void)state;
    struct sched *s = mk_sched(1.0);
    mk_worker(s, "g0", 1.0);
    mk_worker(s, "g1", 1.0);
    run_batch(s, 1, "g0", S(0));
    add_job(s, 10, SCHED_LANE_INTERACTIVE, S(0));
    /* Not dispatched yet: it waits in the queue while g1 is free. */
    struct sched_preempt p;
    assert_int_equal(sched_preempt_pick(s, S(5), &p), 0);
    sched_dispatch(s, S(5), NULL, NULL);
    uint64_t got;
    assert_int_equal(sched_take(s, "g1", S(5), &got), 0);
    assert_int_equal(got, 10);
    assert_int_equal(sched_preempt_pick(s, S(5), &p), 0);
    sched_destroy(s);
}

/* None when the wait stays within the bound, nor when preemption is off. */
static void test_none_within_bound_or_off(void **state)
{
    (void)state;
    struct sched *s = mk_sched(1.0);
    mk_worker(s, "g0", 1.0);
    run_batch(s, 1, "g0", S(0));
    add_job(s, 10, SCHED_LANE_INTERACTIVE, S(9.5)); /* the batch job ends at 10 s */
    sched_dispatch(s, S(9.5), NULL, NULL);
    struct sched_preempt p;
    assert_int_equal(sched_preempt_pick(s, S(9.5), &p), 0);
    sched_destroy(s);

    s = mk_sched(0); /* off */
    mk_worker(s, "g0", 1.0);
    run_batch(s, 1, "g0", S(0));
    add_job(s, 10, SCHED_LANE_INTERACTIVE, S(1));
    sched_dispatch(s, S(1), NULL, NULL);
    assert_int_equal(sched_preempt_pick(s, S(5), &p), 0);
    sched_destroy(s);

    /* Interactive work is never a victim. */
    s = mk_sched(1.0);
    mk_worker(s, "g0", 1.0);
    add_job(s, 5, SCHED_LANE_INTERACTIVE, S(0));
    sched_dispatch(s, S(0), NULL, NULL);
    uint64_t got;
    assert_int_equal(sched_take(s, "g0", S(0), &got), 0);
    add_job(s, 10, SCHED_LANE_INTERACTIVE, S(0.5));
    sched_dispatch(s, S(0.5), NULL, NULL);
    assert_int_equal(sched_preempt_pick(s, S(3), &p), 0);
    sched_destroy(s);
}

/* A faster GPU is preferred when the work lost is the same. */
static void test_victim_prefers_fast_gpu(void **state)
{
    (void)state;
    struct sched *s = mk_sched(1.0);
    mk_worker(s, "slow", 0.5);
    mk_worker(s, "fast", 1.0);
    run_batch(s, 1, "fast", S(0));
    run_batch(s, 2, "slow", S(0));
    add_job(s, 10, SCHED_LANE_INTERACTIVE, S(1));
    sched_dispatch(s, S(1), NULL, NULL);
    struct sched_preempt p;
    assert_int_equal(sched_preempt_pick(s, S(1), &p), 1);
    /* slow: 0.5 GPU-s lost + 20 s run; fast: 1 GPU-s lost + 10 s run */
    assert_string_equal(p.worker, "fast");
    assert_int_equal(p.victim, 1);
    sched_destroy(s);
}

/* A faster GPU is taken even when more work is lost there: the interactive
 * user's completion weighs 10:1 against the batch work thrown away. */
static void test_victim_fast_over_less_lost(void **state)
{
    (void)state;
    struct sched *s = mk_sched(1.0);
    mk_worker(s, "slow", 0.8);
    mk_worker(s, "fast", 1.0);
    run_batch(s, 1, "fast", S(0));
    run_batch(s, 2, "slow", S(2.9));
    add_job(s, 10, SCHED_LANE_INTERACTIVE, S(3));
    sched_dispatch(s, S(3), NULL, NULL);
    struct sched_preempt p;
    assert_int_equal(sched_preempt_pick(s, S(3), &p), 1);
    /* slow: 0.08 GPU-s lost, the job done in 12.5 s; fast: 3 lost, done in
     * 10 s (at 1:1 the slow GPU would win: 12.58 against 13) */
    assert_string_equal(p.worker, "fast");
    assert_int_equal(p.victim, 1);
    sched_destroy(s);
}

/* The GPU that frees first is slow: waiting 0.5 s for it (within the 1 s
 * bound) would finish the interactive job 20.5 s from now, waiting for the
 * fast one 11.5 s; preempting on the fast GPU, 10 s — more than the bound
 * sooner, so it preempts. */
static void test_preempt_when_first_free_is_slow(void **state)
{
    (void)state;
    struct sched *s = mk_sched(1.0);
    mk_worker(s, "slow", 0.5);
    mk_worker(s, "fast", 1.0);
    run_batch(s, 1, "fast", S(0));  /* ends at 10 */
    run_batch(s, 2, "slow", S(1));  /* 20 s there: ends at 21 */
    assert_int_equal(sched_job_finished(s, 1, true, 0, S(10), S(10)), 0);
    run_batch(s, 3, "fast", S(12)); /* ends at 22 */
    add_job(s, 10, SCHED_LANE_INTERACTIVE, S(20.5));
    sched_dispatch(s, S(20.5), NULL, NULL);
    struct sched_preempt p;
    assert_int_equal(sched_preempt_pick(s, S(20.5), &p), 1);
    assert_string_equal(p.worker, "fast");
    assert_int_equal(p.victim, 3);
    assert_true(p.wait_s < 1.0); /* preempted for completion, not for the wait */
    sched_destroy(s);
}

/* Two interactive jobs wait, 10 placed on g0 and 11 on g1, each behind a
 * batch job. Each preemption frees a GPU for the job it was made for: the
 * one for 10 takes the batch job on g1 (less work lost there), 10 moves to
 * g1, and 11 then gets its own victim on g0 — neither is left waiting for a
 * batch job to end after a preemption was spent on its account. */
static void test_each_preemption_serves_its_job(void **state)
{
    (void)state;
    struct sched *s = mk_sched(1.0);
    mk_worker(s, "g0", 1.0);
    mk_worker(s, "g1", 1.0);
    run_batch(s, 1, "g0", S(0));
    run_batch(s, 2, "g1", S(2));
    add_job(s, 10, SCHED_LANE_INTERACTIVE, S(2.5));
    add_job(s, 11, SCHED_LANE_INTERACTIVE, S(2.6));
    sched_dispatch(s, S(2.6), NULL, NULL);
    struct sched_preempt p[2];
    assert_int_equal(sched_preempt_pick(s, S(3), &p[0]), 1);
    assert_int_equal(sched_preempt_pick(s, S(3), &p[1]), 1);
    bool served[2] = {false, false};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(sched_job_finished(s, p[k].victim, false, 0, 0, S(3)), 0);
        add_job(s, p[k].victim, SCHED_LANE_BATCH, S(2));
    }
    sched_dispatch(s, S(3), NULL, NULL);
    for (int k = 0; k < 2; k++) {
        uint64_t got;
        assert_int_equal(sched_take(s, p[k].worker, S(3), &got), 0);
        assert_int_equal(got, p[k].for_job);
        served[got - 10] = true;
    }
    assert_true(served[0] && served[1]);
    sched_destroy(s);
}

/* lc_preempt: fenced; no failure counted, no worker excluded, budget intact. */
static void test_lc_preempt_keeps_budget(void **state)
{
    (void)state;
    struct lc_policy pol;
    lc_policy_defaults(&pol);
    pol.max_attempts = 1;
    struct lc_job j;
    lc_init(&j, 0, 0);
    struct lc_now now = {S(1), 1000};
    assert_int_equal(lc_assign(&pol, &j, "g0", now), 0);
    struct lc_attempt a;
    assert_int_equal(lc_preempt(&j, "g0", 2, "x", now, &a), GPUQ_ESTALE);
    assert_int_equal(lc_preempt(&j, "g1", 1, "x", now, &a), GPUQ_ESTALE);
    assert_int_equal(lc_preempt(&j, "g0", 1, "for job 10", now, &a), 0);
    assert_int_equal(j.state, LC_QUEUED);
    assert_int_equal(j.failures, 0);
    assert_int_equal(j.nfailed, 0);
    assert_false(lc_failed_on(&j, "g0"));
    assert_int_equal(a.outcome, LC_OUT_PREEMPTED);
    assert_string_equal(lc_outcome_name(a.outcome), "preempted");
    assert_string_equal(a.error_class, "");
    assert_string_equal(a.error, "for job 10");
    /* Its end came already: a second one (or a late report) is stale. */
    assert_int_equal(lc_preempt(&j, "g0", 1, "x", now, &a), GPUQ_ESTALE);
    assert_int_equal(lc_succeed(&j, "g0", 1, now, &a), GPUQ_ESTALE);
    /* The next attempt runs with the whole budget: it succeeds on g0. */
    assert_int_equal(lc_assign(&pol, &j, "g0", now), 0);
    assert_int_equal(j.attempt, 2);
    assert_int_equal(lc_succeed(&j, "g0", 2, now, &a), 0);
    assert_int_equal(j.state, LC_SUCCEEDED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_victim_least_work_done),
        cmocka_unit_test(test_none_with_a_free_gpu),
        cmocka_unit_test(test_none_within_bound_or_off),
        cmocka_unit_test(test_victim_prefers_fast_gpu),
        cmocka_unit_test(test_victim_fast_over_less_lost),
        cmocka_unit_test(test_preempt_when_first_free_is_slow),
        cmocka_unit_test(test_each_preemption_serves_its_job),
        cmocka_unit_test(test_lc_preempt_keeps_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
