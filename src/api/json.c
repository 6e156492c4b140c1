/* json.c: request parsing and validation (jansson) and response rendering for
 * the API (see json.h). Parsers refuse unknown fields, wrong types and values
 * out of bounds, naming the field; they write nothing on error. */
#include "api/json.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/token.h"
#include "core/admit.h"

#define PROMPT_MAX 4000
#define IDEM_MAX 128

void api_error_set(struct api_error *e, int status, const char *code, const char *field,
                   const char *fmt, ...)
{
    e->status = status;
    e->code = code;
    snprintf(e->field, sizeof e->field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

size_t json_utf8_seq(const unsigned char *p, size_t n)
{
    if (n == 0)
        return 0;
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* the bounds of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong below */
        else if (c == 0xed)
            hi = 0x9f; /* UTF-16 surrogates above */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong below */
        else if (c == 0xf4)
            hi = 0x8f; /* beyond U+10FFFF above */
    } else {
        return 0; /* a continuation byte, an overlong lead (C0, C1) or F5..FF */
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}

bool json_job_id(const char *s, uint64_t *out)
{
    size_t n = strlen(s);
    bool digits = n > 0 && n <= 20 && s[0] != '0';
    for (size_t i = 0; digits && i < n; i++)
        digits = s[i] >= '0' && s[i] <= '9';
    if (!digits)
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno != 0)
        return false;
    *out = v;
    return true;
}

bool json_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    while (n) {
        size_t k = json_utf8_seq(p, n);
        if (!k)
            return false;
        p += k;
        n -= k;
    }
    return true;
}

/* Escapes what JSON requires; a byte that does not begin a valid UTF-8
 * sequence (a raw echo, a cut made by a bounded copy) becomes U+FFFD, so the
 * output is always valid JSON text. */
void json_put_string(struct buf *out, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    buf_append(out, "\"", 1);
    while (n) {
        /* A run of printable ASCII needing no escape goes in with one append:
         * names, ids and reasons are nearly all such text. */
        size_t run = 0;
        while (run < n && p[run] >= 0x20 && p[run] < 0x7f && p[run] != '"' && p[run] != '\\')
            run++;
        if (run) {
            buf_append(out, p, run);
            p += run;
            n -= run;
            continue;
        }
        size_t k = json_utf8_seq(p, n);
        if (!k) {
            buf_puts(out, "\\ufffd");
            k = 1;
        } else if (k > 1) {
            buf_append(out, p, k);
        } else {
            switch (*p) {
            case '"': buf_puts(out, "\\\""); break;
            case '\\': buf_puts(out, "\\\\"); break;
            case '\n': buf_puts(out, "\\n"); break;
            case '\r': buf_puts(out, "\\r"); break;
            case '\t': buf_puts(out, "\\t"); break;
            default:
                if (*p < 0x20 || *p == 0x7f)
                    buf_printf(out, "\\u%04x", *p);
                else
                    buf_append(out, p, 1);
            }
        }
        p += k;
        n -= k;
    }
    buf_append(out, "\"", 1);
}

void json_render_error(struct buf *out, const struct api_error *e)
{
    buf_puts(out, "{\"error\":{\"code\":");
    json_put_string(out, e->code ? e->code : "internal");
    buf_puts(out, ",\"message\":");
    json_put_string(out, e->message);
    buf_puts(out, ",\"field\":");
    if (e->field[0])
        json_put_string(out, e->field);
    else
        buf_puts(out, "null");
    buf_puts(out, "}}");
}

/* The parser holds integers as int64 and reals as doubles; a number beyond
 * them is valid JSON all the same and must be refused as a value out of
 * range, naming its field. After jansson reports such a number, a copy of the
 * body has every one of them (outside strings) replaced, in place and padded
 * with spaces, by the nearest number that parses and that is beyond every
 * bound the API accepts (INT64_MAX, INT64_MIN, ±1e308); that copy is parsed
 * again, so validation names the field. The structure is untouched, so a body
 * that is otherwise invalid stays invalid. */
static bool number_token_char(char c)
{
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

static const char *overflow_stand_in(const char *tok, size_t n)
{
    char *copy = xmalloc(n + 1);
    memcpy(copy, tok, n);
    copy[n] = '\0';
    bool real = strpbrk(copy, ".eE") != NULL;
    bool neg = copy[0] == '-';
    char *end;
    errno = 0;
    const char *with = NULL;
    if (real) {
        double d = strtod(copy, &end);
        if (*end == '\0' && errno == ERANGE && isinf(d))
            with = neg ? "-1e308" : "1e308";
    } else {
        (void)strtoll(copy, &end, 10);
        if (*end == '\0' && errno == ERANGE)
            with = neg ? "-9223372036854775808" : "9223372036854775807";
    }
    free(copy);
    return with && strlen(with) <= n ? with : NULL;
}

static char *clamp_overflows(const char *body, size_t len)
{
    char *s = xmalloc(len ? len : 1);
    memcpy(s, body, len);
    size_t i = 0;
    while (i < len) {
        if (s[i] == '"') { /* skip the string, escapes included */
            for (i++; i < len && s[i] != '"'; i++)
                if (s[i] == '\\')
                    i++;
            i++;
        } else if (s[i] == '-' || (s[i] >= '0' && s[i] <= '9')) {
            size_t j = i + 1;
            while (j < len && number_token_char(s[j]))
                j++;
            const char *with = overflow_stand_in(s + i, j - i);
            if (with) {
                size_t w = strlen(with);
                memcpy(s + i, with, w);
                memset(s + i + w, ' ', j - i - w);
            }
            i = j;
        } else {
            i++;
        }
    }
    return s;
}

/* Parses body as one JSON object; on error fills err. Caller decrefs. */
static json_t *parse_object(const char *body, size_t len, struct api_error *err)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root && json_error_code(&je) == json_error_numeric_overflow) {
        char *clamped = clamp_overflows(body, len);
        root = json_loadb(clamped, len, JSON_REJECT_DUPLICATES, &je);
        free(clamped);
    }
    if (!root) {
        api_error_set(err, 400, "invalid_json", "body", "malformed JSON at line %d column %d: %s",
                      je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        api_error_set(err, 400, "invalid_json", "body", "the body must be a JSON object");
        return NULL;
    }
    return root;
}

/* Refuses keys of obj not in allowed (NULL-terminated). prefix names nested fields. */
static int check_keys(json_t *obj, const char *const *allowed, const char *prefix,
                      struct api_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (!strcmp(key, *a))
                ok = 1;
        if (!ok) {
            char field[64];
            snprintf(field, sizeof field, "%s%.50s", prefix, key);
            api_error_set(err, 400, "unknown_field", field, "%s: unknown field", field);
            return GPUQ_EINVAL;
        }
    }
    return 0;
}

bool json_is_name(const char *s, size_t max, bool upper_ok)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!(islower(c) || isdigit(c) || c == '.' || c == '_' || c == '-' ||
              (upper_ok && isupper(c))))
            return false;
    }
    return true;
}

