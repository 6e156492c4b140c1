/* datadir.c: the data directory — its creation, the one-head lock and the
 * small files gpuqd keeps there (see datadir.h). */
#include "head/datadir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"

#define MOD "gpuqd"
#define LOCK_NAME "lock"

int datadir_create(const char *dir, char *err, size_t errlen)
{
    char tmp[512];
    if (!*dir || strlen(dir) >= sizeof tmp) {
        snprintf(err, errlen, "--data: '%.64s' is not a usable directory name", dir);
        return GPUQ_EINVAL;
    }
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0700) && errno != EEXIST)
            goto fail;
        *p = '/';
    }
    if (mkdir(tmp, 0700) && errno != EEXIST)
        goto fail;
    return 0;
fail:
    snprintf(err, errlen, "--data: cannot create %s: %s", tmp, strerror(errno));
    return GPUQ_EIO;
}

/* The pid recorded in an open lock file, or 0 when it cannot be read. */
static long lock_holder(int fd)
{
    char text[32];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    char *end;
    long pid = strtol(text, &end, 10);
    return pid > 0 && (*end == '\n' || *end == '\0') ? pid : 0;
}

int datadir_lock(const char *dir, struct datadir_lock *out, char *err, size_t errlen)
{
    out->fd = -1;
    char path[600];
    snprintf(path, sizeof path, "%s/" LOCK_NAME, dir);
    /* Never truncated at open: the holder's pid must stay readable by a loser. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return GPUQ_EIO;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e != EWOULDBLOCK) {
            snprintf(err, errlen, "cannot lock %s: %s", path, strerror(e));
            close(fd);
            return GPUQ_EIO;
        }
        /* The holder writes its pid just after locking: give it a moment to appear. */
        long pid = 0;
        for (int i = 0; i < 50 && !(pid = lock_holder(fd)); i++)
            usleep(10000);
        char who[48] = "a process whose pid is not recorded";
        if (pid)
            snprintf(who, sizeof who, "pid %ld", pid);
        snprintf(err, errlen,
                 "data directory %s is in use by another gpuqd (%s, holding %s); "
                 "only one head may use a data directory",
                 dir, who, path);
        close(fd);
        return GPUQ_EEXIST;
    }
    char text[32];
    int len = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        close(fd);
        return GPUQ_EIO;
    }
    out->fd = fd;
    return 0;
}

void datadir_unlock(struct datadir_lock *l)
{
    if (l->fd < 0)
        return;
    /* The file stays: removing it would let a newcomer lock a fresh inode while
     * a third process still waits on the old one. Closing releases the lock. */
    if (ftruncate(l->fd, 0) != 0)
        log_debug(MOD, "cannot clear the lock file: %s", strerror(errno));
    close(l->fd);
    l->fd = -1;
}

int datadir_write_file(const char *dir, const char *name, const char *text, mode_t mode)
{
    char path[600], tmp[610];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return GPUQ_EIO;
    size_t len = strlen(text);
    if (write(fd, text, len) != (ssize_t)len || fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
        return GPUQ_EIO;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return GPUQ_EIO;
    }
    return 0;
}

void datadir_remove_file(const char *dir, const char *name)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

int datadir_admin_key(const char *dir, char hash[TOKEN_HASH_HEX], char *err, size_t errlen)
{
    const char *env = getenv("GPUQ_ADMIN_KEY");
    char key[128] = "", line[140];
    if (env && *env) {
        if (strlen(env) < 16 || strlen(env) >= sizeof key) {
            snprintf(err, errlen, "GPUQ_ADMIN_KEY: must be 16 to %zu characters",
                     sizeof key - 1);
            return GPUQ_EINVAL;
        }
        snprintf(key, sizeof key, "%s", env);
        /* Tools that read DATA/admin.key must find the key in use. */
        snprintf(line, sizeof line, "%s\n", key);
        if (datadir_write_file(dir, "admin.key", line, 0600))
            log_warn(MOD, "cannot write %s/admin.key: %s", dir, strerror(errno));
    } else {
        char path[600];
        snprintf(path, sizeof path, "%s/admin.key", dir);
        FILE *f = fopen(path, "re");
        if (f) {
            if (!fgets(key, sizeof key, f))
                key[0] = '\0';
            fclose(f);
            key[strcspn(key, "\r\n")] = '\0';
        }
        if (strlen(key) < 16) {
            if (token_random("gqa_", key, sizeof key)) {
                snprintf(err, errlen, "no randomness available for the admin key");
                return GPUQ_EIO;
            }
            snprintf(line, sizeof line, "%s\n", key);
            if (datadir_write_file(dir, "admin.key", line, 0600)) {
                snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
                return GPUQ_EIO;
            }
            log_info(MOD, "created the admin key in %s", path);
        }
    }
    token_hash(key, hash);
    return 0;
}
