/* test_hashmap_heap.c: the common hash map (put/get/del through growth and
 * tombstones, long keys) and binary heap (pops in order). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>

#include "common/hashmap.h"
#include "common/heap.h"

static void test_hashmap(void **state)
{
    (void)state;
    struct hashmap m;
    hashmap_init(&m);
    static int vals[5000];
    for (int i = 0; i < 5000; i++)
        assert_null(hashmap_put_u64(&m, (uint64_t)i * 7919, &vals[i]));
    for (int i = 0; i < 5000; i += 2)
        assert_ptr_equal(hashmap_del_u64(&m, (uint64_t)i * 7919), &vals[i]);
    for (int i = 0; i < 5000; i++)
        assert_ptr_equal(hashmap_get_u64(&m, (uint64_t)i * 7919), i % 2 ? &vals[i] : NULL);
    assert_int_equal(m.count, 2500);
    char key[64];
    snprintf(key, sizeof(key), "a-model-name-longer-than-sixteen-bytes");
    assert_null(hashmap_put_str(&m, key, &vals[0]));
    assert_ptr_equal(hashmap_put_str(&m, key, &vals[1]), &vals[0]);
    assert_ptr_equal(hashmap_get_str(&m, key), &vals[1]);
    size_t pos = 0, n = 0;
    while (hashmap_next(&m, &pos, NULL, NULL, NULL))
        n++;
    assert_int_equal(n, 2501);
    hashmap_fini(&m);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static void test_heap(void **state)
{
    (void)state;
    struct heap h;
    heap_init(&h, sizeof(int), cmp_int);
    for (int i = 0; i < 1000; i++) {
        int v = (i * 7333) % 1000;
        heap_push(&h, &v);
    }
    assert_int_equal(*(const int *)heap_peek(&h), 0);
    int prev = -1, v;
    for (int i = 0; i < 1000; i++) {
        assert_true(heap_pop(&h, &v));
        assert_true(v >= prev);
        prev = v;
    }
    assert_false(heap_pop(&h, &v));
    heap_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hashmap),
        cmocka_unit_test(test_heap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
