/* test_vram.c: the VRAM eviction policy — utility before generation, then
 * least recently used; pinned models stay; the seeds' mixed-VRAM case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/err.h"
#include "core/vram.h"

static void test_fits_without_eviction(void **state)
{
    (void)state;
    struct vram_model m[] = {{"image-v2", 22528, MODEL_GENERATION, false, 10}};
    int v[1], nv = -1;
    assert_int_equal(vram_plan_evictions(m, 1, 10240, 1024, v, &nv), 0);
    assert_int_equal(nv, 0);
}

static void test_utility_before_generation_then_lru(void **state)
{
    (void)state;
    /* The generation model is the least recently used, yet utilities go first. */
    struct vram_model m[] = {
        {"image-v2", 22528, MODEL_GENERATION, false, 1},
        {"upscale", 1024, MODEL_UTILITY, false, 50},
        {"rembg", 1536, MODEL_UTILITY, false, 40},
        {"image-hq", 8192, MODEL_GENERATION, false, 30},
    };
    int v[4], nv = 0;
    /* 0 free; need 2 GB: both utilities, older (rembg) first. */
    assert_int_equal(vram_plan_evictions(m, 4, 0, 2048, v, &nv), 0);
    assert_int_equal(nv, 2);
    assert_int_equal(v[0], 2);
    assert_int_equal(v[1], 1);
    /* Need 5 GB: utilities, then the least recently used generation model. */
    assert_int_equal(vram_plan_evictions(m, 4, 0, 5120, v, &nv), 0);
    assert_int_equal(nv, 3);
    assert_int_equal(v[2], 0);
}

static void test_mixed_vram_video_evicts_everything_unpinned(void **state)
{
    (void)state;
    /* Seed 002: image 22 GB + two utilities on a 32 GB GPU; video needs 28 GB. */
    struct vram_model m[] = {
        {"image-v2", 22528, MODEL_GENERATION, false, 100},
        {"upscale", 1024, MODEL_UTILITY, false, 90},
        {"rembg", 1536, MODEL_UTILITY, false, 95},
    };
    int64_t free_mb = 32768 - 22528 - 1024 - 1536;
    int v[3], nv = 0;
    assert_int_equal(vram_plan_evictions(m, 3, free_mb, 28672, v, &nv), 0);
    assert_int_equal(nv, 3);
    assert_int_equal(v[0], 1);
    assert_int_equal(v[1], 2);
    assert_int_equal(v[2], 0);
}

static void test_pinned_stays_and_enospc(void **state)
{
    (void)state;
    struct vram_model m[] = {
        {"image-v2", 22528, MODEL_GENERATION, true, 1},
        {"upscale", 1024, MODEL_UTILITY, false, 2},
    };
    int v[2], nv = 7;
    /* 28 GB cannot fit while the pinned 22 GB model stays. */
    assert_int_equal(vram_plan_evictions(m, 2, 9216, 28672, v, &nv), GPUQ_ENOSPC);
    assert_int_equal(nv, 0);
    /* A small model fits by evicting only the unpinned utility. */
    assert_int_equal(vram_plan_evictions(m, 2, 9216 - 1024, 9000, v, &nv), 0);
    assert_int_equal(nv, 1);
    assert_int_equal(v[0], 1);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    int nv;
    assert_int_equal(vram_plan_evictions(NULL, 1, 0, 1, NULL, &nv), GPUQ_EINVAL);
    assert_int_equal(vram_plan_evictions(NULL, 0, 0, -1, NULL, &nv), GPUQ_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fits_without_eviction),
        cmocka_unit_test(test_utility_before_generation_then_lru),
        cmocka_unit_test(test_mixed_vram_video_evicts_everything_unpinned),
        cmocka_unit_test(test_pinned_stays_and_enospc),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
