/* test_sched_pause.c: an admin's controls in the scheduler with scripted
 * time — a paused capability or lane places nothing new and parks its queued
 * jobs with a reason and no ETA, while other work goes on; resuming places
 * them; a promoted job is dispatched first in its lane. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "core/sched.h"

#define S(x) ((int64_t)((x) * 1e9))

static struct sched *mk(int queue_depth)
{
    struct sched_config cfg;
    sched_config_defaults(&cfg);
    cfg.queue_depth = queue_depth;
    struct sched *s = sched_create(&cfg);
    struct model_info m = {"image-v2", 22000, 5000, MODEL_GENERATION};
    assert_int_equal(sched_model_set(s, &m), 0);
    struct worker_info w;
    memset(&w, 0, sizeof w);
    snprintf(w.id, sizeof w.id, "gpu0");
    snprintf(w.caps[w.ncaps++], SCHED_NAME_MAX, "image.fast");
    snprintf(w.caps[w.ncaps++], SCHED_NAME_MAX, "upscale");
    w.concurrency = 1;
    w.vram_total_mb = w.vram_free_mb = 32000;
    w.speed = 1.0;
    w.healthy = true;
    assert_int_equal(sched_worker_update(s, &w, 0), 0);
    return s;
}

static void add(struct sched *s, uint64_t id, const char *cap, enum sched_lane lane, int64_t now)
{
    struct job_spec j;
    memset(&j, 0, sizeof j);
    j.id = id;
    j.lane = lane;
    snprintf(j.capability, sizeof j.capability, "%s", cap);
    snprintf(j.model, sizeof j.model, "image-v2");
    j.submit_ns = now;
    assert_int_equal(sched_job_add(s, &j, now), 0);
}

struct placed {
    uint64_t ids[16];
    int n;
};

static void on_placed(uint64_t job, const char *worker, const struct sched_explain *why, void *arg)
{
    (void)worker;
    (void)why;
    struct placed *p = arg;
    p->ids[p->n++] = job;
}

/* Takes and finishes every job placed on gpu0, in order; returns their ids. */
static int drain_all(struct sched *s, int64_t *now, uint64_t *order, int max)
{
    int n = 0;
    for (;;) {
        struct placed p = {0};
        sched_dispatch(s, *now, on_placed, &p);
        uint64_t id;
        if (sched_take(s, "gpu0", *now, &id) != 0)
            return n;
        if (n < max)
            order[n++] = id;
        *now += S(1);
        assert_int_equal(sched_job_finished(s, id, true, 0, S(1), *now), 0);
    }
}

static void test_paused_capability_waits_with_a_reason(void **state)
{
    (void)state;
    struct sched *s = mk(2);
    assert_int_equal(sched_pause(s, "image.fast", -1, true), 0);
    add(s, 1, "image.fast", SCHED_LANE_INTERACTIVE, 0);
    add(s, 2, "upscale", SCHED_LANE_INTERACTIVE, 0);
    struct placed p = {0};
    sched_dispatch(s, 0, on_placed, &p);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.ids[0], 2); /* other capabilities go on */
    double st, fin;
    assert_int_equal(sched_job_eta(s, 1, 0, &st, &fin), 0);
    assert_true(st < 0);
    char why[160];
    assert_true(sched_job_parked(s, 1, why, sizeof why));
    assert_non_null(strstr(why, "image.fast is paused"));
    char caps[4][SCHED_NAME_MAX];
    unsigned lanes;
    assert_int_equal(sched_paused(s, caps, 4, &lanes), 1);
    assert_string_equal(caps[0], "image.fast");
    assert_int_equal(lanes, 0);
    assert_int_equal(sched_pause(s, "image.fast", -1, false), 0);
    memset(&p, 0, sizeof p);
    sched_dispatch(s, S(1), on_placed, &p);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.ids[0], 1);
    assert_false(sched_job_parked(s, 1, NULL, 0));
    sched_destroy(s);
}

static void test_paused_lane_lets_the_other_lane_through(void **state)
{
    (void)state;
    struct sched *s = mk(2);
    assert_int_equal(sched_pause(s, NULL, SCHED_LANE_BATCH, true), 0);
    add(s, 1, "image.fast", SCHED_LANE_BATCH, 0);
    add(s, 2, "image.fast", SCHED_LANE_INTERACTIVE, S(0.1));
    int64_t now = S(1);
    uint64_t order[4];
    assert_int_equal(drain_all(s, &now, order, 4), 1);
    assert_int_equal(order[0], 2);
    char why[160];
    assert_true(sched_job_parked(s, 1, why, sizeof why));
    assert_non_null(strstr(why, "batch lane is paused"));
    assert_int_equal(sched_pause(s, NULL, SCHED_LANE_BATCH, false), 0);
    assert_int_equal(drain_all(s, &now, order, 4), 1);
    assert_int_equal(order[0], 1);
    assert_int_equal(sched_pause(s, NULL, 5, true), GPUQ_EINVAL);
    sched_destroy(s);
}

static void test_promoted_job_goes_first_in_its_lane(void **state)
{
    (void)state;
    struct sched *s = mk(1);
    assert_int_equal(sched_pause(s, "image.fast", -1, true), 0);
    for (uint64_t id = 1; id <= 4; id++)
        add(s, id, "image.fast", SCHED_LANE_INTERACTIVE, S(id));
    add(s, 5, "image.fast", SCHED_LANE_BATCH, S(0.5));
    assert_int_equal(sched_job_promote(s, 3, S(5)), 0);
    assert_int_equal(sched_job_promote(s, 5, S(5)), 0); /* batch: first of batch only */
    assert_int_equal(sched_job_promote(s, 99, S(5)), GPUQ_ENOENT);
    assert_int_equal(sched_pause(s, "image.fast", -1, false), 0);
    int64_t now = S(6);
    uint64_t order[8];
    assert_int_equal(drain_all(s, &now, order, 8), 5);
    uint64_t want[] = {3, 1, 2, 4, 5};
    for (int i = 0; i < 5; i++)
        assert_int_equal(order[i], want[i]);
    sched_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paused_capability_waits_with_a_reason),
        cmocka_unit_test(test_paused_lane_lets_the_other_lane_through),
        cmocka_unit_test(test_promoted_job_goes_first_in_its_lane),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
