/* test_buf.c: the growable buffer keeps its NUL terminator and grows as needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
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

static void test_printf_across_the_capacity(void **state)
{
    (void)state;
    /* Lines that fit the room left and lines that do not, at every offset
     * around a growth: the text is what snprintf writes, one piece after another. */
    struct buf b;
    buf_init(&b);
    char want[20000] = "";
    size_t wl = 0;
    char big[900];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    for (int i = 0; i < 400; i++) {
        const char *s = i % 37 == 0 ? big : "";
        buf_printf(&b, "%d:%s,", i, s);
        wl += (size_t)snprintf(want + wl, sizeof want - wl, "%d:%s,", i, s);
        assert_int_equal(b.len, wl);
        assert_int_equal(b.data[b.len], '\0');
    }
    assert_string_equal(b.data, want);
    buf_fini(&b);
}

static void check_fixed(double x, int prec)
{
    char want[64], got[FMT_FIXED_MAX + 1];
    snprintf(want, sizeof want, "%.*f", prec, x);
    size_t n = fmt_fixed(got, x, prec);
    assert_int_not_equal(n, 0);
    got[n] = '\0';
    if (strcmp(got, want))
        fail_msg("fmt_fixed(%.17g, %d) = %s, printf %s", x, prec, got, want);
}

static void test_fixed_matches_printf(void **state)
{
    (void)state;
    for (int prec = 0; prec <= 3; prec++) {
        /* Every half step at this precision, and its neighbours: the ties. */
        double half = 0.5 / pow(10, prec);
        for (int k = -4000; k <= 4000; k++) {
            double t = k * half;
            check_fixed(t, prec);
            check_fixed(nextafter(t, INFINITY), prec);
            check_fixed(nextafter(t, -INFINITY), prec);
        }
        /* Halves that are exact in binary (0.125, 2.5, ...) round to even. */
        for (int k = 0; k < 200; k++)
            check_fixed(k / 8.0, prec);
        /* Magnitudes up to the bound, signs, zeros. */
        uint64_t r = 88172645463325252ull;
        for (int i = 0; i < 20000; i++) {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            double m = (double)(r >> 11) / (double)(1ull << 53);
            double x = ldexp(m, (int)(r % 80) - 40);
            check_fixed(x, prec);
            check_fixed(-x, prec);
        }
        check_fixed(0.0, prec);
        check_fixed(-0.0, prec);
        check_fixed(-0.0001, prec);
        check_fixed(999999999999.9995, prec);
    }
    char out[FMT_FIXED_MAX];
    assert_int_equal(fmt_fixed(out, 1e12, 3), 0);
    assert_int_equal(fmt_fixed(out, NAN, 3), 0);
    assert_int_equal(fmt_fixed(out, 1.0, 4), 0);
    /* Where fmt_fixed declines, buf_put_fixed still writes printf's text. */
    struct buf b;
    buf_init(&b);
    buf_put_fixed(&b, 1e15, 3);
    buf_puts(&b, " ");
    buf_put_fixed(&b, INFINITY, 2);
    buf_puts(&b, " ");
    buf_put_fixed(&b, 2.5, 0);
    buf_puts(&b, " ");
    buf_put_fixed(&b, 0.0625, 3);
    assert_string_equal(b.data, "1000000000000000.000 inf 2 0.062");
    buf_fini(&b);
}

static void test_int_matches_printf(void **state)
{
    (void)state;
    const long long v[] = {0, 1, -1, 9, 10, -10, 4096, 1234567890123LL, LLONG_MAX, LLONG_MIN};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char want[32];
        snprintf(want, sizeof want, "%lld", v[i]);
        struct buf b;
        buf_init(&b);
        buf_put_int(&b, v[i]);
        assert_string_equal(b.data, want);
        buf_fini(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_and_printf),
        cmocka_unit_test(test_printf_across_the_capacity),
        cmocka_unit_test(test_fixed_matches_printf),
        cmocka_unit_test(test_int_matches_printf),
        cmocka_unit_test(test_reset_keeps_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
