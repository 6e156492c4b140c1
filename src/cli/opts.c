/* opts.c: table-driven flag parsing for the gpuq commands. */
#include "opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

struct opt *opts_find(struct opt *table, const char *name)
{
    for (struct opt *o = table; o && o->name; o++)
        if (strcmp(o->name, name) == 0)
            return o;
    return NULL;
}

int opts_given(const struct opt *o)
{
    return o && o->nvalues > 0;
}

static struct opt *find_in(struct opt *const *tables, const char *name, size_t len)
{
    for (size_t t = 0; tables[t]; t++)
        for (struct opt *o = tables[t]; o->name; o++)
            if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
                return o;
    return NULL;
}

static int set_value(const char *cmd, struct opt *o, const char *v)
{
    if (o->nvalues > 0 && !o->repeat) {
        /* A repeated single flag: the last one wins, like most tools. */
        o->nvalues = 0;
    }
    if (o->nvalues >= OPTS_MAX_REPEAT) {
        fprintf(stderr, "gpuq %s: --%s: given more than %d times\n", cmd, o->name,
                OPTS_MAX_REPEAT);
        return GPUQ_EINVAL;
    }
    o->values[o->nvalues++] = v;
    o->value = v;
    return 0;
}

int opts_parse(const char *cmd, struct opt *const *tables, int argc, char **argv,
               const char **pos, size_t maxpos, size_t *npos)
{
    *npos = 0;
    int flags_done = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (flags_done || a[0] != '-' || strcmp(a, "-") == 0) {
            if (*npos >= maxpos) {
                fprintf(stderr, "gpuq %s: unexpected argument '%s'\n", cmd, a);
                return GPUQ_EINVAL;
            }
            pos[(*npos)++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            flags_done = 1;
            continue;
        }
        if (a[1] != '-') {
            if (strcmp(a, "-h") == 0) {
                a = "--help";
            } else if (strcmp(a, "-o") == 0) {
                a = "--output";
            } else {
                fprintf(stderr, "gpuq %s: unknown flag '%s' (flags are written --name)\n", cmd,
                        a);
                return GPUQ_EINVAL;
            }
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        struct opt *o = find_in(tables, name, len);
        if (!o) {
            fprintf(stderr, "gpuq %s: unknown flag '--%.*s' (see gpuq %s --help)\n", cmd,
                    (int)len, name, cmd);
            return GPUQ_EINVAL;
        }
        if (!o->arg) {
            if (eq) {
                fprintf(stderr, "gpuq %s: --%s takes no value\n", cmd, o->name);
                return GPUQ_EINVAL;
            }
            if (set_value(cmd, o, "1") < 0)
                return GPUQ_EINVAL;
            continue;
        }
        const char *v;
        if (eq) {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            fprintf(stderr, "gpuq %s: --%s needs a value (%s)\n", cmd, o->name, o->arg);
            return GPUQ_EINVAL;
        }
        if (set_value(cmd, o, v) < 0)
            return GPUQ_EINVAL;
    }
    return 0;
}

int opts_int(const char *cmd, const struct opt *o, long long min, long long max,
             long long *out)
{
    const char *v = o->value;
    char *end = NULL;
    errno = 0;
    long long n = v && *v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || errno || *end) {
        fprintf(stderr, "gpuq %s: --%s: expected an integer, got '%s'\n", cmd, o->name,
                v ? v : "");
        return GPUQ_EINVAL;
    }
    if (n < min || n > max) {
        fprintf(stderr, "gpuq %s: --%s: must be %lld..%lld, got %lld\n", cmd, o->name, min, max,
                n);
        return GPUQ_EINVAL;
    }
    *out = n;
    return 0;
}

int opts_choice(const char *cmd, const struct opt *o, const char *const *choices)
{
    for (size_t i = 0; choices[i]; i++)
        if (strcmp(o->value, choices[i]) == 0)
            return 0;
    fprintf(stderr, "gpuq %s: --%s: must be one of", cmd, o->name);
    for (size_t i = 0; choices[i]; i++)
        fprintf(stderr, "%s%s", i ? "|" : " ", choices[i]);
    fprintf(stderr, ", got '%s'\n", o->value);
    return GPUQ_EINVAL;
}

void opts_print_help(const struct opt *table)
{
    for (const struct opt *o = table; o && o->name; o++) {
        char left[64];
        if (o->arg)
            snprintf(left, sizeof left, "--%s %s", o->name, o->arg);
        else
            snprintf(left, sizeof left, "--%s", o->name);
        printf("  %-26s %s%s\n", left, o->help, o->repeat ? " (repeatable)" : "");
    }
}