/* Reads an optional string field; returns 1 if present, 0 if absent, negative on error. */
static int get_string(json_t *obj, const char *key, const char *field, size_t max,
                      const char **out, struct api_error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v)) {
        api_error_set(err, 400, "invalid_field", field, "%s: must be a string", field);
        return GPUQ_EINVAL;
    }
    if (json_string_length(v) > max) {
        api_error_set(err, 400, "invalid_field", field, "%s: longer than %zu bytes", field, max);
        return GPUQ_EINVAL;
    }
    if (strlen(json_string_value(v)) != json_string_length(v)) {
        api_error_set(err, 400, "invalid_field", field, "%s: contains a NUL character", field);
        return GPUQ_EINVAL;
    }
    *out = json_string_value(v);
    return 1;
}

/* Reads an optional integer field within [lo, hi]. */
static int get_int(json_t *obj, const char *key, const char *field, long long lo, long long hi,
                   long long *out, struct api_error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v)) {
        api_error_set(err, 400, "invalid_field", field, "%s: must be an integer in %lld..%lld",
                      field, lo, hi);
        return GPUQ_EINVAL;
    }
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        api_error_set(err, 400, "invalid_field", field, "%s: must be in %lld..%lld", field, lo,
                      hi);
        return GPUQ_EINVAL;
    }
    *out = x;
    return 1;
}

static int get_number(json_t *obj, const char *key, const char *field, double lo, double hi,
                      double *out, struct api_error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v)) {
        api_error_set(err, 400, "invalid_field", field, "%s: must be a number", field);
        return GPUQ_EINVAL;
    }
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi) {
        api_error_set(err, 400, "invalid_field", field, "%s: must be in %g..%g", field, lo, hi);
        return GPUQ_EINVAL;
    }
    *out = x;
    return 1;
}

static const char *const job_keys[] = {"capability",      "model",    "params",    "lane",
                                       "priority",        "deadline", "timeout_s",
                                       "idempotency_key", NULL};
static const char *const param_keys[] = {"prompt", "negative_prompt", "width", "height",
                                         "steps",  "frames",          "seed",  "guidance",
                                         "fault",  "sim_ms",          "extra",
                                         "inputs", NULL};
static const char *const faults[] = {"oom", "crash", "hang", "solid", "bad_input", "cuda", NULL};

/* The depth of v: 0 for a scalar, 1 + its deepest member for an array or
 * object (the parser bounds nesting, so the recursion is bounded too). */
static int json_depth(json_t *v)
{
    int d = 0;
    size_t i;
    const char *k;
    json_t *m;
    if (json_is_object(v)) {
        json_object_foreach(v, k, m) {
            int md = json_depth(m);
            d = md > d ? md : d;
        }
        return d + 1;
    }
    if (json_is_array(v)) {
        json_array_foreach(v, i, m) {
            int md = json_depth(m);
            d = md > d ? md : d;
        }
        return d + 1;
    }
    return 0;
}

/* params.extra: any JSON object for the runtime, never interpreted here;
 * bounded in depth (PARAMS_EXTRA_DEPTH) and serialized size (max_bytes). */
static int check_extra(json_t *extra, int max_bytes, json_t *norm, struct api_error *err)
{
    if (!extra || json_is_null(extra))
        return 0;
    if (!json_is_object(extra)) {
        api_error_set(err, 400, "invalid_field", "params.extra",
                      "params.extra: must be an object");
        return GPUQ_EINVAL;
    }
    if (json_depth(extra) > PARAMS_EXTRA_DEPTH) {
        api_error_set(err, 400, "invalid_field", "params.extra",
                      "params.extra: nested deeper than %d", PARAMS_EXTRA_DEPTH);
        return GPUQ_EINVAL;
    }
    size_t n = json_dumpb(extra, NULL, 0, JSON_COMPACT | JSON_SORT_KEYS);
    if (n == 0 || n > (size_t)max_bytes) {
        api_error_set(err, 400, "invalid_field", "params.extra",
                      "params.extra: %zu bytes serialized, more than the %d allowed "
                      "([jobs] max_extra_bytes)", n, max_bytes);
        return GPUQ_EINVAL;
    }
    json_object_set(norm, "extra", extra);
    return 0;
}

bool json_input_id(const char *s)
{
    if (strncmp(s, "in_", 3) != 0 || strlen(s) != 3 + INPUT_ID_HEX)
        return false;
    for (const char *p = s + 3; *p; p++)
        if (!isdigit((unsigned char)*p) && !(*p >= 'a' && *p <= 'f'))
            return false;
    return true;
}

/* params.inputs: {"NAME": "in_…"} — uploads (POST /v1/inputs) the runtime gets
 * as local files; who owns them is checked by the caller (inputs_check). */
static int check_inputs(json_t *inputs, json_t *norm, struct api_error *err)
{
    if (!inputs || json_is_null(inputs))
        return 0;
    if (!json_is_object(inputs) || json_object_size(inputs) == 0 ||
        json_object_size(inputs) > PARAMS_MAX_INPUTS) {
        api_error_set(err, 400, "invalid_field", "params.inputs",
                      "params.inputs: must be an object of 1..%d NAME: upload id pairs",
                      PARAMS_MAX_INPUTS);
        return GPUQ_EINVAL;
    }
    const char *k;
    json_t *v;
    json_object_foreach(inputs, k, v) {
        char field[64];
        snprintf(field, sizeof field, "params.inputs.%.32s", k);
        if (!json_is_name(k, 32, false) || !isalnum((unsigned char)k[0])) {
            api_error_set(err, 400, "invalid_field", field,
                          "%s: an input name is 1..32 of a-z 0-9 . _ - (first a-z or 0-9)",
                          field);
            return GPUQ_EINVAL;
        }
        if (!json_is_string(v) || !json_input_id(json_string_value(v))) {
            api_error_set(err, 400, "invalid_field", field,
                          "%s: must be an upload id (in_ and %d hex digits, from POST /v1/inputs)",
                          field, INPUT_ID_HEX);
            return GPUQ_EINVAL;
        }
    }
    json_object_set(norm, "inputs", inputs);
    return 0;
}

