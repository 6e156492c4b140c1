/* test_sched_ahead.c: a worker that holds a job ahead (worker_info.ahead,
 * sched_config.assign_ahead_s). It is handed its next placed job while its
 * slot is taken only within the window before the running job's expected
 * end; the held job stays first there, no other GPU takes it, and it
 * counts as started (reported by
 * sched_held_news) the moment the slot frees; it is taken back when its
 * GPU fails (not when it drains), lost with its worker, and may end before
 * it starts. */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "core/sched.h"

#define S(x) ((int64_t)((x) * 1e9))

/* One image model whose jobs run 2.5 s; GPUs hold jobs ahead within window
 * seconds (the default: 0.25). */
static struct sched *mk_sched(double window)
{
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    assert_float_equal(cfg.assign_ahead_s, 0.25, 1e-12);
    cfg.assign_ahead_s = window;
    struct sched *s = sched_create(&cfg);
    struct model_info m = {"image-v2", 22528, 5000, MODEL_GENERATION};
    assert_int_equal(sched_model_set(s, &m), 0);
    assert_int_equal(sched_model_prior(s, "image-v2", 2.5, 1024, 1024, 8, 0), 0);
    return s;
}

static void worker_as(struct sched *s, const char *id, int ahead, bool draining, bool healthy,
                      int64_t now)
{
    struct worker_info w;
    memset(&w, 0, sizeof w);
    snprintf(w.id, sizeof w.id, "%s", id);
    snprintf(w.gpu_class, sizeof w.gpu_class, "RTX 5090");
    snprintf(w.caps[w.ncaps++], SCHED_NAME_MAX, "image.fast");
    w.concurrency = 1;
    w.ahead = ahead;
    w.vram_total_mb = w.vram_free_mb = 32768;
    struct loaded_model *lm = &w.loaded[w.nloaded++];
    snprintf(lm->name, sizeof lm->name, "image-v2");
    lm->vram_mb = 22528;
    w.vram_free_mb -= lm->vram_mb;
    w.temp_c = 50;
    w.speed = 1.0;
    w.healthy = healthy;
    w.draining = draining;
    assert_int_equal(sched_worker_update(s, &w, now), 0);
}

static void worker(struct sched *s, const char *id, int ahead, int64_t now)
{
    worker_as(s, id, ahead, false, true, now);
}

/* sched_held_news for a job that started: 1 with its id, or 0 when none
 * (news of another kind fails the test). */
static int started(struct sched *s, uint64_t *id)
{
    enum sched_held_what what = 0;
    int n = sched_held_news(s, id, &what);
    if (n)
        assert_int_equal(what, SCHED_HELD_STARTED);
    return n;
}

static void add(struct sched *s, uint64_t id, enum sched_lane lane, int64_t now)
{
    struct job_spec j;
    memset(&j, 0, sizeof j);
    j.id = id;
    j.lane = lane;
    snprintf(j.capability, sizeof j.capability, "image.fast");
    snprintf(j.model, sizeof j.model, "image-v2");
    j.width = j.height = 1024;
    j.steps = 8;
    j.submit_ns = now;
    assert_int_equal(sched_job_add(s, &j, now), 0);
}

/* gpu0 (holding `ahead` jobs ahead, under a window of `window` s) runs
 * interactive job 1 from 0 to 2.5 s; job 2 is placed behind it, job 3
 * queued (queue depth 2). A batch job is not placed on a busy GPU, so only
 * interactive (and urgent batch) jobs are held. */
static struct sched *one_running_as(double window, int ahead)
{
    struct sched *s = mk_sched(window);
    worker(s, "gpu0", ahead, 0);
    for (uint64_t id = 1; id <= 3; id++)
        add(s, id, SCHED_LANE_INTERACTIVE, 0);
    assert_int_equal(sched_dispatch(s, 0, NULL, NULL), 2); /* queue depth 2 */
    uint64_t id;
    assert_int_equal(sched_take(s, "gpu0", 0, &id), 0);
    assert_int_equal(id, 1);
    return s;
}

static struct sched *one_running(void)
{
    return one_running_as(0.25, 1);
}

