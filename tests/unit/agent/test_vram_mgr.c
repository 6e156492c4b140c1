/* test_vram_mgr.c: the agent's VRAM manager plans loads with the core's
 * policy — utility before generation, then LRU; pinned and in-use models stay. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "agent/vram_mgr.h"
#include "common/err.h"

static void test_seed_scenario(void **state)
{
    (void)state;
    /* Seed 002: image (22 GB) + two utilities (2 + 1.5 GB) on a 32 GB card;
     * a 28 GB video model must evict all three. */
    struct vram_mgr m;
    vram_mgr_init(&m, 32000, 0);
    assert_int_equal(vram_mgr_add(&m, "image-v2", 22000, MODEL_GENERATION, false, 300), 0);
    assert_int_equal(vram_mgr_add(&m, "upscale", 2000, MODEL_UTILITY, false, 100), 0);
    assert_int_equal(vram_mgr_add(&m, "bg-remove", 1500, MODEL_UTILITY, false, 200), 0);
    assert_int_equal(vram_mgr_free(&m), 6500);
    int v[AGENT_MAX_MODELS], n;
    assert_int_equal(vram_mgr_plan(&m, 28000, v, &n), 0);
    assert_int_equal(n, 3);
    assert_string_equal(m.e[v[0]].name, "upscale"); /* utilities first, LRU among them */
    assert_string_equal(m.e[v[1]].name, "bg-remove");
    assert_string_equal(m.e[v[2]].name, "image-v2");
    /* A small model fits without evicting. */
    assert_int_equal(vram_mgr_plan(&m, 5000, v, &n), 0);
    assert_int_equal(n, 0);
    /* 8 GB: one utility is enough? 6.5 + 2 = 8.5 → evicts only the LRU utility. */
    assert_int_equal(vram_mgr_plan(&m, 8000, v, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(m.e[v[0]].name, "upscale");
}

static void test_pinned_and_in_use_stay(void **state)
{
    (void)state;
    struct vram_mgr m;
    vram_mgr_init(&m, 32000, 1000);
    vram_mgr_add(&m, "image-v2", 22000, MODEL_GENERATION, true, 1);
    vram_mgr_add(&m, "upscale", 2000, MODEL_UTILITY, false, 2);
    int v[AGENT_MAX_MODELS], n;
    assert_int_equal(vram_mgr_free(&m), 7000);
    assert_int_equal(vram_mgr_plan(&m, 28000, v, &n), GPUQ_ENOSPC); /* pinned stays */
    m.e[1].in_use = 1;
    assert_int_equal(vram_mgr_plan(&m, 8000, v, &n), GPUQ_EAGAIN); /* after the job ends */
    m.e[1].in_use = 0;
    assert_int_equal(vram_mgr_plan(&m, 8000, v, &n), 0);
    assert_int_equal(n, 1);
    vram_mgr_remove(&m, v[0]);
    assert_int_equal(m.n, 1);
    assert_int_equal(vram_mgr_find(&m, "upscale"), -1);
    assert_int_equal(vram_mgr_find(&m, "image-v2"), 0);
    vram_mgr_clear(&m);
    assert_int_equal(vram_mgr_used(&m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_scenario),
        cmocka_unit_test(test_pinned_and_in_use_stay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
