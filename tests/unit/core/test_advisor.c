/* test_advisor.c: the autoscaling advisor with scripted time — no scale-up
 * while the backlog is under k x cold start, scale-up above it, the fleet's
 * maximum, release of idle GPUs only (not busy or pinned ones), no flapping on
 * a backlog that oscillates around the threshold, and the cold start learned
 * from provision → ready times. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "core/advisor.h"

#define S(x) ((int64_t)((x) * 1e9))

static struct advisor *make(void)
{
    struct advisor_policy p;
    advisor_policy_defaults(&p); /* k 2, prior 180 s → threshold 360 GPU-s */
    struct advisor *a = advisor_create(&p);
    assert_non_null(a);
    return a;
}

static void gpu(struct advisor_gpu *g, const char *id, bool busy, double idle_s)
{
    memset(g, 0, sizeof *g);
    snprintf(g->id, sizeof g->id, "%s", id);
    snprintf(g->cls, sizeof g->cls, "L4");
    g->busy = busy;
    g->idle_s = busy ? 0 : idle_s;
}

static struct advisor_input input(struct advisor_demand *d, double backlog, double thr,
                                  struct advisor_gpu *g, int ng)
{
    memset(d, 0, sizeof *d);
    snprintf(d->capability, sizeof d->capability, "video");
    d->lane = SCHED_LANE_BATCH; /* these tests judge the k_batch (2) rule */
    d->backlog_gpu_s = backlog;
    d->throughput = thr;
    struct advisor_input in = {.demands = d, .ndemands = 1, .gpus = g, .ngpus = ng,
                               .speed = 1, .up_class = "L4"};
    return in;
}

/* 300 GPU-s queued with a 180 s cold start (threshold 360): a new GPU would
 * not pay for its start, however busy the fleet is. */
static void test_no_scale_up_under_k_cold_starts(void **state)
{
    (void)state;
    struct advisor *a = make();
    struct advisor_gpu g[2];
    gpu(&g[0], "w0", true, 0);
    gpu(&g[1], "w1", true, 0);
    struct advisor_demand d;
    struct advisor_input in = input(&d, 300, 2.0, g, 2);
    struct advisor_rec r;
    assert_int_equal(advisor_decide(a, &in, S(1000), &r), 0);
    assert_int_equal(r.action, ADVISOR_HOLD);
    assert_float_equal(r.threshold_gpu_s, 360, 1e-9);
    assert_true(r.util_before > 0.8); /* hot, yet not worth a cold start */
    assert_non_null(strstr(r.reason, "300.0 GPU-s"));
    advisor_destroy(a);
}

/* 1440 GPU-s queued: four cold starts' worth (k 2) — four GPUs, though the
 * utilization target alone would want five. */
static void test_scale_up_over_threshold(void **state)
{
    (void)state;
    struct advisor *a = make();
    struct advisor_gpu g[2];
    gpu(&g[0], "w0", true, 0);
    gpu(&g[1], "w1", true, 0);
    struct advisor_demand d;
    struct advisor_input in = input(&d, 1440, 1.6, g, 2);
    struct advisor_rec r;
    assert_int_equal(advisor_decide(a, &in, S(1000), &r), 0);
    assert_int_equal(r.action, ADVISOR_UP);
    assert_string_equal(r.cls, "L4");
    assert_int_equal(r.count, 4);
    /* load = 1.6 + 1440 / 360 = 5.6 GPU-s/s: 2.8 on 2 GPUs, 0.933 on 6 */
    assert_float_equal(r.load, 5.6, 1e-9);
    assert_float_equal(r.util_before, 2.8, 1e-9);
    assert_float_equal(r.util_after, 5.6 / 6, 1e-9);
    assert_non_null(strstr(r.reason, "k_batch 2 x 180 s = 360.0"));
    /* Acting on it: four requests pending count as capacity on the way. */
    advisor_acted(a, &r, S(1000));
    assert_int_equal(advisor_pending(a, S(1001)), 4);
    assert_int_equal(advisor_decide(a, &in, S(1001), &r), 0);
    assert_int_equal(r.action, ADVISOR_HOLD);
    advisor_destroy(a);
}

/* The maximum fleet size is a budget: 8 by default, counting pending ones. */
static void test_max_respected(void **state)
{
    (void)state;
    struct advisor *a = make();
    struct advisor_gpu g[2];
    gpu(&g[0], "w0", true, 0);
    gpu(&g[1], "w1", true, 0);
    struct advisor_demand d;
    struct advisor_input in = input(&d, 36000, 1.6, g, 2);
    struct advisor_rec r;
    assert_int_equal(advisor_decide(a, &in, S(0), &r), 0);
    assert_int_equal(r.action, ADVISOR_UP);
    assert_int_equal(r.count, 6);
    assert_non_null(strstr(r.reason, "maximum fleet size"));
    advisor_acted(a, &r, S(0));
    /* Past the cool-down, still hot, still far over the threshold: nothing more. */
    assert_int_equal(advisor_decide(a, &in, S(400), &r), 0);
    assert_int_equal(r.action, ADVISOR_HOLD);
    assert_int_equal(r.gpus + r.pending, 8);
    assert_non_null(strstr(r.reason, "at the maximum fleet size"));
    advisor_destroy(a);
}

