/* test_token.c: keys are random, well-formed, and hash to the SHA-256 digest. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "common/token.h"

static void test_random_keys_differ_and_are_base62(void **state)
{
    (void)state;
    char a[64], b[64];
    assert_int_equal(token_random("gq_", a, sizeof a), 0);
    assert_int_equal(token_random("gq_", b, sizeof b), 0);
    assert_int_equal(strlen(a), 35);
    assert_memory_equal(a, "gq_", 3);
    assert_string_not_equal(a, b);
    for (const char *p = a + 3; *p; p++)
        assert_non_null(strchr("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", *p));
}

static void test_too_small_buffer_refused(void **state)
{
    (void)state;
    char small[20];
    assert_int_not_equal(token_random("gq_", small, sizeof small), 0);
}

static void test_sha256_known_vector(void **state)
{
    (void)state;
    char hex[TOKEN_HASH_HEX];
    token_hash("abc", hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_hex_lower_every_nibble(void **state)
{
    (void)state;
    const uint8_t in[] = {0x00, 0x0f, 0xf0, 0xff, 0x12, 0x9a, 0xbc, 0xde};
    char out[2 * sizeof in + 1];
    memset(out, 'x', sizeof out);
    hex_lower(in, sizeof in, out);
    assert_string_equal(out, "000ff0ff129abcde");
    char empty[1] = {'x'};
    hex_lower(in, 0, empty);
    assert_string_equal(empty, "");
}

static void test_token_equal(void **state)
{
    (void)state;
    assert_true(token_equal("abc", "abc"));
    assert_false(token_equal("abc", "abd"));
    assert_false(token_equal("abc", "abcd"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_keys_differ_and_are_base62),
        cmocka_unit_test(test_too_small_buffer_refused),
        cmocka_unit_test(test_sha256_known_vector),
        cmocka_unit_test(test_hex_lower_every_nibble),
        cmocka_unit_test(test_token_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
