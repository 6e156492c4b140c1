/* opts.h: command-line flags of the gpuq commands. A command declares its
 * flags in a table ending with {0}; opts_parse fills in the values given and
 * collects positional arguments. Flags are written --name VALUE or
 * --name=VALUE; "--" ends the flags. The tables own nothing: values point
 * into argv. */
#ifndef GPUQ_CLI_OPTS_H
#define GPUQ_CLI_OPTS_H

#include <stddef.h>

#define OPTS_MAX_REPEAT 64

struct opt {
    const char *name;     /* without the leading "--" */
    const char *arg;      /* name of the value in help ("N"), or NULL for a boolean flag */
    const char *help;     /* one line */
    int repeat;           /* 1: may be given up to OPTS_MAX_REPEAT times */
    /* Filled in by opts_parse. Invariant: nvalues > 0 iff the flag was given;
     * value is the last one given ("1" for a boolean flag). */
    const char *value;
    const char *values[OPTS_MAX_REPEAT];
    size_t nvalues;
};

/* opts_parse parses argv[0..argc) against the flags of tables (a NULL-ended
 * list of tables). Positional arguments go to pos (at most maxpos). On a usage
 * error prints "gpuq CMD: reason" naming the flag to stderr and returns
 * GPUQ_EINVAL. */
int opts_parse(const char *cmd, struct opt *const *tables, int argc, char **argv,
               const char **pos, size_t maxpos, size_t *npos);

/* opts_find returns the flag called name in table, or NULL. */
struct opt *opts_find(struct opt *table, const char *name);

/* opts_given is nonzero when the flag was on the command line. */
int opts_given(const struct opt *o);

/* opts_int parses the flag's value as an integer in [min, max]; on failure
 * prints "gpuq CMD: --NAME: …" and returns GPUQ_EINVAL. */
int opts_int(const char *cmd, const struct opt *o, long long min, long long max,
             long long *out);

/* opts_choice checks the flag's value is one of the NULL-ended choices. */
int opts_choice(const char *cmd, const struct opt *o, const char *const *choices);

/* opts_print_help prints the flags of table, one per line, to stdout. */
void opts_print_help(const struct opt *table);

#endif