/* Validates params and builds their normalized form (defaults filled, keys sorted). */
static json_t *normalize_params(json_t *params, const struct head_config *cfg,
                                struct job_rec *out, struct api_error *err)
{
    if (params && !json_is_object(params)) {
        api_error_set(err, 400, "invalid_field", "params", "params: must be an object");
        return NULL;
    }
    json_t *empty = NULL;
    if (!params)
        params = empty = json_object();
    json_t *norm = NULL;
    if (check_keys(params, param_keys, "params.", err))
        goto done;
    const char *s;
    long long w = 1024, h = 1024, steps = 30, frames = 0, seed = -1, sim_ms = -1;
    double guidance = -1;
    norm = json_object();
    const char *const texts[] = {"prompt", "negative_prompt"};
    for (int i = 0; i < 2; i++) {
        char field[64];
        snprintf(field, sizeof field, "params.%s", texts[i]);
        int rc = get_string(params, texts[i], field, PROMPT_MAX, &s, err);
        if (rc < 0)
            goto fail;
        if (rc)
            json_object_set_new(norm, texts[i], json_string(s));
    }
    if (get_int(params, "width", "params.width", 64, 4096, &w, err) < 0 ||
        get_int(params, "height", "params.height", 64, 4096, &h, err) < 0 ||
        get_int(params, "steps", "params.steps", 1, 500, &steps, err) < 0 ||
        get_int(params, "frames", "params.frames", 0, 1000, &frames, err) < 0 ||
        get_int(params, "seed", "params.seed", 0, 9007199254740992LL, &seed, err) < 0 ||
        get_int(params, "sim_ms", "params.sim_ms", 0, 600000, &sim_ms, err) < 0 ||
        get_number(params, "guidance", "params.guidance", 0, 100, &guidance, err) < 0)
        goto fail;
    if (w % 8 || h % 8) {
        api_error_set(err, 400, "invalid_field", w % 8 ? "params.width" : "params.height",
                      "%s: must be a multiple of 8", w % 8 ? "params.width" : "params.height");
        goto fail;
    }
    if (check_extra(json_object_get(params, "extra"), cfg->max_extra_bytes, norm, err) ||
        check_inputs(json_object_get(params, "inputs"), norm, err))
        goto fail;
    int rc = get_string(params, "fault", "params.fault", 16, &s, err);
    if (rc < 0)
        goto fail;
    if (rc) {
        int known = 0;
        for (const char *const *f = faults; *f; f++)
            known |= !strcmp(*f, s);
        if (!known) {
            api_error_set(err, 400, "invalid_field", "params.fault",
                          "params.fault: must be one of oom, crash, hang, solid, bad_input, cuda");
            goto fail;
        }
        json_object_set_new(norm, "fault", json_string(s));
    }
    json_object_set_new(norm, "width", json_integer(w));
    json_object_set_new(norm, "height", json_integer(h));
    json_object_set_new(norm, "steps", json_integer(steps));
    json_object_set_new(norm, "frames", json_integer(frames));
    if (seed >= 0)
        json_object_set_new(norm, "seed", json_integer(seed));
    if (sim_ms >= 0)
        json_object_set_new(norm, "sim_ms", json_integer(sim_ms));
    if (guidance >= 0)
        json_object_set_new(norm, "guidance", json_real(guidance));
    out->width = (uint32_t)w;
    out->height = (uint32_t)h;
    out->steps = (uint32_t)steps;
    out->frames = (uint32_t)frames;
    goto done;
fail:
    json_decref(norm);
    norm = NULL;
done:
    json_decref(empty);
    return norm;
}

/* A string jansson writes as it is: no byte that needs an escape ('"', '\\',
 * below 0x20). Bytes from 0x80 up are valid UTF-8 in any json_t and go as
 * they are (no JSON_ENSURE_ASCII). */
static bool plain_text(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == '"' || c == '\\')
            return false;
    }
    return true;
}

#define PLAIN_MAX_KEYS 32
#define PLAIN_MAX_DEPTH 8

/* Appends what json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS) writes, byte for
 * byte, for the documents where that text is plain: objects (keys in strcmp
 * order), arrays, integers, true, false, null and strings needing no escape.
 * Serializing the normalized params through jansson was a tenth of gpuqd's
 * instructions per submit. Returns false, out half written, on anything else
 * (a real, a string to escape, more than PLAIN_MAX_KEYS keys or
 * PLAIN_MAX_DEPTH levels): the caller then asks jansson. */
static bool dump_plain(struct buf *out, json_t *v, int depth)
{
    if (depth > PLAIN_MAX_DEPTH)
        return false;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *keys[PLAIN_MAX_KEYS];
        size_t n = 0;
        const char *key;
        json_t *x;
        if (json_object_size(v) > PLAIN_MAX_KEYS)
            return false;
        json_object_foreach(v, key, x) {
            size_t i = n++;
            for (; i > 0 && strcmp(keys[i - 1], key) > 0; i--) /* insertion sort */
                keys[i] = keys[i - 1];
            keys[i] = key;
        }
        buf_puts(out, "{");
        for (size_t i = 0; i < n; i++) {
            size_t klen = strlen(keys[i]);
            if (!plain_text(keys[i], klen))
                return false;
            buf_puts(out, i ? ",\"" : "\"");
            buf_append(out, keys[i], klen);
            buf_puts(out, "\":");
            if (!dump_plain(out, json_object_get(v, keys[i]), depth + 1))
                return false;
        }
        buf_puts(out, "}");
        return true;
    }
    case JSON_ARRAY:
        buf_puts(out, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                buf_puts(out, ",");
            if (!dump_plain(out, json_array_get(v, i), depth + 1))
                return false;
        }
        buf_puts(out, "]");
        return true;
    case JSON_STRING: {
        size_t n = json_string_length(v);
        if (!plain_text(json_string_value(v), n))
            return false;
        buf_puts(out, "\"");
        buf_append(out, json_string_value(v), n);
        buf_puts(out, "\"");
        return true;
    }
    case JSON_INTEGER:
        buf_put_int(out, (long long)json_integer_value(v));
        return true;
    case JSON_TRUE:
        buf_puts(out, "true");
        return true;
    case JSON_FALSE:
        buf_puts(out, "false");
        return true;
    case JSON_NULL:
        buf_puts(out, "null");
        return true;
    default: /* JSON_REAL: jansson's own %.17g form */
        return false;
    }
}

/* json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS), the plain case without jansson. */
static char *dump_params(json_t *params)
{
    struct buf b;
    buf_init(&b);
    buf_reserve(&b, 256); /* a typical params text: no regrowth */
    if (dump_plain(&b, params, 0))
        return buf_steal(&b);
    buf_fini(&b);
    return json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
}

