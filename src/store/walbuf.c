/* walbuf.c: the VFS that writes a WAL commit in one call (see walbuf.h).
 *
 * A file opened through it is a struct wb_file followed by the file of the
 * VFS underneath (`real`). Every method forwards to `real`; only a WAL
 * file's writes stop in its buffer, which holds the bytes of [at, at + len)
 * of the file. A file is used by one connection at a time (SQLite's rule
 * for a connection opened without its mutex, as the store's are), so the
 * buffer needs no lock. */
#include "store/walbuf.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

struct wb_file {
    sqlite3_file base;
    sqlite3_file *real;
    sqlite3_io_methods methods; /* the real file's version, these functions */
    char *buf;                  /* NULL: not a WAL file, writes go through */
    size_t len;
    sqlite3_int64 at;
};

static sqlite3_vfs *under_of(sqlite3_vfs *vfs) { return vfs->pAppData; }
static sqlite3_file *real_of(sqlite3_file *f) { return ((struct wb_file *)f)->real; }

/* Writes the buffer to the file and empties it, whatever the outcome (none:
 * nothing to do, as for a file that is not a WAL). In pieces of
 * WALBUF_CHUNK: the unix VFS writes at most 128 KiB a call (and reports a
 * disk full for some larger sizes). */
static int wb_flush(struct wb_file *f)
{
    int rc = SQLITE_OK;
    for (size_t done = 0; done < f->len && rc == SQLITE_OK; done += WALBUF_CHUNK) {
        size_t n = f->len - done < WALBUF_CHUNK ? f->len - done : WALBUF_CHUNK;
        rc = f->real->pMethods->xWrite(f->real, f->buf + done, (int)n,
                                       f->at + (sqlite3_int64)done);
    }
    f->len = 0;
    return rc;
}

static int wb_close(sqlite3_file *file)
{
    struct wb_file *f = (struct wb_file *)file;
    int rc = wb_flush(f);
    int crc = f->real->pMethods ? f->real->pMethods->xClose(f->real) : SQLITE_OK;
    free(f->buf);
    f->buf = NULL;
    return rc != SQLITE_OK ? rc : crc;
}

static int wb_read(sqlite3_file *file, void *out, int n, sqlite3_int64 off)
{
    struct wb_file *f = (struct wb_file *)file;
    int rc = wb_flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xRead(f->real, out, n, off);
}

static int wb_write(sqlite3_file *file, const void *data, int n, sqlite3_int64 off)
{
    struct wb_file *f = (struct wb_file *)file;
    if (!f->buf)
        return f->real->pMethods->xWrite(f->real, data, n, off);
    int rc = SQLITE_OK;
    if (f->len > 0 && (off != f->at + (sqlite3_int64)f->len || f->len + (size_t)n > WALBUF_BYTES))
        rc = wb_flush(f);
    if (rc != SQLITE_OK)
        return rc;
    if ((size_t)n > WALBUF_CHUNK) /* SQLite writes a page or less: never here */
        return f->real->pMethods->xWrite(f->real, data, n, off);
    if (f->len == 0)
        f->at = off;
    memcpy(f->buf + f->len, data, (size_t)n);
    f->len += (size_t)n;
    return SQLITE_OK;
}

static int wb_truncate(sqlite3_file *file, sqlite3_int64 size)
{
    struct wb_file *f = (struct wb_file *)file;
    int rc = wb_flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xTruncate(f->real, size);
}

static int wb_sync(sqlite3_file *file, int flags)
{
    struct wb_file *f = (struct wb_file *)file;
    int rc = wb_flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xSync(f->real, flags);
}

static int wb_file_size(sqlite3_file *file, sqlite3_int64 *size)
{
    struct wb_file *f = (struct wb_file *)file;
    int rc = wb_flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xFileSize(f->real, size);
}

static int wb_fetch(sqlite3_file *file, sqlite3_int64 off, int n, void **p)
{
    struct wb_file *f = (struct wb_file *)file;
    int rc = wb_flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xFetch(f->real, off, n, p);
}

/* The rest only forward. */
static int wb_lock(sqlite3_file *f, int l) { return real_of(f)->pMethods->xLock(real_of(f), l); }
static int wb_unlock(sqlite3_file *f, int l)
{
    return real_of(f)->pMethods->xUnlock(real_of(f), l);
}
static int wb_check_reserved(sqlite3_file *f, int *out)
{
    return real_of(f)->pMethods->xCheckReservedLock(real_of(f), out);
}
static int wb_file_control(sqlite3_file *f, int op, void *arg)
{
    return real_of(f)->pMethods->xFileControl(real_of(f), op, arg);
}
static int wb_sector_size(sqlite3_file *f) { return real_of(f)->pMethods->xSectorSize(real_of(f)); }
static int wb_device_chars(sqlite3_file *f)
{
    return real_of(f)->pMethods->xDeviceCharacteristics(real_of(f));
}
static int wb_shm_map(sqlite3_file *f, int region, int size, int extend, void volatile **p)
{
    return real_of(f)->pMethods->xShmMap(real_of(f), region, size, extend, p);
}
static int wb_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    return real_of(f)->pMethods->xShmLock(real_of(f), off, n, flags);
}
static void wb_shm_barrier(sqlite3_file *f) { real_of(f)->pMethods->xShmBarrier(real_of(f)); }
static int wb_shm_unmap(sqlite3_file *f, int del)
{
    return real_of(f)->pMethods->xShmUnmap(real_of(f), del);
}
static int wb_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    return real_of(f)->pMethods->xUnfetch(real_of(f), off, p);
}

