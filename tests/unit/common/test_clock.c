/* test_clock.c: a stored wall-clock instant maps to one monotonic instant,
 * whenever it is read back, so jobs stored in one millisecond keep one order
 * key across a restart's read-back (and stay in the queue's append order). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"

static void test_same_wall_ms_same_mono_instant(void **state)
{
    (void)state;
    int64_t wall = clock_wall_ms() - 5000;
    int64_t first = clock_mono_of_wall_ms(wall);
    /* Read back many times while both clocks move on: never a jitter. */
    for (int i = 0; i < 100000; i++)
        assert_true(clock_mono_of_wall_ms(wall) == first);
    assert_true(clock_mono_of_wall_ms(wall + 1) - first == NS_PER_MS);
    assert_true(clock_mono_of_wall_ms(wall - 3) - first == -3 * NS_PER_MS);
}

static void test_past_instant_is_in_the_monotonic_past(void **state)
{
    (void)state;
    int64_t then = clock_mono_of_wall_ms(clock_wall_ms() - 2000);
    int64_t now = clock_mono_ns();
    /* Two seconds before now (less a millisecond of rounding), and not far
     * more even if this test is descheduled between the two reads. */
    assert_true(now - then >= 1999 * NS_PER_MS);
    assert_true(now - then < 10000 * NS_PER_MS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_wall_ms_same_mono_instant),
        cmocka_unit_test(test_past_instant_is_in_the_monotonic_past),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