int json_parse_job(const char *body, size_t len, const struct head_config *cfg,
                   const struct tenant_rec *tenant, const char *idem_header, int64_t now_ms,
                   struct job_rec *out, struct api_error *err)
{
    memset(out, 0, sizeof *out);
    json_t *root = parse_object(body, len, err);
    if (!root)
        return GPUQ_EINVAL;
    json_t *params = NULL;
    int ret = GPUQ_EINVAL;
    if (check_keys(root, job_keys, "", err))
        goto out;
    const char *cap = NULL, *model = NULL, *lane = NULL, *prio = NULL, *idem = NULL;
    int rc = get_string(root, "capability", "capability", 63, &cap, err);
    if (rc < 0)
        goto out;
    if (rc == 0) {
        api_error_set(err, 400, "missing_field", "capability", "capability: required");
        goto out;
    }
    const struct cap_config *cc = config_cap(cfg, cap);
    if (!json_is_name(cap, 63, false) || !cc) {
        struct buf known;
        buf_init(&known);
        for (int i = 0; i < cfg->ncaps; i++)
            buf_printf(&known, "%s%s", i ? ", " : "", cfg->caps[i].name);
        api_error_set(err, 400, "invalid_field", "capability",
                      "capability: unknown capability '%.63s' (known: %.150s)", cap,
                      known.data ? known.data : "none");
        buf_fini(&known);
        goto out;
    }
    if (get_string(root, "model", "model", 63, &model, err) < 0)
        goto out;
    if (!model)
        model = cc->default_model;
    if (!json_is_name(model, 63, true) || !config_model(cfg, model)) {
        api_error_set(err, 400, "invalid_field", "model", "model: unknown model '%.63s'", model);
        goto out;
    }
    if (get_string(root, "lane", "lane", 16, &lane, err) < 0)
        goto out;
    out->lane = LANE_INTERACTIVE;
    if (lane && job_lane_parse(lane, &out->lane)) {
        api_error_set(err, 400, "invalid_field", "lane", "lane: must be interactive or batch");
        goto out;
    }
    if (get_string(root, "priority", "priority", 16, &prio, err) < 0)
        goto out;
    out->tier = tenant->tier;
    if (prio && job_tier_parse(prio, &out->tier)) {
        api_error_set(err, 400, "invalid_field", "priority", "priority: must be paid or free");
        goto out;
    }
    if (out->tier == TIER_PAID && tenant->tier == TIER_FREE) {
        api_error_set(err, 403, "forbidden", "priority",
                      "priority: a free-tier tenant cannot submit paid work");
        goto out;
    }
    if (get_string(root, "idempotency_key", "idempotency_key", IDEM_MAX, &idem, err) < 0)
        goto out;
    if (idem_header) {
        if (strlen(idem_header) > IDEM_MAX) {
            api_error_set(err, 400, "invalid_field", "Idempotency-Key",
                          "Idempotency-Key: longer than %d bytes", IDEM_MAX);
            goto out;
        }
        if (idem && strcmp(idem, idem_header)) {
            api_error_set(err, 400, "invalid_field", "idempotency_key",
                          "idempotency_key: differs from the Idempotency-Key header");
            goto out;
        }
        idem = idem_header;
    }
    if (idem && !*idem) {
        api_error_set(err, 400, "invalid_field", "idempotency_key",
                      "idempotency_key: must not be empty");
        goto out;
    }
    long long deadline = 0;
    if (get_int(root, "deadline", "deadline", 1, INT64_MAX / 2, &deadline, err) < 0)
        goto out;
    if (deadline && deadline <= now_ms) {
        api_error_set(err, 400, "invalid_field", "deadline",
                      "deadline: %lld is in the past (Unix milliseconds expected)", deadline);
        goto out;
    }
    long long timeout_s = 0;
    if (get_int(root, "timeout_s", "timeout_s", 1, 7 * 86400, &timeout_s, err) < 0)
        goto out;
    params = normalize_params(json_object_get(root, "params"), cfg, out, err);
    if (!params)
        goto out;

    out->tenant_id = tenant->id;
    snprintf(out->capability, sizeof out->capability, "%s", cap);
    snprintf(out->model, sizeof out->model, "%s", model);
    snprintf(out->idem_key, sizeof out->idem_key, "%s", idem ? idem : "");
    out->lc.deadline_ms = deadline;
    out->lc.timeout_ms = timeout_s * 1000;
    out->params_json = dump_params(params);
    /* What the request asks for, normalized: a replay with the same key must match it.
     * Only a replay reads it, so a job without a key has none (as it comes back
     * from the store or the compact record: jobs.c): the hash was a twentieth
     * of a plain submit's instructions. */
    if (idem) {
        struct buf canon;
        buf_init(&canon);
        buf_printf(&canon, "%s\n%s\n%s\n%s\n%lld\n%s", out->capability, out->model,
                   job_lane_name(out->lane), job_tier_name(out->tier), deadline,
                   out->params_json);
        if (timeout_s) /* absent from the hash when not given: keys made before it stay valid */
            buf_printf(&canon, "\ntimeout %lld", timeout_s);
        token_hash(canon.data, out->body_hash);
        buf_fini(&canon);
    }
    ret = 0;
out:
    json_decref(params);
    json_decref(root);
    return ret;
}

/* ,"key": then the text. */
static void put_key(struct buf *out, const char *key)
{
    buf_puts(out, ",\"");
    buf_puts(out, key);
    buf_puts(out, "\":");
}

static void put_ms(struct buf *out, const char *key, int64_t ms)
{
    put_key(out, key);
    if (ms)
        buf_put_int(out, (long long)ms);
    else
        buf_puts(out, "null");
}

