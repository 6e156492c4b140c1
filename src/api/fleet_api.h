/* fleet_api.h: the fleet over HTTP — GET /v1/fleet (one JSON snapshot), GET
 * /v1/fleet/events (server-sent events: a snapshot whenever it changed, at
 * most FLEET_SSE_HZ a second) and the dashboard's static files, embedded in
 * gpuqd at build time (web/, scripts/embed-web). routes.c calls these from
 * its table; the caller's scope (tenant_id, -1 for the admin) is decided
 * there. */
#ifndef GPUQ_API_FLEET_API_H
#define GPUQ_API_FLEET_API_H

#include <stddef.h>
#include <stdint.h>

#include "api/http.h"
#include "common/buf.h"

struct head;
struct fleet_view;

#define FLEET_SSE_HZ 4

/* One embedded file (the generated web_assets.c defines the table). */
struct web_asset {
    const char *name;          /* "index.html", "dash.js", ... */
    const char *content_type;
    const unsigned char *data;
    size_t len;
};
extern const struct web_asset web_assets[];
extern const size_t web_nassets;

/* Renders v as the JSON document of GET /v1/fleet. */
void fleet_api_render(struct buf *out, const struct fleet_view *v);

/* Fills resp: 200 with the snapshot. */
void fleet_api_get(struct head *h, int64_t tenant_id, struct http_resp *resp);
/* Turns resp into the event stream (200, text/event-stream). */
void fleet_api_events(struct head *h, int64_t tenant_id, struct http_req *req,
                      struct http_resp *resp);
/* Fills resp with the embedded file name ("" = index.html): 0, or GPUQ_ENOENT
 * (resp untouched). */
int fleet_api_asset(const char *name, struct http_resp *resp);

#endif
