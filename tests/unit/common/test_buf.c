/* test_buf.c: the growable buffer keeps its NUL terminator and grows as needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"

static void test_append_and_printf(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b);
    buf_puts(&b, "gpu");
    buf_printf(&b, "%d:%s", 7, "hot");
    assert_string_equal(b.data, "gpu7:hot");
    assert_int_equal(b.len, 8);
    for (int i = 0; i < 1000; i++)
        buf_append(&b, "x", 1);
    assert_int_equal(b.len, 1008);
    assert_int_equal(b.data[b.len], '\0');
    char *s = buf_steal(&b);
    assert_null(b.data);
    assert_int_equal(strlen(s), 1008);
    free(s);
    buf_fini(&b);
}

static void test_reset_keeps_capacity(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b);
    buf_puts(&b, "abcdef");
    size_t cap = b.cap;
    buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    assert_int_equal(b.cap, cap);
    buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_and_printf),
        cmocka_unit_test(test_reset_keeps_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
