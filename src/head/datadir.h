/* datadir.h: gpuqd's data directory — created if missing, owned by one head
 * at a time through an exclusive lock on DATA/lock (which records the
 * holder's pid), and the small files in it: the admin key and head.url.
 *
 * Order at start: datadir_create, datadir_lock, and only then anything that
 * reads or writes the directory (store, admin key, head.url). A second head
 * on the same directory fails datadir_lock and must exit without touching it. */
#ifndef GPUQ_HEAD_DATADIR_H
#define GPUQ_HEAD_DATADIR_H

#include <stddef.h>
#include <sys/types.h>

#include "common/token.h"

/* The held lock. Invariant: fd >= 0 while held; the lock is released when fd
 * is closed (datadir_unlock) or the process dies, whatever the way. */
struct datadir_lock {
    int fd;
};

/* Creates dir and its parents (mode 0700). GPUQ_EIO with err set. */
int datadir_create(const char *dir, char *err, size_t errlen);

/* Takes the exclusive lock on DIR/lock without waiting and writes this pid
 * into it. GPUQ_EEXIST when another process holds it (err names the directory
 * and, when it can be read, the holder's pid); GPUQ_EIO on other failures.
 * Nothing else in dir is created, changed or removed. */
int datadir_lock(const char *dir, struct datadir_lock *out, char *err, size_t errlen);
void datadir_unlock(struct datadir_lock *l);

/* Writes DIR/name atomically (temp file, fsync, rename) with mode. 0 or GPUQ_EIO (errno set). */
int datadir_write_file(const char *dir, const char *name, const char *text, mode_t mode);
/* Removes DIR/name (absent is fine). */
void datadir_remove_file(const char *dir, const char *name);

/* The admin key's hash: the key is $GPUQ_ADMIN_KEY (then also written to
 * DIR/admin.key, for tools that read it there), else DIR/admin.key, made with
 * a fresh random key on first start. GPUQ_EINVAL/EIO with err set. */
int datadir_admin_key(const char *dir, char hash[TOKEN_HASH_HEX], char *err, size_t errlen);

#endif
