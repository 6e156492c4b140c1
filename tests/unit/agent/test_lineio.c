/* test_lineio.c: runtime output is split into bounded lines; an overlong line
 * is reported once and skipped, and what follows it is read normally. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/lineio.h"

static void feed(struct line_reader *r, const char *s, size_t n)
{
    while (n > 0) {
        size_t room;
        char *p = line_reader_space(r, &room);
        size_t k = n < room ? n : room;
        memcpy(p, s, k);
        line_reader_added(r, k);
        s += k;
        n -= k;
        if (n > 0) { /* drain before feeding more, as the agent does */
            char *line;
            size_t len;
            while (line_reader_next(r, &line, &len) != LINE_NONE)
                ;
        }
    }
}

static void test_lines_and_partials(void **state)
{
    (void)state;
    struct line_reader r;
    line_reader_init(&r, 64);
    char *line;
    size_t len;
    feed(&r, "one\ntw", 6);
    assert_int_equal(line_reader_next(&r, &line, &len), LINE_OK);
    assert_string_equal(line, "one");
    assert_int_equal(line_reader_next(&r, &line, &len), LINE_NONE);
    feed(&r, "o\r\n\nthree\n", 10);
    assert_int_equal(line_reader_next(&r, &line, &len), LINE_OK);
    assert_string_equal(line, "two");
    assert_int_equal(len, 3);
    assert_int_equal(line_reader_next(&r, &line, &len), LINE_OK);
    assert_int_equal(len, 0);
    assert_int_equal(line_reader_next(&r, &line, &len), LINE_OK);
    assert_string_equal(line, "three");
    assert_int_equal(line_reader_next(&r, &line, &len), LINE_NONE);
    line_reader_fini(&r);
}

static void test_overlong_line_is_skipped(void **state)
{
    (void)state;
    struct line_reader r;
    line_reader_init(&r, 32);
    char *line;
    size_t len;
    char big[100];
    memset(big, 'x', sizeof big);
    size_t room;
    char *p = line_reader_space(&r, &room);
    assert_int_equal(room, 32);
    memcpy(p, big, room);
    line_reader_added(&r, room);
    assert_int_equal(line_reader_next(&r, &line, &len), LINE_TOO_LONG);
    assert_int_equal(line_reader_next(&r, &line, &len), LINE_NONE);
    /* More of the same line, then its end and a good line. */
    p = line_reader_space(&r, &room);
    memcpy(p, big, 20);
    line_reader_added(&r, 20);
    assert_int_equal(line_reader_next(&r, &line, &len), LINE_NONE);
    const char *tail = "xxxx\n{\"ok\":1}\n";
    p = line_reader_space(&r, &room);
    memcpy(p, tail, strlen(tail));
    line_reader_added(&r, strlen(tail));
    assert_int_equal(line_reader_next(&r, &line, &len), LINE_OK);
    assert_string_equal(line, "{\"ok\":1}");
    assert_int_equal(line_reader_next(&r, &line, &len), LINE_NONE);
    line_reader_fini(&r);
}

static void test_many_small_reads(void **state)
{
    (void)state;
    struct line_reader r;
    line_reader_init(&r, 16);
    char *line;
    size_t len;
    int lines = 0;
    for (int i = 0; i < 1000; i++) {
        size_t room;
        char *p = line_reader_space(&r, &room);
        assert_true(room > 0);
        const char *chunk = (i % 3 == 2) ? "\n" : "ab";
        memcpy(p, chunk, strlen(chunk));
        line_reader_added(&r, strlen(chunk));
        enum line_result res;
        while ((res = line_reader_next(&r, &line, &len)) != LINE_NONE) {
            assert_int_equal(res, LINE_OK);
            assert_string_equal(line, "abab");
            lines++;
        }
    }
    assert_int_equal(lines, 333);
    line_reader_fini(&r);
}

/* A pipe whose writer wrote `len` bytes of `s` and closed: reads end there. */
static int closed_pipe(const char *s, size_t len)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    assert_int_equal(write(fds[1], s, len), (ssize_t)len);
    close(fds[1]);
    return fds[0];
}

static void test_read_exact_takes_the_whole_output_or_nothing(void **state)
{
    (void)state;
    int fd = closed_pipe("\x89PNG\0rest", 9);
    char *p = read_exact(fd, 9);
    close(fd);
    assert_non_null(p);
    assert_memory_equal(p, "\x89PNG\0rest", 9);
    assert_int_equal(p[9], '\0');
    free(p);

    fd = closed_pipe("short", 5); /* the file ends before the size it was said to have */
    assert_null(read_exact(fd, 6));
    close(fd);

    fd = closed_pipe("", 0);
    p = read_exact(fd, 0);
    close(fd);
    assert_non_null(p);
    assert_int_equal(p[0], '\0');
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_and_partials),
        cmocka_unit_test(test_overlong_line_is_skipped),
        cmocka_unit_test(test_many_small_reads),
        cmocka_unit_test(test_read_exact_takes_the_whole_output_or_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
