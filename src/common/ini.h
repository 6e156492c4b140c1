/* ini.h: the configuration file format shared by gpuqd and gpuq-agent.
 *
 *   # comment            ; comment
 *   [section]
 *   key = value          (value runs to end of line or to an inline comment — '#'
 *                         or ';' after a blank — surrounding blanks trimmed;
 *                         optional "double quotes" are removed)
 *
 * Lines are at most 4095 bytes; keys outside any section have section "". */
#ifndef GPUQ_INI_H
#define GPUQ_INI_H

#include <stddef.h>

/* Called for each key; return 0 to go on, or nonzero to stop (after writing a
 * message into err) — ini_parse_* then returns GPUQ_EINVAL. */
typedef int (*ini_cb)(void *arg, const char *section, const char *key, const char *value,
                      int line, char *err, size_t errlen);

/* Parse a file / a string. On error returns GPUQ_EINVAL (or GPUQ_ENOENT for a
 * missing file) with "FILE:LINE: reason" in err. */
int ini_parse_file(const char *path, ini_cb cb, void *arg, char *err, size_t errlen);
int ini_parse_string(const char *text, const char *name, ini_cb cb, void *arg, char *err,
                     size_t errlen);

/* Value parsers: 0 on success, GPUQ_EINVAL if value is not a number in [min, max]. */
int ini_int(const char *value, long long min, long long max, long long *out);
int ini_double(const char *value, double min, double max, double *out);
int ini_bool(const char *value, int *out);

#endif
