/* fuzz.h: what every libFuzzer harness here shares — the entry point's
 * prototype and the checks a harness makes beyond "no crash" (a failed check
 * aborts, which libFuzzer reports with the input). */
#ifndef GPUQ_TESTS_FUZZ_H
#define GPUQ_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond))                                                                           \
            abort();                                                                           \
    } while (0)

/* A fixed-size string field is NUL-terminated inside its array. */
#define TERMINATED(arr) CHECK(memchr((arr), '\0', sizeof(arr)) != NULL)

#endif