static void test_held_only_within_the_window_then_started_when_the_slot_frees(void **state)
{
    (void)state;
    struct sched *s = one_running();
    uint64_t id = 0;
    /* 2.5 s before job 1's end: nothing to hold yet. */
    assert_int_equal(sched_take(s, "gpu0", 0, &id), GPUQ_EAGAIN);
    /* 0.2 s before: job 2 is handed to hold; one at a time. */
    assert_int_equal(sched_take(s, "gpu0", S(2.3), &id), 0);
    assert_int_equal(id, 2);
    assert_int_equal(sched_take(s, "gpu0", S(2.3), &id), GPUQ_EAGAIN);
    assert_int_equal(started(s, &id), 0);
    /* Still placed, starting when job 1 ends. */
    struct sched_stats st;
    sched_stats(s, &st);
    assert_int_equal(st.running, 1);
    assert_int_equal(st.placed, 1);
    assert_int_equal(st.queued, 1);
    double start, fin;
    assert_int_equal(sched_job_eta(s, 2, S(2.3), &start, &fin), 0);
    assert_float_equal(start, 0.2, 1e-6);
    /* Job 1 ends: job 2 counts as started at that moment, once. */
    assert_int_equal(sched_job_finished(s, 1, true, 0, S(2.5), S(2.5)), 0);
    assert_int_equal(started(s, &id), 1);
    assert_int_equal(id, 2);
    assert_int_equal(started(s, &id), 0);
    sched_stats(s, &st);
    assert_int_equal(st.running, 1);
    assert_int_equal(sched_job_eta(s, 2, S(3), &start, &fin), 0);
    assert_float_equal(start, 0, 1e-9);
    assert_float_equal(fin, 2.0, 1e-6);
    /* The next take hands job 3 only near job 2's end (5.0 s). */
    assert_int_equal(sched_dispatch(s, S(3), NULL, NULL), 1);
    assert_int_equal(sched_take(s, "gpu0", S(3), &id), GPUQ_EAGAIN);
    assert_int_equal(sched_take(s, "gpu0", S(4.9), &id), 0);
    assert_int_equal(id, 3);
    sched_destroy(s);
}

static void test_no_hold_without_the_worker_or_the_window(void **state)
{
    (void)state;
    uint64_t id;
    /* A worker that does not say it can hold one, and a head that hands
     * none (window 0): job 2 waits placed until the slot frees. */
    struct sched *cases[] = {one_running_as(0.25, 0), one_running_as(0, 1)};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(sched_take(cases[i], "gpu0", S(2.49), &id), GPUQ_EAGAIN);
        assert_int_equal(sched_job_finished(cases[i], 1, true, 0, S(2.5), S(2.5)), 0);
        assert_int_equal(started(cases[i], &id), 0);
        assert_int_equal(sched_take(cases[i], "gpu0", S(2.5), &id), 0);
        assert_int_equal(id, 2);
        sched_destroy(cases[i]);
    }
}

static void test_held_job_stays_first_and_on_its_gpu(void **state)
{
    (void)state;
    struct sched *s = one_running();
    uint64_t id;
    assert_int_equal(sched_take(s, "gpu0", S(2.3), &id), 0);
    assert_int_equal(id, 2);
    /* Job 3 is placed behind it, to start at 2.5 + 2.5 s. */
    assert_int_equal(sched_dispatch(s, S(2.3), NULL, NULL), 1);
    double start, fin;
    assert_int_equal(sched_job_eta(s, 3, S(2.3), &start, &fin), 0);
    assert_float_equal(start, 2.7, 1e-6);
    /* An idle GPU joins: late binding moves job 3 there, never job 2,
     * which would also start sooner there. */
    worker(s, "gpu1", 1, S(2.3));
    sched_dispatch(s, S(2.3), NULL, NULL);
    assert_int_equal(sched_take(s, "gpu1", S(2.3), &id), 0);
    assert_int_equal(id, 3);
    assert_int_equal(sched_job_eta(s, 2, S(2.3), &start, &fin), 0);
    assert_float_equal(start, 0.2, 1e-6);
    assert_int_equal(sched_job_finished(s, 1, true, 0, S(2.5), S(2.5)), 0);
    assert_int_equal(started(s, &id), 1);
    assert_int_equal(id, 2);
    sched_destroy(s);
}

