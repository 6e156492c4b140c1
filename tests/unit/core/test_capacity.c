/* test_capacity.c: the capacity budget (the seeds' SLA arithmetic: fleet,
 * interactive reserve, weighted shares, measured speed) and the backlog tally
 * (per capability, lane and tenant; running jobs count what is left). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "core/capacity.h"

static struct capacity_input base(void)
{
    struct capacity_input in;
    memset(&in, 0, sizeof in);
    in.max_gpus = 7;
    in.window_s = 300;
    return in;
}

/* No measurement: nominal speed; 7 GPUs are 420 GPU-s a minute, split 2:1. */
static void test_unmeasured_split_by_weight(void **state)
{
    (void)state;
    struct capacity_input in = base();
    in.ntenants = 2;
    in.weights[0] = 2;
    in.weights[1] = 1;
    struct capacity_plan p;
    assert_int_equal(capacity_plan(&in, &p), 0);
    assert_int_equal(p.measured, 0);
    assert_float_equal(p.speed, 1.0, 1e-12);
    assert_float_equal(p.fleet_per_min, 420.0, 1e-9);
    assert_float_equal(p.batch_per_min, 420.0, 1e-9);
    assert_float_equal(p.tenant_per_min[0], 280.0, 1e-9);
    assert_float_equal(p.tenant_per_min[1], 140.0, 1e-9);
}

/* Two reserved GPUs come off the top; interactive use above the reserve too. */
static void test_reserve_and_interactive_overflow(void **state)
{
    (void)state;
    struct capacity_input in = base();
    in.reserved_gpus = 2;
    in.ntenants = 1;
    in.weights[0] = 1;
    struct capacity_plan p;
    assert_int_equal(capacity_plan(&in, &p), 0);
    assert_float_equal(p.interactive_per_min, 120.0, 1e-9);
    assert_float_equal(p.tenant_per_min[0], 300.0, 1e-9);
    /* Interactive work measurably used 3 GPUs' worth (900 GPU-s in 300 s): more than held. */
    in.interactive_busy_s = 900;
    in.busy_s = 900;
    assert_int_equal(capacity_plan(&in, &p), 0);
    assert_float_equal(p.throughput, 3.0, 1e-9);
    assert_float_equal(p.interactive_per_min, 180.0, 1e-9);
    assert_float_equal(p.tenant_per_min[0], 240.0, 1e-9);
    /* A reserve larger than the fleet leaves batch nothing, never less. */
    in.reserved_gpus = 50;
    assert_int_equal(capacity_plan(&in, &p), 0);
    assert_float_equal(p.batch_per_min, 0.0, 1e-12);
}

/* Measured speed: 600 GPU-s of estimated work took 800 s of GPU time → 0.75. */
static void test_measured_speed_scales_promises(void **state)
{
    (void)state;
    struct capacity_input in = base();
    in.max_gpus = 4;
    in.done_busy_s = 800;
    in.work_s = 600;
    in.busy_s = 900;
    in.ntenants = 3;
    in.weights[0] = in.weights[1] = in.weights[2] = 1;
    struct capacity_plan p;
    assert_int_equal(capacity_plan(&in, &p), 0);
    assert_int_equal(p.measured, 1);
    assert_float_equal(p.speed, 0.75, 1e-12);
    assert_float_equal(p.fleet_per_min, 180.0, 1e-9);
    double sum = p.tenant_per_min[0] + p.tenant_per_min[1] + p.tenant_per_min[2];
    assert_float_equal(sum, p.batch_per_min, 1e-9);
    assert_float_equal(p.tenant_per_min[1], 60.0, 1e-9);
}

static void test_rejects_bad_input(void **state)
{
    (void)state;
    struct capacity_plan p;
    struct capacity_input in = base();
    in.ntenants = 1;
    in.weights[0] = 0;
    assert_int_equal(capacity_plan(&in, &p), GPUQ_EINVAL);
    in = base();
    in.window_s = 0;
    assert_int_equal(capacity_plan(&in, &p), GPUQ_EINVAL);
    in = base();
    in.max_gpus = -1;
    assert_int_equal(capacity_plan(&in, &p), GPUQ_EINVAL);
    in = base();
    in.ntenants = CAPACITY_MAX_TENANTS + 1;
    assert_int_equal(capacity_plan(&in, &p), GPUQ_EINVAL);
    /* An empty fleet promises nothing and is not an error. */
    in = base();
    in.max_gpus = 0;
    in.ntenants = 1;
    in.weights[0] = 1;
    assert_int_equal(capacity_plan(&in, &p), 0);
    assert_float_equal(p.tenant_per_min[0], 0.0, 1e-12);
}

static void test_backlog_tally(void **state)
{
    (void)state;
    struct backlog b;
    backlog_init(&b);
    backlog_add(&b, "video", 1, "acme", 75.0, 0, 0);
    backlog_add(&b, "video", 1, "acme", 75.0, 1, 0.4);     /* 45 left */
    backlog_add(&b, "image.fast", 0, "zeta", 2.5, 0, 0);
    backlog_add(&b, "image.fast", 0, "acme", 2.5, 1, 7.0); /* progress clamped: 0 left */
    assert_float_equal(b.gpu_s, 75 + 45 + 2.5, 1e-9);
    assert_int_equal(b.queued, 2);
    assert_int_equal(b.running, 2);
    assert_int_equal(b.ncap, 2);
    assert_string_equal(b.by_cap[0].key, "video");
    assert_float_equal(b.by_cap[0].gpu_s, 120.0, 1e-9);
    assert_int_equal(b.by_cap[0].queued, 1);
    assert_int_equal(b.by_cap[0].running, 1);
    assert_string_equal(b.by_lane[0].key, "interactive");
    assert_float_equal(b.by_lane[0].gpu_s, 2.5, 1e-9);
    assert_float_equal(b.by_lane[1].gpu_s, 120.0, 1e-9);
    assert_int_equal(b.ntenant, 2);
    assert_string_equal(b.by_tenant[1].key, "zeta");
    assert_float_equal(b.by_tenant[0].gpu_s, 120.0, 1e-9);
}

static void test_backlog_folds_extra_keys(void **state)
{
    (void)state;
    static struct backlog b;
    backlog_init(&b);
    char name[32];
    for (int i = 0; i < BACKLOG_MAX_KEYS + 10; i++) {
        snprintf(name, sizeof name, "t%d", i);
        backlog_add(&b, "video", 1, name, 1.0, 0, 0);
    }
    assert_int_equal(b.ntenant, BACKLOG_MAX_KEYS);
    assert_string_equal(b.by_tenant[BACKLOG_MAX_KEYS - 1].key, "other");
    double sum = 0;
    for (int i = 0; i < b.ntenant; i++)
        sum += b.by_tenant[i].gpu_s;
    assert_float_equal(sum, b.gpu_s, 1e-9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unmeasured_split_by_weight),
        cmocka_unit_test(test_reserve_and_interactive_overflow),
        cmocka_unit_test(test_measured_speed_scales_promises),
        cmocka_unit_test(test_rejects_bad_input),
        cmocka_unit_test(test_backlog_tally),
        cmocka_unit_test(test_backlog_folds_extra_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