/* Idle over idle_release_s and not holding a needed model: released; busy,
 * pinned and recently used GPUs stay. */
static void test_scale_down_idle_only(void **state)
{
    (void)state;
    struct advisor *a = make();
    struct advisor_gpu g[4];
    gpu(&g[0], "busy", true, 0);
    gpu(&g[1], "idle-old", false, 900);
    gpu(&g[2], "pinned", false, 900);
    g[2].protected_model = true;
    gpu(&g[3], "idle-recent", false, 100);
    struct advisor_demand d;
    struct advisor_input in = input(&d, 10, 0.3, g, 4);
    struct advisor_rec r;
    assert_int_equal(advisor_decide(a, &in, S(5000), &r), 0);
    assert_int_equal(r.action, ADVISOR_DOWN);
    assert_int_equal(r.count, 1);
    assert_string_equal(r.release[0], "idle-old");
    assert_true(r.util_after <= 0.5);
    /* Busy, it stays. */
    g[1].busy = true;
    g[1].idle_s = 0;
    assert_int_equal(advisor_decide(a, &in, S(5000), &r), 0);
    assert_int_equal(r.action, ADVISOR_HOLD);
    assert_non_null(strstr(r.reason, "model queued work needs"));
    advisor_destroy(a);
}

/* Releasing would push the utilization over the down threshold: kept. */
static void test_scale_down_keeps_needed_capacity(void **state)
{
    (void)state;
    struct advisor *a = make();
    struct advisor_gpu g[2];
    gpu(&g[0], "w0", true, 0);
    gpu(&g[1], "w1", false, 900);
    struct advisor_demand d;
    struct advisor_input in = input(&d, 0, 0.7, g, 2); /* 0.7 on 1 GPU > 0.5 */
    struct advisor_rec r;
    assert_int_equal(advisor_decide(a, &in, S(5000), &r), 0);
    assert_int_equal(r.action, ADVISOR_HOLD);
    advisor_destroy(a);
}

/* A backlog oscillating around 360 GPU-s every 30 s for six hours: the fleet
 * grows to what keeps utilization under 0.8 and never shrinks back while the
 * load stays (the 0.5 down threshold), with no back-and-forth. */
static void test_no_flapping(void **state)
{
    (void)state;
    struct advisor *a = make();
    struct advisor_gpu g[8];
    int ng = 2;
    for (int i = 0; i < 8; i++) {
        char id[16];
        snprintf(id, sizeof id, "w%d", i);
        gpu(&g[i], id, i < 2, 10000);
    }
    int ups = 0, downs = 0, pending = 0;
    double ready_at = -1;
    for (int t = 0; t < 6 * 3600; t += 10) {
        if (pending && ready_at >= 0 && t >= ready_at) { /* requested GPUs come up */
            for (; pending > 0; pending--) {
                double s;
                assert_int_equal(advisor_worker_ready(a, "L4", S(t), &s), 0);
                ng++;
            }
            ready_at = -1;
        }
        double backlog = (t / 30) % 2 ? 420 : 300;
        struct advisor_demand d;
        struct advisor_input in = input(&d, backlog, 1.4, g, ng);
        struct advisor_rec r;
        assert_int_equal(advisor_decide(a, &in, S(t), &r), 0);
        if (r.action == ADVISOR_UP) {
            ups++;
            pending += r.count;
            ready_at = t + 180;
        } else if (r.action == ADVISOR_DOWN) {
            downs++;
            ng -= r.count;
        }
        advisor_acted(a, &r, S(t));
    }
    assert_int_equal(downs, 0);
    assert_true(ups >= 1 && ups <= 2);
    assert_int_equal(ng, 4); /* load 1.4 + 420 / 360 = 2.57: 0.64 on 4 GPUs */
    advisor_destroy(a);
}

