/* routes.h: the HTTP API's entry points, handed to http_start: admission
 * (route, caller, body limit — before the body is read) and the handler. */
#ifndef GPUQ_API_ROUTES_H
#define GPUQ_API_ROUTES_H

#include <stddef.h>
#include <stdint.h>

#include "api/http.h"

/* app is the struct head. */
void routes_handle(void *app, struct http_req *req, struct http_resp *resp);
int64_t routes_admit(void *app, struct http_req *req, struct http_resp *resp);

/* Decodes one path segment or query value (n bytes at in, as sent: %-escaped)
 * into out (size bytes, NUL-terminated) strictly: every '%' followed by two hex
 * digits, and the result valid UTF-8 with no NUL or other control character.
 * Returns 0, or GPUQ_EINVAL with *why saying what is wrong (a static string).
 * A pure function (the path/query fuzz target calls it). */
int routes_decode(const char *in, size_t n, char *out, size_t size, const char **why);

#endif
