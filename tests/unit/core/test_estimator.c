/* test_estimator.c: run-time estimates — prior until data, rolling mean of
 * measurements, scaling with size, fall-back across size buckets and GPU
 * classes; load times. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/estimator.h"

static void test_prior_default_and_scaling(void **state)
{
    (void)state;
    struct estimator *e = estimator_create();
    double ref = estimator_work(1024, 1024, 8, 0);
    assert_float_equal(estimator_run_s(e, 0, -1, ref), ESTIMATOR_DEFAULT_RUN_S, 1e-12);
    estimator_set_prior(e, 0, 2.5, ref);
    assert_float_equal(estimator_run_s(e, 0, 3, ref), 2.5, 1e-9);
    assert_float_equal(estimator_run_s(e, 0, 3, estimator_work(1024, 1024, 16, 0)), 5.0, 1e-9);
    assert_int_equal(estimator_samples(e, 0), 0);
    estimator_destroy(e);
}

static void test_measurements_replace_prior_and_roll(void **state)
{
    (void)state;
    struct estimator *e = estimator_create();
    double ref = estimator_work(1024, 1024, 8, 0);
    estimator_set_prior(e, 0, 2.5, ref);
    for (int i = 0; i < 5; i++)
        estimator_observe_run(e, 0, 1, ref, 3.0);
    assert_float_equal(estimator_run_s(e, 0, 1, ref), 3.0, 1e-9);
    /* Another class falls back to the model's figure over all classes. */
    assert_float_equal(estimator_run_s(e, 0, 2, ref), 3.0, 1e-9);
    /* Another size on the same class scales the class's rate. */
    assert_float_equal(estimator_run_s(e, 0, 1, ref * 4), 12.0, 1e-9);
    /* The mean rolls: after many 2 s runs it is near 2, not the all-time mean. */
    for (int i = 0; i < 200; i++)
        estimator_observe_run(e, 0, 1, ref, 2.0);
    assert_float_equal(estimator_run_s(e, 0, 1, ref), 2.0, 0.01);
    assert_int_equal(estimator_samples(e, 0), 205);
    estimator_destroy(e);
}

static void test_load_times(void **state)
{
    (void)state;
    struct estimator *e = estimator_create();
    assert_float_equal(estimator_load_s(e, 2, 5.0), 5.0, 1e-12);
    estimator_observe_load(e, 2, 4.0);
    estimator_observe_load(e, 2, 6.0);
    assert_float_equal(estimator_load_s(e, 2, 5.0), 5.0, 1e-9);
    estimator_observe_load(e, 2, -1); /* ignored */
    assert_float_equal(estimator_load_s(e, 2, 9.0), 5.0, 1e-9);
    estimator_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prior_default_and_scaling),
        cmocka_unit_test(test_measurements_replace_prior_and_roll),
        cmocka_unit_test(test_load_times),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
