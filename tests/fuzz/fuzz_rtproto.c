/* fuzz_rtproto.c: libFuzzer harness for the runtime protocol lines the agent
 * reads from a runtime's stdout (agent/rtproto.c rt_parse, see
 * docs/protocol-runtime.md). Any bytes must give a message or an error with a
 * reason; a message that parses holds only the values the protocol allows
 * (a result names a file or the length of the bytes after its line). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "agent/rtproto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct rt_msg m;
    char err[256];
    err[0] = '\0';
    int rc = rt_parse((const char *)data, size, &m, err, sizeof err);
    if (rc != 0) {
        CHECK(err[0] != '\0');
        TERMINATED(err);
        /* A refused inline result: either its length frames what follows
         * or it cannot, never both. */
        CHECK(!(m.unframed && m.inline_bytes >= 0));
        return 0;
    }
    CHECK(!m.unframed);
    CHECK(m.inline_bytes >= -1);
    CHECK(m.type >= RT_HELLO && m.type <= RT_LOG);
    TERMINATED(m.id);
    TERMINATED(m.runtime);
    TERMINATED(m.model);
    TERMINATED(m.phase);
    TERMINATED(m.cls);
    TERMINATED(m.message);
    TERMINATED(m.level);
    TERMINATED(m.out_path);
    TERMINATED(m.content_type);
    CHECK(m.vram_mb >= -1 && m.run_ms >= -1 && m.load_ms >= -1);
    switch (m.type) {
    case RT_PROGRESS:
        CHECK(isfinite(m.progress) && m.progress >= 0 && m.progress <= 1);
        CHECK(!strcmp(m.phase, "generating") || !strcmp(m.phase, "loading"));
        break;
    case RT_RESULT:
        CHECK(m.content_type[0] != '\0');
        /* Inline bytes name no file. */
        CHECK(m.inline_bytes < 0 || m.out_path[0] == '\0');
        for (const char *c = m.content_type; *c; c++)
            CHECK((unsigned char)*c >= 0x20 && (unsigned char)*c <= 0x7e);
        break;
    case RT_ERROR: {
        static const char *const ok[] = {"oom", "cuda", "bad_input", "internal", "cancelled"};
        int known = 0;
        for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++)
            known |= !strcmp(m.cls, ok[k]);
        CHECK(known);
        break;
    }
    default:
        break;
    }
    return 0;
}
