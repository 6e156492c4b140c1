/* test_nvml.c: NVML through dlopen — the fake libnvidia-ml.so.1 from
 * tests/fakes (path in $FAKE_NVML_LIB) is read like the real one; a missing
 * library or a failing nvmlInit is an error, not a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "gpu/gpu.h"

static void test_reads_fake_values(void **state)
{
    (void)state;
    setenv("FAKE_NVML_GPUS", "3", 1);
    setenv("FAKE_NVML_TEMP", "70", 1);
    setenv("FAKE_NVML_THROTTLE", "0x24", 1);
    struct gpu_source s;
    char err[256];
    int rc = gpu_nvml_open(getenv("FAKE_NVML_LIB"), &s, err, sizeof err);
    if (rc != 0)
        fail_msg("%s", err);
    assert_int_equal(gpu_count(&s), 3);
    struct gpu_info info;
    assert_int_equal(gpu_info(&s, 2, &info), 0);
    assert_string_equal(info.name, "Fake NVML GPU");
    assert_string_equal(info.uuid, "GPU-fake-0002");
    assert_int_equal(info.vram_total_mb, 24576);
    struct gpu_telemetry t;
    assert_int_equal(gpu_read(&s, 2, NULL, 0, &t), 0);
    assert_true(t.temp_c == 72);
    assert_int_equal(t.vram_used_mb, 1234);
    assert_int_equal(t.vram_free_mb, 24576 - 1234);
    assert_int_equal(t.util_pct, 42);
    assert_true(t.power_w > 123.45 && t.power_w < 123.46);
    assert_int_equal(t.sm_clock_mhz, 1965);
    assert_true(t.throttle == (GPU_THR_SW_THERMAL | GPU_THR_SW_POWER));
    assert_int_equal(t.health, GPU_HEALTH_OK);
    gpu_close(&s);
}

static void test_missing_library(void **state)
{
    (void)state;
    struct gpu_source s;
    char err[256] = "";
    assert_int_equal(gpu_nvml_open("/nonexistent/libnvidia-ml.so.1", &s, err, sizeof err),
                     GPUQ_ENOENT);
    assert_non_null(strstr(err, "dlopen"));
}

static void test_init_failure(void **state)
{
    (void)state;
    setenv("FAKE_NVML_FAIL_INIT", "1", 1);
    struct gpu_source s;
    char err[256] = "";
    assert_int_equal(gpu_nvml_open(getenv("FAKE_NVML_LIB"), &s, err, sizeof err), GPUQ_EIO);
    unsetenv("FAKE_NVML_FAIL_INIT");
    setenv("FAKE_NVML_GPUS", "0", 1);
    assert_int_equal(gpu_nvml_open(getenv("FAKE_NVML_LIB"), &s, err, sizeof err), GPUQ_ENOENT);
    setenv("FAKE_NVML_GPUS", "2", 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_fake_values),
        cmocka_unit_test(test_missing_library),
        cmocka_unit_test(test_init_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
