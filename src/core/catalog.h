/* catalog.h: the set of (capability, model) pairs some worker configuration
 * has served or declared. gpuqd consults it at submit to refuse a pair that no
 * worker ever served, instead of accepting a job nothing can run. Pure; the
 * caller owns the struct (one thread, like struct sched).
 *
 * A model of "" (or NULL) stands for "any model": catalog_serves(cap, "") is
 * catalog_has_cap(cap), and catalog_add(cap, "") records only the capability. */
#ifndef GPUQ_CORE_CATALOG_H
#define GPUQ_CORE_CATALOG_H

#include <stdbool.h>
#include <stddef.h>

struct catalog;

struct catalog *catalog_create(void);
void catalog_destroy(struct catalog *c);

/* catalog_add: records the pair; true when it was new. Names longer than
 * SCHED_NAME_MAX - 1 are cut to that length (as the scheduler does). */
bool catalog_add(struct catalog *c, const char *cap, const char *model);
bool catalog_serves(const struct catalog *c, const char *cap, const char *model);
bool catalog_has_cap(const struct catalog *c, const char *cap);
/* catalog_why_unserved: false when some worker served (cap, model); else true
 * with why the job cannot run ("no worker has registered yet" while the
 * catalog is empty, else "no worker serves model M for C"). */
bool catalog_why_unserved(const struct catalog *c, const char *cap, const char *model, char *why,
                          size_t size);
/* catalog_admit: the submit rule — 0 when the pair is served, when no worker
 * ever registered (nothing is known yet), or when allow_unserved; else
 * GPUQ_ENOENT with msg naming the field ("model: no worker serves …"). */
int catalog_admit(const struct catalog *c, const char *cap, const char *model,
                  bool allow_unserved, char *msg, size_t size);
/* catalog_list: calls fn for each pair with a model, in the order added;
 * returns how many. */
int catalog_list(const struct catalog *c, void (*fn)(const char *cap, const char *model, void *arg),
                 void *arg);

#endif