int json_parse_batch(const char *body, size_t len, int max_jobs,
                     int (*each)(void *arg, int index, const char *job, size_t len), void *arg,
                     int *njobs, struct api_error *err)
{
    *njobs = 0;
    json_t *root = parse_object(body, len, err);
    if (!root)
        return GPUQ_EINVAL;
    int ret = GPUQ_EINVAL;
    static const char *const keys[] = {"jobs", NULL};
    if (check_keys(root, keys, "", err))
        goto out;
    json_t *jobs = json_object_get(root, "jobs");
    if (!jobs) {
        api_error_set(err, 400, "missing_field", "jobs", "jobs: required (an array of jobs)");
        goto out;
    }
    if (!json_is_array(jobs)) {
        api_error_set(err, 400, "invalid_field", "jobs", "jobs: must be an array of jobs");
        goto out;
    }
    size_t n = json_array_size(jobs);
    if (n == 0 || n > (size_t)max_jobs) {
        api_error_set(err, 400, "invalid_field", "jobs",
                      "jobs: must hold 1..%d jobs (jobs.max_batch_jobs), not %zu", max_jobs, n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        char *text = json_dumps(json_array_get(jobs, i), JSON_COMPACT | JSON_ENCODE_ANY);
        int rc = each(arg, (int)i, text ? text : "", text ? strlen(text) : 0);
        free(text);
        if (rc)
            goto out;
    }
    *njobs = (int)n;
    ret = 0;
out:
    json_decref(root);
    return ret;
}

void json_render_job(struct buf *out, const struct job_rec *j, const char *tenant_name)
{
    /* Room for a queued job's answer at once: grown from 64 bytes by
     * doubling, it was reallocated four times per 201. */
    buf_reserve(out, 1024 + (j->params_json ? strlen(j->params_json) : 2));
    buf_puts(out, "{\"id\":\"");
    buf_put_int(out, (long long)j->id);
    buf_puts(out, "\",\"tenant\":");
    json_put_string(out, tenant_name ? tenant_name : "");
    buf_puts(out, ",\"capability\":");
    json_put_string(out, j->capability);
    buf_puts(out, ",\"model\":");
    json_put_string(out, j->model);
    buf_puts(out, ",\"params\":");
    buf_puts(out, j->params_json ? j->params_json : "{}");
    enum job_state state = job_rec_state(j);
    buf_puts(out, ",\"lane\":\"");
    buf_puts(out, job_lane_name(j->lane));
    buf_puts(out, "\",\"priority\":\"");
    buf_puts(out, job_tier_name(j->tier));
    buf_puts(out, "\",\"state\":\"");
    buf_puts(out, job_state_name(state));
    buf_puts(out, "\"");
    if (state == JOB_RUNNING && j->phase != PHASE_NONE) {
        buf_puts(out, ",\"phase\":\"");
        buf_puts(out, job_phase_name(j->phase));
        buf_puts(out, "\"");
    } else {
        buf_puts(out, ",\"phase\":null");
    }
    buf_puts(out, ",\"progress\":");
    buf_put_fixed(out, j->progress, 3);
    buf_puts(out, ",\"attempt\":");
    buf_put_int(out, j->lc.attempt);
    buf_puts(out, ",\"failures\":");
    buf_put_int(out, j->lc.failures);
    buf_puts(out, ",\"cost_s\":");
    buf_put_fixed(out, j->cost_s, 3);
    buf_puts(out, ",\"worker_id\":");
    if (j->lc.worker[0])
        json_put_string(out, j->lc.worker);
    else
        buf_puts(out, "null");
    buf_puts(out, ",\"idempotency_key\":");
    if (j->idem_key[0])
        json_put_string(out, j->idem_key);
    else
        buf_puts(out, "null");
    put_ms(out, "deadline", j->lc.deadline_ms);
    if (j->lc.timeout_ms) {
        buf_puts(out, ",\"timeout_s\":");
        buf_put_int(out, (long long)(j->lc.timeout_ms / 1000));
    } else
        buf_puts(out, ",\"timeout_s\":null");
    buf_puts(out, ",\"error\":");
    if (j->error_class[0] && state != JOB_SUCCEEDED) {
        buf_puts(out, "{\"class\":");
        json_put_string(out, j->error_class);
        buf_puts(out, ",\"message\":");
        json_put_string(out, j->error_message);
        buf_puts(out, "}");
    } else {
        buf_puts(out, "null");
    }
    put_ms(out, "created_ms", j->created_ms);
    put_ms(out, "started_ms", j->started_ms);
    put_ms(out, "finished_ms", j->finished_ms);
    if (j->eta_start_ms) {
        buf_puts(out, ",\"eta\":{\"start_ms\":");
        buf_put_int(out, (long long)j->eta_start_ms);
        buf_puts(out, ",\"finish_ms\":");
        buf_put_int(out, (long long)j->eta_finish_ms);
        buf_puts(out, "}");
    } else
        buf_puts(out, ",\"eta\":null");
    buf_puts(out, ",\"waiting_reason\":");
    if (j->waiting_reason[0])
        json_put_string(out, j->waiting_reason);
    else
        buf_puts(out, "null");
    buf_puts(out, ",\"attempts\":[");
    for (int i = 0; i < j->nattempts; i++) {
        const struct lc_attempt *a = &j->attempts[i];
        buf_printf(out, "%s{\"n\":%d,\"worker\":", i ? "," : "", a->n);
        json_put_string(out, a->worker);
        put_ms(out, "started_ms", a->started_ms);
        put_ms(out, "ended_ms", a->ended_ms);
        buf_printf(out, ",\"outcome\":\"%s\",\"error_class\":", lc_outcome_name(a->outcome));
        if (a->error_class[0])
            json_put_string(out, a->error_class);
        else
            buf_puts(out, "null");
        buf_puts(out, ",\"error\":");
        if (a->error[0])
            json_put_string(out, a->error);
        else
            buf_puts(out, "null");
        buf_puts(out, "}");
    }
    buf_puts(out, "]");
    if (state == JOB_SUCCEEDED) {
        buf_puts(out, ",\"result\":{\"content_type\":");
        json_put_string(out, j->result_type);
        buf_printf(out, ",\"bytes\":%lld,\"url\":\"/v1/jobs/%llu/result\"}",
                   (long long)j->result_bytes, (unsigned long long)j->id);
    } else {
        buf_puts(out, ",\"result\":null");
    }
    buf_puts(out, "}");
}

static int parse_name_body(const char *body, size_t len, const char *const *keys, json_t **root,
                           char *name, size_t nsize, bool required, struct api_error *err)
{
    *root = parse_object(body, len, err);
    if (!*root || check_keys(*root, keys, "", err))
        return GPUQ_EINVAL;
    const char *n = NULL;
    int rc = get_string(*root, "name", "name", nsize - 1, &n, err);
    if (rc < 0)
        return GPUQ_EINVAL;
    if (!rc && required) {
        api_error_set(err, 400, "missing_field", "name", "name: required");
        return GPUQ_EINVAL;
    }
    if (n && !json_is_name(n, nsize - 1, true)) {
        api_error_set(err, 400, "invalid_field", "name",
                      "name: use letters, digits, '.', '_' or '-' (1..%zu)", nsize - 1);
        return GPUQ_EINVAL;
    }
    snprintf(name, nsize, "%s", n ? n : "");
    return 0;
}

int json_parse_tenant(const char *body, size_t len, char *name, size_t nsize,
                      enum job_tier *tier, struct api_error *err)
{
    static const char *const keys[] = {"name", "tier", NULL};
    json_t *root;
    int rc = parse_name_body(body, len, keys, &root, name, nsize, true, err);
    if (!rc) {
        const char *t = NULL;
        *tier = TIER_PAID;
        if (get_string(root, "tier", "tier", 16, &t, err) < 0)
            rc = GPUQ_EINVAL;
        else if (t && job_tier_parse(t, tier)) {
            api_error_set(err, 400, "invalid_field", "tier", "tier: must be paid or free");
            rc = GPUQ_EINVAL;
        }
    }
    json_decref(root);
    return rc;
}

int json_parse_token(const char *body, size_t len, char *name, size_t nsize,
                     struct api_error *err)
{
    static const char *const keys[] = {"name", NULL};
    json_t *root;
    int rc = parse_name_body(len ? body : "{}", len ? len : 2, keys, &root, name, nsize,
                             false, err);
    json_decref(root);
    if (!rc && !name[0])
        snprintf(name, nsize, "agents");
    return rc;
}

/* Every agent message carries "protocol": 1 and a worker_id. */
static int agent_common(json_t *root, char *worker_id, struct api_error *err)
{
    long long proto = 0;
    int rc = get_int(root, "protocol", "protocol", 0, 1000, &proto, err);
    if (rc < 0)
        return rc;
    if (rc == 0 || proto != 1) {
        api_error_set(err, 400, "invalid_field", "protocol",
                      "protocol: this head speaks worker protocol 1");
        return GPUQ_EINVAL;
    }
    const char *id = NULL;
    rc = get_string(root, "worker_id", "worker_id", SCHED_NAME_MAX - 1, &id, err);
    if (rc < 0)
        return rc;
    if (!rc || !json_is_name(id, SCHED_NAME_MAX - 1, true)) {
        api_error_set(err, 400, rc ? "invalid_field" : "missing_field", "worker_id",
                      "worker_id: required, letters, digits, '.', '_' or '-'");
        return GPUQ_EINVAL;
    }
    snprintf(worker_id, SCHED_NAME_MAX, "%s", id);
    return 0;
}

static int parse_caps(json_t *root, struct worker_rec *w, struct api_error *err)
{
    json_t *caps = json_object_get(root, "capabilities");
    if (!json_is_array(caps) || json_array_size(caps) == 0 ||
        json_array_size(caps) > SCHED_MAX_CAPS) {
        api_error_set(err, 400, "invalid_field", "capabilities",
                      "capabilities: an array of 1..%d capability names", SCHED_MAX_CAPS);
        return GPUQ_EINVAL;
    }
    size_t i;
    json_t *v;
    json_array_foreach(caps, i, v) {
        if (!json_is_string(v) || !json_is_name(json_string_value(v), SCHED_NAME_MAX - 1, false)) {
            api_error_set(err, 400, "invalid_field", "capabilities",
                          "capabilities[%zu]: must be a capability name", i);
            return GPUQ_EINVAL;
        }
        snprintf(w->caps[w->ncaps++], SCHED_NAME_MAX, "%s", json_string_value(v));
    }
    return 0;
}

static int parse_models(json_t *arr, const char *field, struct worker_rec *w, bool heartbeat,
                        struct api_error *err)
{
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) > REG_MAX_MODELS) {
        api_error_set(err, 400, "invalid_field", field, "%s: an array of at most %d models",
                      field, REG_MAX_MODELS);
        return GPUQ_EINVAL;
    }
    size_t i;
    json_t *m;
    json_array_foreach(arr, i, m) {
        char f[64];
        snprintf(f, sizeof f, "%s[%zu]", field, i);
        if (!json_is_object(m)) {
            api_error_set(err, 400, "invalid_field", f, "%s: must be an object", f);
            return GPUQ_EINVAL;
        }
        struct reg_model *rm = &w->models[w->nmodels];
        memset(rm, 0, sizeof *rm);
        const char *name = NULL, *cls = NULL;
        long long vram = 0, load = 0, ago = 0;
        if (get_string(m, "name", f, SCHED_NAME_MAX - 1, &name, err) <= 0 ||
            !json_is_name(name, SCHED_NAME_MAX - 1, true)) {
            api_error_set(err, 400, "invalid_field", f, "%s.name: required model name", f);
            return GPUQ_EINVAL;
        }
        if (get_int(m, "vram_mb", f, 0, 1 << 22, &vram, err) < 0 ||
            get_int(m, "load_ms", f, 0, 3600000, &load, err) < 0 ||
            get_int(m, "last_used_ms_ago", f, 0, INT64_MAX / 2, &ago, err) < 0 ||
            get_string(m, "class", f, 16, &cls, err) < 0)
            return GPUQ_EINVAL;
        snprintf(rm->name, sizeof rm->name, "%s", name);
        rm->vram_mb = vram;
        rm->load_ms = load;
        rm->last_used_ms_ago = ago;
        rm->cls = cls && !strcmp(cls, "utility") ? MODEL_UTILITY : MODEL_GENERATION;
        rm->pinned = json_is_true(json_object_get(m, "pinned"));
        rm->loaded = heartbeat || json_is_true(json_object_get(m, "loaded"));
        w->nmodels++;
    }
    return 0;
}

