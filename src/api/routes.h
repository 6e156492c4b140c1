/* routes.h: the HTTP API's entry points, handed to http_start: admission
 * (route, caller, body limit — before the body is read) and the handler. */
#ifndef GPUQ_API_ROUTES_H
#define GPUQ_API_ROUTES_H

#include <stdint.h>

#include "api/http.h"

/* app is the struct head. */
void routes_handle(void *app, struct http_req *req, struct http_resp *resp);
int64_t routes_admit(void *app, struct http_req *req, struct http_resp *resp);

#endif
