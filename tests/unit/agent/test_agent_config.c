/* test_agent_config.c: the agent's settings — defaults, the INI file, errors
 * that name the line, and the per-GPU view (what fits beside pinned models). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "agent/config.h"
#include "common/err.h"

static bool has_cap(const struct agent_worker_view *v, const char *cap)
{
    for (int i = 0; i < v->ncaps; i++)
        if (strcmp(v->caps[i], cap) == 0)
            return true;
    return false;
}

static void test_defaults(void **state)
{
    (void)state;
    struct agent_config c;
    agent_config_defaults(&c, "/opt/gpuq/bin/gpuq-agent");
    assert_string_equal(c.runtime, "/opt/gpuq/bin/gpuq-sim-runtime");
    assert_int_equal(c.concurrency, 1);
    assert_int_equal(c.ping_timeout_ms, 10000);
    assert_true(c.warmup);
    assert_non_null(agent_config_model(&c, "image-v2"));
    struct agent_worker_view v;
    agent_config_view(&c, 0, 32607, &v);
    /* image-v2 pinned (22 GB): image-hq (24 GB) and video (28 GB) cannot fit beside it. */
    assert_true(has_cap(&v, "image.fast"));
    assert_true(has_cap(&v, "upscale"));
    assert_false(has_cap(&v, "image.hq"));
    assert_false(has_cap(&v, "video"));
    assert_true(v.pinned[0]);
}

static void test_file(void **state)
{
    (void)state;
    struct agent_config c;
    agent_config_defaults(&c, "gpuq-agent");
    char err[256];
    const char *text = "[agent]\n"
                       "runtime = python3 runtimes/examples/diffusers_runtime.py\n"
                       "concurrency = 2\n"
                       "ping_timeout_ms = 1500\n"
                       "warmup = false\n"
                       "[sim]\n"
                       "heat_c = 50\n"
                       "[model.video]\n"
                       "vram_mb = 28000\n"
                       "load_ms = 9000\n"
                       "capabilities = video\n"
                       "[model.upscale]\n"
                       "vram_mb = 1500\n"
                       "class = utility\n"
                       "capabilities = upscale, image.upscale\n"
                       "[gpu.1]\n"
                       "pinned = video\n"
                       "concurrency = 1\n"
                       "capabilities = video\n"
                       "name = Hot card\n"
                       "ambient_c = 45\n";
    int rc = agent_config_parse_string(&c, text, err, sizeof err);
    if (rc)
        fail_msg("%s", err);
    assert_int_equal(c.nmodels, 2); /* the built-in table was replaced */
    assert_int_equal(c.concurrency, 2);
    assert_false(c.warmup);
    const struct agent_model *u = agent_config_model(&c, "upscale");
    assert_int_equal(u->cls, MODEL_UTILITY);
    assert_int_equal(u->ncaps, 2);
    struct agent_worker_view v0, v1;
    agent_config_view(&c, 0, 32607, &v0);
    agent_config_view(&c, 1, 32607, &v1);
    assert_int_equal(v0.concurrency, 2);
    assert_true(has_cap(&v0, "video") && has_cap(&v0, "image.upscale"));
    assert_int_equal(v1.concurrency, 1);
    assert_true(has_cap(&v1, "video"));
    assert_false(has_cap(&v1, "upscale"));
    struct gpu_sim_shape s0, s1;
    agent_config_sim_shape(&c, 0, &s0);
    agent_config_sim_shape(&c, 1, &s1);
    assert_true(s0.heat_c == 50 && s1.heat_c == 50);
    assert_true(s1.ambient_c == 45);
    assert_string_equal(s1.name, "Hot card");
}

static void test_errors_name_the_line(void **state)
{
    (void)state;
    const char *bad[] = {
        "[agent]\nconcurrency = 0\n",
        "[agent]\nno_such_key = 1\n",
        "[agent]\nping_timeout_ms = soon\n",
        "[model.x]\nclass = huge\n",
        "[gpu.99]\npinned = image-v2\n",
        "[gpu.0]\npinned = nope\n",
        "[weird]\na = b\n",
        "[agent]\nrestart_min_ms = 500\nrestart_max_ms = 100\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct agent_config c;
        agent_config_defaults(&c, "gpuq-agent");
        char err[256] = "";
        if (agent_config_parse_string(&c, bad[i], err, sizeof err) != GPUQ_EINVAL)
            fail_msg("accepted bad config %zu", i);
        assert_true(err[0] != '\0');
    }
    struct agent_config c;
    agent_config_defaults(&c, "gpuq-agent");
    char err[256] = "";
    assert_int_equal(agent_config_parse_string(&c, "[agent]\n\nconcurrency = 0\n", err, sizeof err),
                     GPUQ_EINVAL);
    assert_non_null(strstr(err, ":3:"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_errors_name_the_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
