/* test_catalog.c: the catalog of served (capability, model) pairs — adds
 * report novelty, lookups by pair and by capability, "" as any model, long
 * names cut like the scheduler's, listing in the order added. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "core/catalog.h"

struct seen {
    char text[256];
    int n;
};

static void collect(const char *cap, const char *model, void *arg)
{
    struct seen *s = arg;
    size_t l = strlen(s->text);
    snprintf(s->text + l, sizeof(s->text) - l, "%s/%s;", cap, model);
    s->n++;
}

static void test_add_serves_list(void **state)
{
    (void)state;
    struct catalog *c = catalog_create();
    assert_false(catalog_serves(c, "image.fast", "image-v2"));
    assert_false(catalog_has_cap(c, "image.fast"));
    assert_true(catalog_add(c, "image.fast", "image-v2"));
    assert_false(catalog_add(c, "image.fast", "image-v2"));
    assert_true(catalog_add(c, "video", "video"));
    assert_true(catalog_add(c, "image.fast", "image-hq"));
    assert_true(catalog_serves(c, "image.fast", "image-v2"));
    assert_true(catalog_serves(c, "image.fast", "image-hq"));
    assert_false(catalog_serves(c, "image.fast", "video"));
    assert_false(catalog_serves(c, "video", "image-v2"));
    assert_true(catalog_has_cap(c, "video"));
    assert_false(catalog_has_cap(c, "audio"));
    /* "" is any model: served when the capability is. */
    assert_true(catalog_serves(c, "video", ""));
    assert_true(catalog_serves(c, "video", NULL));
    assert_false(catalog_serves(c, "audio", ""));
    assert_true(catalog_add(c, "audio", ""));
    assert_false(catalog_add(c, "audio", ""));
    assert_true(catalog_has_cap(c, "audio"));
    assert_false(catalog_serves(c, "audio", "tts"));
    /* The separator cannot be forged by names. */
    assert_false(catalog_serves(c, "image", "fast\x1fimage-v2"));
    assert_false(catalog_add(c, "", "m"));
    struct seen s;
    memset(&s, 0, sizeof(s));
    assert_int_equal(catalog_list(c, collect, &s), 3);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.text, "image.fast/image-v2;video/video;image.fast/image-hq;");
    catalog_destroy(c);
    catalog_destroy(NULL);
}

static void test_long_names_cut(void **state)
{
    (void)state;
    struct catalog *c = catalog_create();
    char cap[200], model[200];
    memset(cap, 'c', sizeof(cap) - 1);
    cap[sizeof(cap) - 1] = '\0';
    memset(model, 'm', sizeof(model) - 1);
    model[sizeof(model) - 1] = '\0';
    assert_true(catalog_add(c, cap, model));
    assert_true(catalog_serves(c, cap, model));
    model[100] = '\0'; /* same first 63 characters */
    assert_true(catalog_serves(c, cap, model));
    for (int i = 0; i < 100; i++) {
        char m[32];
        snprintf(m, sizeof(m), "model-%d", i);
        assert_true(catalog_add(c, "many", m));
    }
    assert_true(catalog_serves(c, "many", "model-99"));
    assert_int_equal(catalog_list(c, NULL, NULL), 101);
    catalog_destroy(c);
}

/* The submit rule and the waiting reason. */
static void test_admit_and_why(void **state)
{
    (void)state;
    struct catalog *c = catalog_create();
    char msg[160];
    /* Nothing known yet: admitted, waiting until a worker registers. */
    assert_int_equal(catalog_admit(c, "image.fast", "video", false, msg, sizeof msg), 0);
    assert_true(catalog_why_unserved(c, "image.fast", "video", msg, sizeof msg));
    assert_string_equal(msg, "no worker has registered yet");
    catalog_add(c, "image.fast", "image-v2");
    assert_int_equal(catalog_admit(c, "image.fast", "image-v2", false, msg, sizeof msg), 0);
    assert_false(catalog_why_unserved(c, "image.fast", "image-v2", msg, sizeof msg));
    assert_int_equal(catalog_admit(c, "image.fast", "video", false, msg, sizeof msg), GPUQ_ENOENT);
    assert_string_equal(msg, "model: no worker serves model video for image.fast");
    assert_int_equal(catalog_admit(c, "image.fast", "video", true, msg, sizeof msg), 0);
    assert_true(catalog_why_unserved(c, "image.fast", "video", msg, sizeof msg));
    assert_string_equal(msg, "no worker serves model video for image.fast");
    catalog_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_serves_list),
        cmocka_unit_test(test_long_names_cut),
        cmocka_unit_test(test_admit_and_why),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