/* The cool-down: after an action, nothing for cooldown_s. */
static void test_cooldown(void **state)
{
    (void)state;
    struct advisor *a = make();
    struct advisor_gpu g[1];
    gpu(&g[0], "w0", true, 0);
    struct advisor_demand d;
    struct advisor_input in = input(&d, 800, 0.9, g, 1);
    struct advisor_rec r;
    assert_int_equal(advisor_decide(a, &in, S(0), &r), 0);
    assert_int_equal(r.action, ADVISOR_UP);
    advisor_acted(a, &r, S(0));
    assert_int_equal(advisor_worker_ready(a, "L4", S(100), NULL), 0);
    d.backlog_gpu_s = 5000;
    assert_int_equal(advisor_decide(a, &in, S(200), &r), 0);
    assert_int_equal(r.action, ADVISOR_HOLD);
    assert_float_equal(r.cooldown_left_s, 100, 1e-6);
    assert_non_null(strstr(r.reason, "cooling down"));
    assert_int_equal(advisor_decide(a, &in, S(301), &r), 0);
    assert_int_equal(r.action, ADVISOR_UP);
    advisor_destroy(a);
}

/* Cold start: the prior until observed; then the first observation, then an
 * exponentially weighted mean; per class; the threshold follows it. */
static void test_cold_start_learned(void **state)
{
    (void)state;
    struct advisor *a = make();
    assert_float_equal(advisor_cold_start(a, "A100"), 180, 1e-9);
    double s = 0;
    assert_int_equal(advisor_worker_ready(a, "A100", S(50), &s), GPUQ_ENOENT);
    advisor_provisioned(a, "A100", 1, S(1000));
    assert_int_equal(advisor_worker_ready(a, "A100", S(1120), &s), 0);
    assert_float_equal(s, 120, 1e-9);
    assert_float_equal(advisor_cold_start(a, "A100"), 120, 1e-9);
    advisor_provisioned(a, "A100", 1, S(2000));
    assert_int_equal(advisor_worker_ready(a, "A100", S(2240), &s), 0);
    assert_float_equal(advisor_cold_start(a, "A100"), 0.3 * 240 + 0.7 * 120, 1e-9);
    assert_float_equal(advisor_cold_start(a, "L4"), 180, 1e-9);
    struct advisor_class_info ci[4];
    int n = advisor_classes(a, S(3000), ci, 4);
    assert_int_equal(n, 1);
    assert_string_equal(ci[0].cls, "A100");
    assert_int_equal(ci[0].samples, 2);
    assert_float_equal(ci[0].last_s, 240, 1e-9);

    /* 350 GPU-s: under 2 x 180 for L4, over 2 x 156 for the learned A100. */
    struct advisor_gpu g[1];
    gpu(&g[0], "w0", true, 0);
    struct advisor_demand d;
    struct advisor_input in = input(&d, 350, 1.0, g, 1);
    struct advisor_rec r;
    assert_int_equal(advisor_decide(a, &in, S(4000), &r), 0);
    assert_int_equal(r.action, ADVISOR_HOLD);
    in.up_class = "A100";
    assert_int_equal(advisor_decide(a, &in, S(4000), &r), 0);
    assert_int_equal(r.action, ADVISOR_UP);
    assert_float_equal(r.cold_start_s, 156, 1e-9);
    advisor_destroy(a);
}

/* A request never answered stops counting after pending_timeout_s; a failed
 * hook gives its requests back at once. */
static void test_pending_timeout_and_failure(void **state)
{
    (void)state;
    struct advisor *a = make();
    advisor_provisioned(a, "L4", 2, S(0));
    assert_int_equal(advisor_pending(a, S(1200)), 2);
    assert_int_equal(advisor_pending(a, S(1201)), 0);
    advisor_provisioned(a, "L4", 3, S(2000));
    advisor_provision_failed(a, "L4", 2);
    assert_int_equal(advisor_pending(a, S(2001)), 1);
    advisor_destroy(a);
}

/* Two busy GPUs (throughput 2), cold start 180 s: the interactive lane's
 * threshold is k_interactive 0.25 x 180 = 45 GPU-s, the batch lane's
 * k_batch 2 x 180 = 360 GPU-s. */
static struct advisor_rec decide_lanes(double inter, double batch)
{
    struct advisor *a = make();
    struct advisor_gpu g[2];
    gpu(&g[0], "w0", true, 0);
    gpu(&g[1], "w1", true, 0);
    struct advisor_demand d[2];
    memset(d, 0, sizeof d);
    snprintf(d[0].capability, sizeof d[0].capability, "chat");
    d[0].lane = SCHED_LANE_INTERACTIVE;
    d[0].backlog_gpu_s = inter;
    d[0].throughput = 2.0;
    snprintf(d[1].capability, sizeof d[1].capability, "video");
    d[1].lane = SCHED_LANE_BATCH;
    d[1].backlog_gpu_s = batch;
    struct advisor_input in = {.demands = d, .ndemands = 2, .gpus = g, .ngpus = 2,
                               .speed = 1, .up_class = "L4"};
    struct advisor_rec r;
    assert_int_equal(advisor_decide(a, &in, S(1000), &r), 0);
    advisor_destroy(a);
    return r;
}

/* 60 GPU-s of interactive work queued: over its 45 GPU-s threshold, so a GPU
 * is added, though batch is empty and 60 is far under k_batch's 360. */
