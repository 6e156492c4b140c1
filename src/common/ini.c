/* ini.c: a small INI reader: sections, key = value, comments. */
#include "ini.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "err.h"

#define INI_LINE_MAX 4096

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static int parse_line(char *line, char *section, size_t section_size, const char *name, int lineno,
                      ini_cb cb, void *arg, char *err, size_t errlen)
{
    char *s = trim(line);
    if (*s == '\0' || *s == '#' || *s == ';')
        return 0;
    if (*s == '[') {
        char *end = strchr(s, ']');
        char *rest = end ? trim(end + 1) : NULL;
        if (!end || (*rest != '\0' && *rest != '#' && *rest != ';')) {
            snprintf(err, errlen, "%s:%d: malformed section header", name, lineno);
            return GPUQ_EINVAL;
        }
        *end = '\0';
        char *sec = trim(s + 1);
        if (strlen(sec) >= section_size) {
            snprintf(err, errlen, "%s:%d: section name too long", name, lineno);
            return GPUQ_EINVAL;
        }
        strcpy(section, sec);
        return 0;
    }
    char *eq = strchr(s, '=');
    if (!eq) {
        snprintf(err, errlen, "%s:%d: expected 'key = value'", name, lineno);
        return GPUQ_EINVAL;
    }
    *eq = '\0';
    char *key = trim(s);
    char *value = eq + 1;
    /* An inline comment starts at '#' or ';' after a blank, outside quotes. */
    int quoted = 0;
    for (char *p = value; *p; p++) {
        if (*p == '"')
            quoted = !quoted;
        else if (!quoted && (*p == '#' || *p == ';') && p > value &&
                 isspace((unsigned char)p[-1])) {
            *p = '\0';
            break;
        }
    }
    value = trim(value);
    if (*key == '\0') {
        snprintf(err, errlen, "%s:%d: empty key", name, lineno);
        return GPUQ_EINVAL;
    }
    size_t vlen = strlen(value);
    if (vlen >= 2 && value[0] == '"' && value[vlen - 1] == '"') {
        value[vlen - 1] = '\0';
        value++;
    }
    char msg[512] = "";
    if (cb(arg, section, key, value, lineno, msg, sizeof msg)) {
        snprintf(err, errlen, "%s:%d: %s", name, lineno, msg[0] ? msg : "invalid setting");
        return GPUQ_EINVAL;
    }
    return 0;
}

int ini_parse_string(const char *text, const char *name, ini_cb cb, void *arg, char *err,
                     size_t errlen)
{
    char section[128] = "";
    char line[INI_LINE_MAX];
    int lineno = 0;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        lineno++;
        if (n >= sizeof line) {
            snprintf(err, errlen, "%s:%d: line too long", name, lineno);
            return GPUQ_EINVAL;
        }
        memcpy(line, p, n);
        line[n] = '\0';
        int rc = parse_line(line, section, sizeof section, name, lineno, cb, arg, err, errlen);
        if (rc)
            return rc;
        p += n + (nl ? 1 : 0);
    }
    return 0;
}

int ini_parse_file(const char *path, ini_cb cb, void *arg, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return GPUQ_ENOENT;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            text = xrealloc(text, cap);
        }
        memcpy(text + len, chunk, n);
        len += n;
    }
    fclose(f);
    if (!text)
        text = xstrdup("");
    else
        text[len] = '\0';
    if (strlen(text) != len) {
        free(text);
        snprintf(err, errlen, "%s: contains a NUL byte", path);
        return GPUQ_EINVAL;
    }
    int rc = ini_parse_string(text, path, cb, arg, err, errlen);
    free(text);
    return rc;
}

int ini_int(const char *value, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno || end == value || *end != '\0' || v < min || v > max)
        return GPUQ_EINVAL;
    *out = v;
    return 0;
}

int ini_double(const char *value, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (errno || end == value || *end != '\0' || !isfinite(v) || v < min || v > max)
        return GPUQ_EINVAL;
    *out = v;
    return 0;
}

int ini_bool(const char *value, int *out)
{
    if (!strcmp(value, "true") || !strcmp(value, "yes") || !strcmp(value, "on") ||
        !strcmp(value, "1")) {
        *out = 1;
        return 0;
    }
    if (!strcmp(value, "false") || !strcmp(value, "no") || !strcmp(value, "off") ||
        !strcmp(value, "0")) {
        *out = 0;
        return 0;
    }
    return GPUQ_EINVAL;
}