int json_parse_register(const char *body, size_t len, struct worker_rec *out,
                        struct api_error *err)
{
    static const char *const keys[] = {"protocol",     "worker_id",   "host",   "gpu",
                                       "capabilities", "concurrency", "models", "incarnation",
                                       "ahead",        NULL};
    memset(out, 0, sizeof *out);
    json_t *root = parse_object(body, len, err);
    int rc = GPUQ_EINVAL;
    if (!root || check_keys(root, keys, "", err) || agent_common(root, out->id, err))
        goto out;
    const char *host = NULL;
    if (get_string(root, "host", "host", sizeof out->host - 1, &host, err) < 0)
        goto out;
    snprintf(out->host, sizeof out->host, "%s", host ? host : "");
    const char *inc = NULL;
    if (get_string(root, "incarnation", "incarnation", sizeof out->incarnation - 1, &inc, err) < 0)
        goto out;
    snprintf(out->incarnation, sizeof out->incarnation, "%s", inc ? inc : "");
    json_t *gpu = json_object_get(root, "gpu");
    if (!json_is_object(gpu)) {
        api_error_set(err, 400, "missing_field", "gpu", "gpu: required object");
        goto out;
    }
    const char *name = NULL, *uuid = NULL;
    long long index = 0, vram = 0, conc = 1, ahead = 0;
    if (get_string(gpu, "name", "gpu.name", sizeof out->gpu_name - 1, &name, err) < 0 ||
        get_string(gpu, "uuid", "gpu.uuid", sizeof out->gpu_uuid - 1, &uuid, err) < 0 ||
        get_int(gpu, "index", "gpu.index", 0, 1024, &index, err) < 0 ||
        get_int(gpu, "vram_total_mb", "gpu.vram_total_mb", 0, 1 << 22, &vram, err) < 0 ||
        get_int(root, "concurrency", "concurrency", 1, 64, &conc, err) < 0 ||
        get_int(root, "ahead", "ahead", 0, 1, &ahead, err) < 0)
        goto out;
    snprintf(out->gpu_name, sizeof out->gpu_name, "%s", name ? name : "");
    snprintf(out->gpu_uuid, sizeof out->gpu_uuid, "%s", uuid ? uuid : "");
    out->gpu_index = (int)index;
    out->tel.vram_total_mb = vram;
    out->tel.vram_free_mb = vram;
    snprintf(out->tel.health, sizeof out->tel.health, "ok");
    out->concurrency = (int)conc;
    out->ahead = (int)ahead;
    if (parse_caps(root, out, err) ||
        parse_models(json_object_get(root, "models"), "models", out, false, err))
        goto out;
    out->state = WORKER_WARMING;
    out->registered_ms = clock_wall_ms();
    rc = 0;
out:
    json_decref(root);
    return rc;
}

static int parse_attempts(json_t *arr, const char *field, struct worker_rec *w,
                          struct api_error *err)
{
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) > REG_MAX_RUNNING) {
        api_error_set(err, 400, "invalid_field", field, "%s: an array of at most %d", field,
                      REG_MAX_RUNNING);
        return GPUQ_EINVAL;
    }
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        const char *id = NULL;
        long long attempt = 0;
        char f[64];
        snprintf(f, sizeof f, "%s[%zu]", field, i);
        if (!json_is_object(v) || get_string(v, "job_id", f, 20, &id, err) <= 0 ||
            get_int(v, "attempt", f, 1, 1000000, &attempt, err) <= 0) {
            api_error_set(err, 400, "invalid_field", f, "%s: {job_id, attempt} expected", f);
            return GPUQ_EINVAL;
        }
        if (!json_job_id(id, &w->running[w->nrunning].job_id)) {
            api_error_set(err, 400, "invalid_field", f, "%s.job_id: not a job id", f);
            return GPUQ_EINVAL;
        }
        w->running[w->nrunning].attempt = (int)attempt;
        w->nrunning++;
    }
    return 0;
}

