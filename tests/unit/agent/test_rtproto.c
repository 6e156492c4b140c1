/* test_rtproto.c: runtime messages are parsed strictly (bad lines are errors
 * with a reason, never crashes) and the agent's messages are well-formed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "agent/rtproto.h"
#include "common/err.h"

static int parse(const char *line, struct rt_msg *m, char *err)
{
    return rt_parse(line, strlen(line), m, err, 160);
}

static void test_valid_messages(void **state)
{
    (void)state;
    struct rt_msg m;
    char err[160];
    assert_int_equal(parse("{\"type\":\"hello\",\"protocol\":1,\"runtime\":\"x\"}", &m, err), 0);
    assert_int_equal(m.type, RT_HELLO);
    assert_int_equal(m.protocol, 1);
    assert_string_equal(m.runtime, "x");
    assert_int_equal(parse("{\"type\":\"loaded\",\"id\":\"l1\",\"model\":\"m\",\"vram_mb\":9}", &m,
                           err),
                     0);
    assert_int_equal(m.type, RT_LOADED);
    assert_int_equal(m.vram_mb, 9);
    assert_int_equal(parse("{\"type\":\"progress\",\"id\":\"7.1\",\"progress\":0.5}", &m, err), 0);
    assert_string_equal(m.phase, "generating");
    assert_true(m.progress == 0.5);
    assert_int_equal(parse("{\"type\":\"result\",\"id\":\"7.1\",\"outputs\":[{\"path\":\"/o/7.png\","
                           "\"content_type\":\"image/png\"}],\"run_ms\":12}",
                           &m, err),
                     0);
    assert_string_equal(m.out_path, "/o/7.png");
    assert_string_equal(m.content_type, "image/png");
    assert_int_equal(m.run_ms, 12);
    assert_int_equal(parse("{\"type\":\"error\",\"id\":\"7.1\",\"class\":\"oom\",\"message\":\"m\"}",
                           &m, err),
                     0);
    assert_string_equal(m.cls, "oom");
    assert_int_equal(parse("{\"type\":\"error\",\"id\":\"7.1\",\"class\":\"weird\"}", &m, err), 0);
    assert_string_equal(m.cls, "internal");
    assert_int_equal(parse("{\"type\":\"pong\",\"id\":\"p1\"}", &m, err), 0);
    assert_int_equal(parse("{\"type\":\"log\",\"message\":\"hi\"}", &m, err), 0);
    assert_int_equal(m.type, RT_LOG);
}

static void test_bad_lines(void **state)
{
    (void)state;
    struct rt_msg m;
    char err[160];
    const char *bad[] = {
        "",
        "not json",
        "[1,2]",
        "{}",
        "{\"type\":7}",
        "{\"type\":\"teleport\",\"id\":\"a\"}",
        "{\"type\":\"pong\"}",
        "{\"type\":\"progress\",\"id\":\"a\",\"progress\":1.5}",
        "{\"type\":\"progress\",\"id\":\"a\",\"progress\":\"half\"}",
        "{\"type\":\"progress\",\"id\":\"a\",\"progress\":0.1,\"phase\":\"dancing\"}",
        "{\"type\":\"result\",\"id\":\"a\",\"outputs\":[]}",
        "{\"type\":\"result\",\"id\":\"a\",\"outputs\":[{\"content_type\":\"image/png\"}]}",
        "{\"type\":\"result\",\"id\":\"a\",\"outputs\":[{\"path\":\"/x\",\"content_type\":\"a\\nb\"}]}",
        "{\"type\":\"error\",\"id\":\"a\"}",
        "{\"type\":\"hello\"}",
        "{\"type\":\"pong\",\"id\":\"a\",\"id\":\"b\"}",
        "{\"type\":\"pong\",\"id\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (parse(bad[i], &m, err) != GPUQ_EINVAL)
            fail_msg("accepted bad line %zu: %s", i, bad[i]);
        assert_true(err[0] != '\0');
    }
    /* Embedded NUL in the middle of a line. */
    const char nul[] = "{\"type\":\"pong\",\"id\":\"a\"}\0garbage";
    assert_int_equal(rt_parse(nul, sizeof nul - 1, &m, err, sizeof err), GPUQ_EINVAL);
}

static void test_formatting(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b);
    json_t *params = json_pack("{s:s, s:i}", "prompt", "a \"fox\"\n", "width", 512);
    rt_fmt_run(&b, "9.2", "image-v2", "image.fast", params, "/tmp/o", 0);
    json_decref(params);
    assert_int_equal(b.data[b.len - 1], '\n');
    assert_null(memchr(b.data, '\n', b.len - 1)); /* exactly one line */
    json_t *o = json_loadb(b.data, b.len, 0, NULL);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "type")), "run");
    assert_string_equal(json_string_value(json_object_get(json_object_get(o, "params"), "prompt")),
                        "a \"fox\"\n");
    json_decref(o);
    buf_reset(&b);
    rt_fmt_load(&b, "l1", "m", 100, 50);
    rt_fmt_ping(&b, "p1");
    rt_fmt_shutdown(&b);
    int lines = 0;
    for (size_t i = 0; i < b.len; i++)
        lines += b.data[i] == '\n';
    assert_int_equal(lines, 3);
    buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_messages),
        cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_formatting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
