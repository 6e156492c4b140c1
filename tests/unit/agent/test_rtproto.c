/* test_rtproto.c: runtime messages are parsed strictly (bad lines are errors
 * with a reason, never crashes) and the agent's messages are well-formed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/lineio.h"
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

/* An inline result: its length parsed from outputs[0].bytes; a length that
 * cannot frame what follows is an error that says so (unframed), one that
 * can but comes with another bad field keeps its length (so the bytes can be
 * skipped). */
static void test_inline_result_headers(void **state)
{
    (void)state;
    struct rt_msg m;
    char err[160];
    assert_int_equal(parse("{\"type\":\"result\",\"id\":\"7.1\",\"outputs\":[{\"bytes\":5000,"
                           "\"content_type\":\"image/png\"}],\"run_ms\":3}",
                           &m, err),
                     0);
    assert_int_equal(m.inline_bytes, 5000);
    assert_string_equal(m.out_path, "");
    assert_string_equal(m.content_type, "image/png");
    assert_int_equal(parse("{\"type\":\"result\",\"id\":\"7.1\",\"outputs\":[{\"path\":\"/o/7\"}]}",
                           &m, err),
                     0);
    assert_int_equal(m.inline_bytes, -1); /* a file */
    const char *unframed[] = {
        "{\"type\":\"result\",\"id\":\"a\",\"outputs\":[{\"bytes\":\"lots\"}]}",
        "{\"type\":\"result\",\"id\":\"a\",\"outputs\":[{\"bytes\":-1}]}",
        "{\"type\":\"result\",\"id\":\"a\",\"outputs\":[{\"bytes\":1.5}]}",
        "{\"type\":\"result\",\"id\":\"a\",\"outputs\":[{\"bytes\":4,\"path\":\"/o/a\"}]}",
    };
    for (size_t i = 0; i < sizeof unframed / sizeof unframed[0]; i++) {
        err[0] = '\0';
        assert_int_equal(parse(unframed[i], &m, err), GPUQ_EINVAL);
        assert_true(m.unframed);
        assert_int_equal(m.inline_bytes, -1);
        assert_non_null(strstr(err, "outputs[0]"));
    }
    assert_int_equal(parse("{\"type\":\"result\",\"id\":\"a\",\"outputs\":[{\"bytes\":4,"
                           "\"content_type\":\"a\\nb\"}]}",
                           &m, err),
                     GPUQ_EINVAL);
    assert_false(m.unframed);
    assert_int_equal(m.inline_bytes, 4);
}

/* Feeds s to the reader as if read() returned it. */
static void feed(struct line_reader *lr, const char *s, size_t n)
{
    size_t room;
    char *p = line_reader_space(lr, &room);
    assert_true(room >= n);
    memcpy(p, s, n);
    line_reader_added(lr, n);
}

/* The bytes after an inline result's line, newlines and all, arriving in
 * pieces, come out exactly; the next line after them is a line again. */
static void test_inline_frame_reads_exact_bytes(void **state)
{
    (void)state;
    struct line_reader lr;
    line_reader_init(&lr, 1024);
    struct rt_frame f;
    memset(&f, 0, sizeof f);
    const char head[] = "{\"type\":\"result\",\"id\":\"3.1\",\"outputs\":[{\"bytes\":9}]}\n";
    const char body[] = "ab\ncd\n\0\nz"; /* 9 bytes */
    feed(&lr, head, sizeof head - 1);
    feed(&lr, body, 4);
    char *line, err[160];
    size_t len;
    assert_int_equal(line_reader_next(&lr, &line, &len), LINE_OK);
    struct rt_msg m;
    assert_int_equal(rt_parse(line, len, &m, err, sizeof err), 0);
    assert_int_equal(m.inline_bytes, 9);
    rt_frame_start(&f, &m, 0);
    assert_int_equal(rt_frame_fill(&f, &lr), 0); /* 4 of 9 */
    feed(&lr, body + 4, 5);
    const char after[] = "{\"type\":\"pong\",\"id\":\"p1\"}\n";
    feed(&lr, after, sizeof after - 1);
    assert_int_equal(rt_frame_fill(&f, &lr), 1);
    char *data = rt_frame_take(&f, &len);
    assert_int_equal(len, 9);
    assert_memory_equal(data, body, 9);
    assert_false(f.active);
    free(data);
    assert_int_equal(line_reader_next(&lr, &line, &len), LINE_OK);
    assert_string_equal(line, "{\"type\":\"pong\",\"id\":\"p1\"}");
    /* Skipped frames keep nothing and still consume their bytes. */
    feed(&lr, head, sizeof head - 1);
    feed(&lr, body, 9);
    feed(&lr, after, sizeof after - 1);
    assert_int_equal(line_reader_next(&lr, &line, &len), LINE_OK);
    assert_int_equal(rt_parse(line, len, &m, err, sizeof err), 0);
    rt_frame_start(&f, &m, 1);
    assert_int_equal(rt_frame_fill(&f, &lr), 1);
    assert_null(rt_frame_take(&f, &len));
    assert_int_equal(line_reader_next(&lr, &line, &len), LINE_OK);
    assert_string_equal(line, "{\"type\":\"pong\",\"id\":\"p1\"}");
    rt_frame_reset(&f);
    line_reader_fini(&lr);
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
        cmocka_unit_test(test_inline_result_headers),
        cmocka_unit_test(test_inline_frame_reads_exact_bytes),
        cmocka_unit_test(test_formatting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
