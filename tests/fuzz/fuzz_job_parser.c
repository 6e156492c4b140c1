/* fuzz_job_parser.c: libFuzzer harness for the client's job submission parser
 * (api/json.c json_parse_job): any bytes must give a job or a named error,
 * never a crash, a leak or an out-of-bounds access; the error renders as
 * JSON that parses back (a client reads it). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz.h"
#include "api/json.h"
#include "head/config.h"
#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct head_config cfg;
    static int init;
    if (!init) {
        config_defaults(&cfg);
        init = 1;
    }
    struct tenant_rec tenant = {.id = 1, .tier = (size & 1) ? TIER_FREE : TIER_PAID};
    snprintf(tenant.name, sizeof tenant.name, "fuzz");
    struct job_rec job;
    struct api_error err;
    int rc = json_parse_job((const char *)data, size, &cfg, &tenant, NULL, 1, &job, &err);
    if (rc == 0) {
        /* A parsed job must be well-formed; a replay's hash only with a key. */
        if (!job.params_json || !job.capability[0] || !job.model[0] ||
            !job.body_hash[0] != !job.idem_key[0])
            abort();
        /* The stored params are jansson's compact, key-sorted text byte for
         * byte (old idempotency hashes were made from it), whichever writer
         * made them (api/json.c dump_params). */
        json_t *pv = json_loads(job.params_json, 0, NULL);
        char *again = pv ? json_dumps(pv, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        if (!again || strcmp(again, job.params_json))
            abort();
        free(again);
        json_decref(pv);
        struct buf b;
        buf_init(&b);
        json_render_job(&b, &job, tenant.name);
        buf_fini(&b);
        job_rec_free_fields(&job);
    } else {
        if (!err.code || !err.message[0] || err.status < 400 || err.status > 499)
            abort();
        struct buf b;
        buf_init(&b);
        json_render_error(&b, &err);
        json_t *back = json_loadb(b.data, b.len, 0, NULL);
        if (!back)
            abort();
        json_decref(back);
        buf_fini(&b);
    }
    return 0;
}
