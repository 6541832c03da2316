/* Which programs of the tree are Go programs, whose non-blocking connects
 * may wait for a permit as long as a blocking one (connects.c): Go's
 * runtime parks the goroutine in the trapped connect and runs the others
 * on another thread, so nothing of the program stalls meanwhile.
 *
 * Told by the process's executable (/proc/PID/exe), as `run` tells its
 * command (cli_is_go_image: Go's build info), read once per executable
 * file: a stat() of the link per matched connect finds it in a small
 * table by device, inode, size and modification time, so an exec of
 * another program, or a binary rebuilt in place, is read again. A process
 * we may not read (it is then unreadable.c's anyway) or whose executable
 * is gone is not Go: its connects wait as a C program's do.
 *
 * Shared by the workers under one mutex, never held while a file is
 * read; two workers reading the same new file both write the same. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "supervisor/supervisor.h"

enum { KNOWN_MAX = 32 };  /* distinct executables in a tree, at once */

struct known {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec modified;
    int go;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct known known[KNOWN_MAX];
static int known_count, next_replaced;

static int same_file(const struct known *entry, const struct stat *info)
{
    return entry->dev == info->st_dev && entry->ino == info->st_ino &&
           entry->size == info->st_size &&
           entry->modified.tv_sec == info->st_mtim.tv_sec &&
           entry->modified.tv_nsec == info->st_mtim.tv_nsec;
}

/* 1 Go, 0 not, -1 not in the table. */
static int look_up(const struct stat *info)
{
    int go = -1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < known_count && go < 0; i++)
        if (same_file(&known[i], info))
            go = known[i].go;
    pthread_mutex_unlock(&lock);
    return go;
}

/* Into the table; when full, over the oldest entry. */
static void remember(const struct stat *info, int go)
{
    struct known entry = { info->st_dev, info->st_ino, info->st_size, info->st_mtim, go };
    pthread_mutex_lock(&lock);
    if (known_count < KNOWN_MAX) {
        known[known_count++] = entry;
    } else {
        known[next_replaced] = entry;
        next_replaced = (next_replaced + 1) % KNOWN_MAX;
    }
    pthread_mutex_unlock(&lock);
}

int sv_program_is_go(pid_t pid)
{
    char path[64];
    struct stat info;
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    if (stat(path, &info) < 0)
        return 0;
    int go = look_up(&info);
    if (go >= 0)
        return go;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    /* the file opened, which an exec since the stat may have changed */
    int known_file = fstat(fd, &info) == 0;
    go = known_file && cli_is_go_image(fd);
    close(fd);
    if (known_file)
        remember(&info, go);
    return go;
}