int json_parse_heartbeat(const char *body, size_t len, struct worker_rec *out,
                         struct api_error *err)
{
    static const char *const keys[] = {"protocol", "worker_id", "state", "telemetry",
                                       "loaded_models", "running", "cache", NULL};
    memset(out, 0, sizeof *out);
    json_t *root = parse_object(body, len, err);
    int rc = GPUQ_EINVAL;
    if (!root || check_keys(root, keys, "", err) || agent_common(root, out->id, err))
        goto out;
    const char *state = NULL;
    if (get_string(root, "state", "state", 16, &state, err) < 0)
        goto out;
    if (!state || !strcmp(state, "ready"))
        out->state = WORKER_READY;
    else if (!strcmp(state, "warming"))
        out->state = WORKER_WARMING;
    else if (!strcmp(state, "draining"))
        out->state = WORKER_DRAINING;
    else {
        api_error_set(err, 400, "invalid_field", "state",
                      "state: must be warming, ready or draining");
        goto out;
    }
    json_t *tel = json_object_get(root, "telemetry");
    snprintf(out->tel.health, sizeof out->tel.health, "ok");
    if (tel && !json_is_null(tel)) {
        if (!json_is_object(tel)) {
            api_error_set(err, 400, "invalid_field", "telemetry", "telemetry: must be an object");
            goto out;
        }
        long long total = 0, used = 0, freemb = 0, clock = 0;
        double temp = 0, util = 0, power = 0;
        const char *health = NULL;
        if (get_number(tel, "temp_c", "telemetry.temp_c", -50, 200, &temp, err) < 0 ||
            get_int(tel, "vram_total_mb", "telemetry.vram_total_mb", 0, 1 << 22, &total, err) < 0 ||
            get_int(tel, "vram_used_mb", "telemetry.vram_used_mb", 0, 1 << 22, &used, err) < 0 ||
            get_int(tel, "vram_free_mb", "telemetry.vram_free_mb", 0, 1 << 22, &freemb, err) < 0 ||
            get_number(tel, "util_pct", "telemetry.util_pct", 0, 100, &util, err) < 0 ||
            get_number(tel, "power_w", "telemetry.power_w", 0, 100000, &power, err) < 0 ||
            get_int(tel, "sm_clock_mhz", "telemetry.sm_clock_mhz", 0, 100000, &clock, err) < 0 ||
            get_string(tel, "health", "telemetry.health", 15, &health, err) < 0)
            goto out;
        out->tel.temp_c = temp;
        out->tel.vram_total_mb = total;
        out->tel.vram_used_mb = used;
        out->tel.vram_free_mb = freemb;
        out->tel.util_pct = util;
        out->tel.power_w = power;
        out->tel.sm_clock_mhz = (int)clock;
        if (health)
            snprintf(out->tel.health, sizeof out->tel.health, "%s", health);
        json_t *reasons = json_object_get(tel, "throttle_reasons");
        if (json_is_array(reasons)) {
            struct buf b;
            buf_init(&b);
            size_t i;
            json_t *r;
            json_array_foreach(reasons, i, r) {
                if (json_is_string(r) && i < 8)
                    buf_printf(&b, "%s%.24s", b.len ? "," : "", json_string_value(r));
            }
            snprintf(out->tel.throttle, sizeof out->tel.throttle, "%s", b.data ? b.data : "");
            buf_fini(&b);
        }
    }
    if (parse_models(json_object_get(root, "loaded_models"), "loaded_models", out, true, err) ||
        parse_attempts(json_object_get(root, "running"), "running", out, err))
        goto out;
    json_t *cache = json_object_get(root, "cache");
    if (json_is_object(cache)) {
        long long hits = 0, misses = 0;
        if (get_int(cache, "hits", "cache.hits", 0, INT64_MAX / 2, &hits, err) < 0 ||
            get_int(cache, "misses", "cache.misses", 0, INT64_MAX / 2, &misses, err) < 0)
            goto out;
        out->cache_hits = hits;
        out->cache_misses = misses;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

static int parse_agent_msg(const char *body, size_t len, const char *const *keys, bool attempt,
                           json_t **root, struct agent_msg *out, struct api_error *err)
{
    memset(out, 0, sizeof *out);
    *root = parse_object(body, len, err);
    if (!*root || check_keys(*root, keys, "", err) || agent_common(*root, out->worker_id, err))
        return GPUQ_EINVAL;
    if (attempt) {
        long long a = 0;
        int rc = get_int(*root, "attempt", "attempt", 1, 1000000, &a, err);
        if (rc <= 0) {
            if (rc == 0)
                api_error_set(err, 400, "missing_field", "attempt", "attempt: required");
            return GPUQ_EINVAL;
        }
        out->attempt = (int)a;
    }
    const char *msg = NULL;
    if (get_string(*root, "message", "message", 4096, &msg, err) < 0)
        return GPUQ_EINVAL;
    snprintf(out->message, sizeof out->message, "%s", msg ? msg : "");
    return 0;
}

int json_parse_progress(const char *body, size_t len, struct agent_msg *out,
                        struct api_error *err)
{
    static const char *const keys[] = {"protocol", "worker_id", "attempt", "phase",
                                       "progress", "message",   NULL};
    json_t *root;
    int rc = parse_agent_msg(body, len, keys, true, &root, out, err);
    if (!rc) {
        const char *phase = NULL;
        out->phase = PHASE_GENERATING;
        if (get_string(root, "phase", "phase", 16, &phase, err) < 0 ||
            get_number(root, "progress", "progress", 0, 1, &out->progress, err) < 0)
            rc = GPUQ_EINVAL;
        else if (phase && !strcmp(phase, "loading"))
            out->phase = PHASE_LOADING;
        else if (phase && strcmp(phase, "generating")) {
            api_error_set(err, 400, "invalid_field", "phase", "phase: loading or generating");
            rc = GPUQ_EINVAL;
        }
    }
    json_decref(root);
    return rc;
}

int json_parse_fail(const char *body, size_t len, struct agent_msg *out, struct api_error *err)
{
    static const char *const keys[] = {"protocol", "worker_id", "attempt", "class", "message",
                                       NULL};
    static const char *const classes[] = {"oom", "cuda", "crash", "hang", "qc", "bad_input",
                                          "internal", "cancelled", NULL};
    json_t *root;
    int rc = parse_agent_msg(body, len, keys, true, &root, out, err);
    if (!rc) {
        const char *cls = NULL;
        int known = 0;
        if (get_string(root, "class", "class", 15, &cls, err) < 0)
            rc = GPUQ_EINVAL;
        for (const char *const *c = classes; cls && *c; c++)
            known |= !strcmp(cls, *c);
        if (!rc && !known) {
            api_error_set(err, 400, "invalid_field", "class",
                          "class: one of oom, cuda, crash, hang, qc, bad_input, internal, "
                          "cancelled");
            rc = GPUQ_EINVAL;
        }
        if (!rc)
            snprintf(out->cls, sizeof out->cls, "%s", cls);
    }
    json_decref(root);
    return rc;
}

int json_parse_deregister(const char *body, size_t len, struct agent_msg *out,
                          struct api_error *err)
{
    static const char *const keys[] = {"protocol", "worker_id", "message", NULL};
    json_t *root;
    int rc = parse_agent_msg(body, len, keys, false, &root, out, err);
    json_decref(root);
    return rc;
}

void json_render_assignment(struct buf *out, const struct job_rec *j)
{
    buf_printf(out, "{\"job_id\":\"%llu\",\"attempt\":%d,\"worker_id\":",
               (unsigned long long)j->id, j->lc.attempt);
    json_put_string(out, j->lc.worker);
    buf_puts(out, ",\"capability\":");
    json_put_string(out, j->capability);
    buf_puts(out, ",\"model\":");
    json_put_string(out, j->model);
    buf_printf(out,
               ",\"lane\":\"%s\",\"priority\":\"%s\",\"params\":%s,\"deadline_ms\":%lld,"
               "\"timeout_ms\":%lld}",
               job_lane_name(j->lane), job_tier_name(j->tier),
               j->params_json ? j->params_json : "{}", (long long)j->lc.deadline_ms,
               (long long)j->lc.timeout_ms);
}

void json_render_worker(struct buf *out, const struct worker_rec *w, int64_t now_ns)
{
    static const char *const states[] = {"warming", "ready", "draining"};
    buf_puts(out, "{\"id\":");
    json_put_string(out, w->id);
    buf_puts(out, ",\"host\":");
    json_put_string(out, w->host);
    buf_printf(out, ",\"gpu\":{\"index\":%d,\"name\":", w->gpu_index);
    json_put_string(out, w->gpu_name);
    buf_puts(out, ",\"uuid\":");
    json_put_string(out, w->gpu_uuid);
    buf_printf(out, ",\"vram_total_mb\":%lld}", (long long)w->tel.vram_total_mb);
    const char *state = w->drain_requested && w->state == WORKER_READY ? "draining"
                                                                        : states[w->state % 3];
    if (w->breaker == BREAKER_OPEN)
        state = "quarantined";
    else if (w->breaker == BREAKER_HALF_OPEN)
        state = "probing";
    buf_printf(out, ",\"state\":\"%s\",\"drain_requested\":%s", state,
               w->drain_requested ? "true" : "false");
    buf_printf(out, ",\"breaker\":{\"state\":\"%s\",\"trips\":%lld,\"reason\":",
               breaker_state_name(w->breaker), (long long)w->breaker_trips);
    if (w->breaker_reason[0])
        json_put_string(out, w->breaker_reason);
    else
        buf_puts(out, "null");
    buf_puts(out, "}");
    buf_puts(out, ",\"capabilities\":[");
    for (int i = 0; i < w->ncaps; i++) {
        if (i)
            buf_puts(out, ",");
        json_put_string(out, w->caps[i]);
    }
    buf_printf(out,
               "],\"concurrency\":%d,\"ahead\":%d,\"inflight\":%d,\"telemetry\":{\"temp_c\":%.1f,"
               "\"vram_total_mb\":%lld,\"vram_used_mb\":%lld,\"vram_free_mb\":%lld,"
               "\"util_pct\":%.1f,\"power_w\":%.1f,\"sm_clock_mhz\":%d,\"throttle_reasons\":",
               w->concurrency, w->ahead, w->inflight, w->tel.temp_c,
               (long long)w->tel.vram_total_mb, (long long)w->tel.vram_used_mb,
               (long long)w->tel.vram_free_mb, w->tel.util_pct, w->tel.power_w,
               w->tel.sm_clock_mhz);
    buf_puts(out, "[");
    const char *p = w->tel.throttle;
    int first = 1;
    while (*p) {
        size_t n = strcspn(p, ",");
        char r[32];
        snprintf(r, sizeof r, "%.*s", (int)(n < 31 ? n : 31), p);
        if (!first)
            buf_puts(out, ",");
        json_put_string(out, r);
        first = 0;
        p += n + (p[n] == ',');
    }
    buf_puts(out, "],\"health\":");
    json_put_string(out, w->tel.health);
    buf_puts(out, "},\"loaded_models\":[");
    first = 1;
    for (int i = 0; i < w->nmodels; i++) {
        if (!w->models[i].loaded)
            continue;
        if (!first)
            buf_puts(out, ",");
        first = 0;
        buf_puts(out, "{\"name\":");
        json_put_string(out, w->models[i].name);
        buf_printf(out, ",\"vram_mb\":%lld,\"pinned\":%s}", (long long)w->models[i].vram_mb,
                   w->models[i].pinned ? "true" : "false");
    }
    long long total = w->cache_hits + w->cache_misses;
    buf_printf(out,
               "],\"cache\":{\"hits\":%lld,\"misses\":%lld,\"hit_ratio\":%.4f},"
               "\"last_seen_ms_ago\":%lld,\"registered_ms\":%lld}",
               w->cache_hits, w->cache_misses, total ? (double)w->cache_hits / total : 0.0,
               (long long)((now_ns - w->last_seen_ns) / 1000000), (long long)w->registered_ms);
}

void json_render_refusal(struct buf *out, const struct admit_verdict *v, const char *lane,
                         double cost_s)
{
    static const char *reasons[] = {"none", "lane_wait", "rate", "inflight", "job_cost", "burst"};
    bool retry = v->outcome == ADMIT_RETRY;
    struct api_error e;
    api_error_set(&e, retry ? 429 : 422, retry ? "overloaded" : "too_large", NULL, "%s", v->why);
    json_render_error(out, &e);
    out->len--; /* reopen the object: the admission fields follow the error */
    buf_printf(out, ",\"reason\":\"%s\",\"lane\":\"%s\",\"backlog_gpu_s\":%.3f,"
                    "\"throughput_gpu_s_per_s\":%.3f,\"wait_s\":%.3f,\"bound_s\":%.3f,"
                    "\"cost_s\":%.3f,",
               reasons[v->reason < 6 ? v->reason : 0], lane, v->backlog_gpu_s, v->throughput,
               isfinite(v->wait_s) ? v->wait_s : -1, v->bound_s, cost_s);
    if (retry)
        buf_printf(out, "\"retry_after_s\":%.3f}", v->retry_after_s);
    else
        buf_puts(out, "\"retry_after_s\":null}");
}