static int wb_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
                   int *out_flags)
{
    struct wb_file *f = (struct wb_file *)file;
    memset(f, 0, sizeof *f);
    f->real = (sqlite3_file *)(f + 1);
    if ((flags & SQLITE_OPEN_WAL) && !(f->buf = malloc(WALBUF_BYTES)))
        return SQLITE_NOMEM;
    int rc = under_of(vfs)->xOpen(under_of(vfs), name, f->real, flags, out_flags);
    const sqlite3_io_methods *rm = f->real->pMethods;
    if (!rm) { /* failed: SQLite calls no method of ours, xClose included */
        free(f->buf);
        f->buf = NULL;
        return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
    }
    f->methods = (sqlite3_io_methods){
        .iVersion = rm->iVersion, .xClose = wb_close, .xRead = wb_read, .xWrite = wb_write,
        .xTruncate = wb_truncate, .xSync = wb_sync, .xFileSize = wb_file_size,
        .xLock = wb_lock, .xUnlock = wb_unlock, .xCheckReservedLock = wb_check_reserved,
        .xFileControl = wb_file_control, .xSectorSize = wb_sector_size,
        .xDeviceCharacteristics = wb_device_chars,
        .xShmMap = rm->iVersion >= 2 ? wb_shm_map : NULL,
        .xShmLock = rm->iVersion >= 2 ? wb_shm_lock : NULL,
        .xShmBarrier = rm->iVersion >= 2 ? wb_shm_barrier : NULL,
        .xShmUnmap = rm->iVersion >= 2 ? wb_shm_unmap : NULL,
        .xFetch = rm->iVersion >= 3 ? wb_fetch : NULL,
        .xUnfetch = rm->iVersion >= 3 ? wb_unfetch : NULL};
    f->base.pMethods = &f->methods;
    return rc;
}

/* The VFS's own calls, forwarded. */
static int wb_delete(sqlite3_vfs *v, const char *name, int sync_dir)
{
    return under_of(v)->xDelete(under_of(v), name, sync_dir);
}
static int wb_access(sqlite3_vfs *v, const char *name, int flags, int *out)
{
    return under_of(v)->xAccess(under_of(v), name, flags, out);
}
static int wb_full_pathname(sqlite3_vfs *v, const char *name, int n, char *out)
{
    return under_of(v)->xFullPathname(under_of(v), name, n, out);
}
static void *wb_dl_open(sqlite3_vfs *v, const char *name)
{
    return under_of(v)->xDlOpen(under_of(v), name);
}
static void wb_dl_error(sqlite3_vfs *v, int n, char *out)
{
    under_of(v)->xDlError(under_of(v), n, out);
}
static void (*wb_dl_sym(sqlite3_vfs *v, void *h, const char *sym))(void)
{
    return under_of(v)->xDlSym(under_of(v), h, sym);
}
static void wb_dl_close(sqlite3_vfs *v, void *h) { under_of(v)->xDlClose(under_of(v), h); }
static int wb_randomness(sqlite3_vfs *v, int n, char *out)
{
    return under_of(v)->xRandomness(under_of(v), n, out);
}
static int wb_sleep(sqlite3_vfs *v, int us) { return under_of(v)->xSleep(under_of(v), us); }
static int wb_current_time(sqlite3_vfs *v, double *out)
{
    return under_of(v)->xCurrentTime(under_of(v), out);
}
static int wb_last_error(sqlite3_vfs *v, int n, char *out)
{
    return under_of(v)->xGetLastError(under_of(v), n, out);
}
static int wb_current_time64(sqlite3_vfs *v, sqlite3_int64 *out)
{
    return under_of(v)->xCurrentTimeInt64(under_of(v), out);
}

int walbuf_register(const char *name, const char *under)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int rc = sqlite3_initialize();
    if (rc != SQLITE_OK)
        return rc;
    pthread_mutex_lock(&lock);
    sqlite3_vfs *u = sqlite3_vfs_find(under);
    if (sqlite3_vfs_find(name)) {
        rc = SQLITE_OK;
    } else if (!u) {
        rc = SQLITE_ERROR;
    } else {
        /* Registered for the life of the process: never freed. */
        size_t nlen = strlen(name) + 1;
        sqlite3_vfs *v = calloc(1, sizeof *v + nlen);
        if (!v) {
            rc = SQLITE_NOMEM;
        } else {
            memcpy(v + 1, name, nlen);
            *v = (sqlite3_vfs){
                .iVersion = u->iVersion < 2 ? u->iVersion : 2,
                .szOsFile = (int)sizeof(struct wb_file) + u->szOsFile,
                .mxPathname = u->mxPathname, .zName = (const char *)(v + 1), .pAppData = u,
                .xOpen = wb_open, .xDelete = wb_delete, .xAccess = wb_access,
                .xFullPathname = wb_full_pathname, .xDlOpen = wb_dl_open,
                .xDlError = wb_dl_error, .xDlSym = wb_dl_sym, .xDlClose = wb_dl_close,
                .xRandomness = wb_randomness, .xSleep = wb_sleep,
                .xCurrentTime = wb_current_time, .xGetLastError = wb_last_error,
                .xCurrentTimeInt64 = u->iVersion >= 2 ? wb_current_time64 : NULL};
            rc = sqlite3_vfs_register(v, 0);
            if (rc != SQLITE_OK)
                free(v);
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}
