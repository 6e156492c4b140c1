/* test_gpu_sim.c: the simulated GPU's thermal model heats with load, throttles
 * at its threshold, cools when idle, and reports what the agent accounts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/err.h"
#include "gpu/gpu.h"

static void open_one(struct gpu_source *s, double tau_s)
{
    struct gpu_sim_shape sh;
    gpu_sim_shape_default(&sh);
    sh.tau_s = tau_s;
    sh.heat_c = 55; /* a packed card: 90 °C at full load, past its 83 °C throttle */
    assert_int_equal(gpu_sim_open(&sh, 1, s), 0);
}

static void test_heats_throttles_and_cools(void **state)
{
    (void)state;
    struct gpu_source s;
    open_one(&s, 10);
    struct gpu_load busy = {.busy = 1.0, .vram_used_mb = 22000};
    struct gpu_load idle = {.busy = 0, .vram_used_mb = 22000};
    struct gpu_telemetry t;
    int64_t now = NS_PER_S;
    assert_int_equal(gpu_read(&s, 0, &busy, now, &t), 0);
    assert_true(t.temp_c >= 34.9 && t.temp_c <= 35.1); /* starts at ambient */
    assert_false(gpu_throttling(t.throttle));
    double last = t.temp_c;
    bool throttled = false;
    for (int i = 1; i <= 120; i++) { /* two minutes at full load, 1 s steps */
        assert_int_equal(gpu_read(&s, 0, &busy, now + i * NS_PER_S, &t), 0);
        assert_true(t.temp_c >= last - 1e-9); /* never cools under load */
        last = t.temp_c;
        if (t.temp_c >= 83) {
            assert_true(t.throttle & GPU_THR_SW_THERMAL);
            assert_true(t.sm_clock_mhz < 2407);
            throttled = true;
        }
    }
    assert_true(throttled);
    assert_true(t.temp_c <= 90.0 + 1e-6); /* ambient 35 + heat 55 at most */
    assert_int_equal(t.util_pct, 100);
    assert_int_equal(t.vram_used_mb, 22000);
    assert_int_equal(t.vram_free_mb, 32607 - 22000);
    now += 120 * NS_PER_S;
    for (int i = 1; i <= 120; i++)
        gpu_read(&s, 0, &idle, now + i * NS_PER_S, &t);
    assert_true(t.temp_c < 37);
    assert_true(t.throttle & GPU_THR_IDLE);
    assert_false(gpu_throttling(t.throttle));
    assert_int_equal(t.util_pct, 0);
    gpu_close(&s);
}

static void test_info_and_bounds(void **state)
{
    (void)state;
    struct gpu_sim_shape sh[2];
    gpu_sim_shape_default(&sh[0]);
    gpu_sim_shape_default(&sh[1]);
    sh[1].vram_mb = 24576;
    struct gpu_source s;
    assert_int_equal(gpu_sim_open(sh, 2, &s), 0);
    assert_int_equal(gpu_count(&s), 2);
    struct gpu_info a, b;
    assert_int_equal(gpu_info(&s, 0, &a), 0);
    assert_int_equal(gpu_info(&s, 1, &b), 0);
    assert_int_equal(b.vram_total_mb, 24576);
    assert_string_not_equal(a.uuid, b.uuid);
    assert_int_equal(gpu_info(&s, 2, &a), GPUQ_ENOENT);
    struct gpu_telemetry t;
    struct gpu_load over = {.busy = 7, .vram_used_mb = 1 << 30};
    assert_int_equal(gpu_read(&s, 1, &over, NS_PER_S, &t), 0);
    assert_int_equal(t.util_pct, 100);
    assert_int_equal(t.vram_free_mb, 0);
    gpu_close(&s);
    assert_int_equal(gpu_sim_open(sh, 0, &s), GPUQ_EINVAL);
}

static void test_throttle_names(void **state)
{
    (void)state;
    const char *names[16];
    int n = gpu_throttle_names(GPU_THR_SW_THERMAL | GPU_THR_SW_POWER, names, 16);
    assert_int_equal(n, 2);
    assert_string_equal(names[0], "sw_power_cap");
    assert_string_equal(names[1], "sw_thermal");
    assert_int_equal(gpu_throttle_names(0, names, 16), 0);
    assert_int_equal(gpu_throttle_names(0x1ff, names, 3), 3);
    assert_string_equal(gpu_health_name(GPU_HEALTH_DEGRADED), "degraded");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heats_throttles_and_cools),
        cmocka_unit_test(test_info_and_bounds),
        cmocka_unit_test(test_throttle_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