static void test_held_job_is_taken_back_when_its_gpu_fails(void **state)
{
    (void)state;
    struct sched *s = one_running();
    uint64_t id;
    enum sched_held_what what;
    assert_int_equal(sched_take(s, "gpu0", S(2.3), &id), 0);
    assert_int_equal(id, 2);
    /* gpu0 drains: a drain finishes what the worker holds, job 2 too. */
    worker_as(s, "gpu0", 1, true, true, S(2.32));
    assert_int_equal(sched_held_news(s, &id, &what), 0);
    /* Its GPU fails: job 2 has not started, so it is the caller's to take
     * back (R20: a job not started leaves a GPU that fails), once, however
     * often the worker reports. */
    worker_as(s, "gpu0", 1, true, false, S(2.35));
    worker_as(s, "gpu0", 1, false, false, S(2.36));
    assert_int_equal(sched_held_news(s, &id, &what), 1);
    assert_int_equal(id, 2);
    assert_int_equal(what, SCHED_HELD_TAKE_BACK);
    assert_int_equal(sched_held_news(s, &id, &what), 0);
    /* The caller ends its attempt; the job is then the caller's to add again. */
    assert_int_equal(sched_job_finished(s, 2, false, 0, 0, S(2.4)), 0);
    assert_int_equal(sched_job_finished(s, 1, true, 0, S(2.5), S(2.5)), 0);
    assert_int_equal(sched_held_news(s, &id, &what), 0);
    struct sched_stats st;
    sched_stats(s, &st);
    assert_int_equal(st.running + st.placed, 0);
    sched_destroy(s);
}

static void on_lost(uint64_t job, void *arg)
{
    uint64_t *bits = arg;
    *bits |= (uint64_t)1 << job;
}

static void test_held_job_is_lost_with_its_worker(void **state)
{
    (void)state;
    struct sched *s = one_running();
    uint64_t id, lost = 0;
    assert_int_equal(sched_take(s, "gpu0", S(2.3), &id), 0);
    assert_int_equal(sched_worker_remove(s, "gpu0", S(2.4), on_lost, &lost), 0);
    /* The running job and the held one are lost (the caller decides their
     * retry); the one only placed goes back to the queue. */
    assert_int_equal(lost, (1u << 1) | (1u << 2));
    struct sched_stats st;
    sched_stats(s, &st);
    assert_int_equal(st.running + st.placed, 0);
    assert_int_equal(st.queued, 1);
    assert_int_equal(started(s, &id), 0);
    sched_destroy(s);
}

static void test_held_job_may_end_before_it_starts(void **state)
{
    (void)state;
    struct sched *s = one_running();
    uint64_t id;
    assert_int_equal(sched_take(s, "gpu0", S(2.3), &id), 0);
    /* Cancelled (or failed at its load) while held: gone, nothing starts. */
    assert_int_equal(sched_job_finished(s, 2, false, 0, 0, S(2.4)), 0);
    assert_int_equal(sched_job_finished(s, 2, false, 0, 0, S(2.4)), GPUQ_ENOENT);
    assert_int_equal(sched_job_finished(s, 1, true, 0, S(2.5), S(2.5)), 0);
    assert_int_equal(started(s, &id), 0);
    /* A running job cancelled frees its slot too: what is held starts. */
    sched_dispatch(s, S(2.5), NULL, NULL);
    assert_int_equal(sched_take(s, "gpu0", S(2.5), &id), 0);
    assert_int_equal(id, 3);
    add(s, 5, SCHED_LANE_INTERACTIVE, S(2.5));
    sched_dispatch(s, S(2.5), NULL, NULL);
    assert_int_equal(sched_take(s, "gpu0", S(4.9), &id), 0);
    assert_int_equal(id, 5);
    assert_int_equal(sched_job_cancel(s, 3, S(4.95)), 0);
    assert_int_equal(started(s, &id), 1);
    assert_int_equal(id, 5);
    /* One that started and ended before anyone asked is not reported. */
    add(s, 6, SCHED_LANE_INTERACTIVE, S(5));
    sched_dispatch(s, S(5), NULL, NULL);
    assert_int_equal(sched_take(s, "gpu0", S(7.3), &id), 0);
    assert_int_equal(id, 6);
    assert_int_equal(sched_job_finished(s, 5, true, 0, S(2.4), S(7.35)), 0);
    assert_int_equal(sched_job_finished(s, 6, true, 0, S(0.1), S(7.45)), 0);
    assert_int_equal(started(s, &id), 0);
    sched_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_held_only_within_the_window_then_started_when_the_slot_frees),
        cmocka_unit_test(test_no_hold_without_the_worker_or_the_window),
        cmocka_unit_test(test_held_job_stays_first_and_on_its_gpu),
        cmocka_unit_test(test_held_job_is_taken_back_when_its_gpu_fails),
        cmocka_unit_test(test_held_job_is_lost_with_its_worker),
        cmocka_unit_test(test_held_job_may_end_before_it_starts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