static void test_interactive_lane_scales_up(void **state)
{
    (void)state;
    struct advisor_rec r = decide_lanes(60, 0);
    assert_int_equal(r.action, ADVISOR_UP);
    assert_int_equal(r.lane, ADVISOR_LANE_INTERACTIVE);
    assert_int_equal(r.count, 1); /* floor(60 / 45): one GPU per 45 GPU-s waiting */
    assert_float_equal(r.threshold_gpu_s, 45, 1e-9);
    assert_float_equal(r.k, 0.25, 1e-9);
    assert_non_null(strstr(r.reason, "for interactive"));
    assert_non_null(strstr(r.reason, "interactive backlog 60.0 GPU-s > k_interactive 0.25"));
    /* The same 60 GPU-s as batch work waits: under 2 cold starts. */
    r = decide_lanes(0, 60);
    assert_int_equal(r.action, ADVISOR_HOLD);
    assert_int_equal(r.lane, ADVISOR_LANE_NONE);
    assert_non_null(strstr(r.reason, "batch backlog 60.0 GPU-s <= k_batch 2"));
}

/* 400 GPU-s of batch work (over 360) adds a GPU while 40 GPU-s of interactive
 * work (under 45) alone does not; the batch lane is named as the driver. */
static void test_batch_lane_scales_up(void **state)
{
    (void)state;
    struct advisor_rec r = decide_lanes(40, 0);
    assert_int_equal(r.action, ADVISOR_HOLD);
    assert_true(r.util_before > 0.8); /* hot, but no lane is over its threshold */
    r = decide_lanes(40, 400);
    assert_int_equal(r.action, ADVISOR_UP);
    assert_int_equal(r.lane, ADVISOR_LANE_BATCH);
    assert_int_equal(r.count, 1); /* floor(40 / 45) + floor(400 / 360) */
    assert_float_equal(r.threshold_gpu_s, 360, 1e-9);
    assert_float_equal(r.backlog_interactive_gpu_s, 40, 1e-9);
    assert_float_equal(r.backlog_batch_gpu_s, 400, 1e-9);
    assert_non_null(strstr(r.reason, "for batch"));
    /* Both over: both named, and each lane's share of GPUs counted. */
    r = decide_lanes(100, 800);
    assert_int_equal(r.action, ADVISOR_UP);
    assert_int_equal(r.lane, ADVISOR_LANE_BOTH);
    assert_int_equal(r.count, 4); /* floor(100 / 45) + floor(800 / 360) */
}

/* No GPU at all and work queued: one GPU, whatever the threshold. */
static void test_empty_fleet_gets_one(void **state)
{
    (void)state;
    struct advisor *a = make();
    struct advisor_demand d;
    struct advisor_input in = input(&d, 5, 0, NULL, 0);
    struct advisor_rec r;
    assert_int_equal(advisor_decide(a, &in, S(0), &r), 0);
    assert_int_equal(r.action, ADVISOR_UP);
    assert_int_equal(r.count, 1);
    assert_true(isinf(r.util_before));
    advisor_destroy(a);
}

static void test_policy_check(void **state)
{
    (void)state;
    struct advisor_policy p;
    char why[128];
    advisor_policy_defaults(&p);
    assert_int_equal(advisor_policy_check(&p, why, sizeof why), 0);
    p.down_utilization = 0.9;
    assert_int_equal(advisor_policy_check(&p, why, sizeof why), GPUQ_EINVAL);
    assert_non_null(strstr(why, "down_utilization"));
    assert_null(advisor_create(&p));
    advisor_policy_defaults(&p);
    p.k_batch = 0;
    assert_int_equal(advisor_policy_check(&p, why, sizeof why), GPUQ_EINVAL);
    assert_non_null(strstr(why, "k_batch:"));
    struct advisor *a = make();
    struct advisor_rec r;
    struct advisor_input in = {.up_class = NULL};
    assert_int_equal(advisor_decide(a, &in, 0, &r), GPUQ_EINVAL);
    advisor_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_scale_up_under_k_cold_starts),
        cmocka_unit_test(test_scale_up_over_threshold),
        cmocka_unit_test(test_max_respected),
        cmocka_unit_test(test_scale_down_idle_only),
        cmocka_unit_test(test_scale_down_keeps_needed_capacity),
        cmocka_unit_test(test_no_flapping),
        cmocka_unit_test(test_cooldown),
        cmocka_unit_test(test_cold_start_learned),
        cmocka_unit_test(test_pending_timeout_and_failure),
        cmocka_unit_test(test_empty_fleet_gets_one),
        cmocka_unit_test(test_interactive_lane_scales_up),
        cmocka_unit_test(test_batch_lane_scales_up),
        cmocka_unit_test(test_policy_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
