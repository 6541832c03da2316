#include "libc/proc_stat.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libc/libc.h"

/* The stat of pid (0: this process) into text, from the end of its name,
 * which may hold spaces and parentheses: ") " ends field 2. NULL when it
 * cannot be read. */
static const char *read_stat(pid_t pid, char *text, size_t size)
{
    char path[64];
    if (pid)
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/stat");
    int fd = libc_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    ssize_t length = libc_read(fd, text, size - 1);
    libc_close(fd);
    if (length <= 0)
        return NULL;
    text[length] = '\0';
    return strrchr(text, ')');
}

uint64_t bh_proc_stat_field(pid_t pid, int field)
{
    char text[1024];
    const char *at = read_stat(pid, text, sizeof text);
    for (int i = 2; at && i < field; i++)
        at = strchr(at + 1, ' ');
    return at ? strtoull(at + 1, NULL, 10) : 0;
}

char bh_proc_stat_state(pid_t pid)
{
    char text[1024];
    const char *at = read_stat(pid, text, sizeof text);
    return at && at[1] == ' ' ? at[2] : 0;
}
