#include "libc/proc_stat.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libc/libc.h"

uint64_t bh_proc_stat_field(pid_t pid, int field)
{
    char path[64], text[1024];
    if (pid)
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/stat");
    int fd = libc_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    ssize_t length = libc_read(fd, text, sizeof text - 1);
    libc_close(fd);
    if (length <= 0)
        return 0;
    text[length] = '\0';
    /* Fields count from the end of the name, which may hold spaces and
     * parentheses: ") " ends field 2. */
    const char *at = strrchr(text, ')');
    for (int i = 2; at && i < field; i++)
        at = strchr(at + 1, ' ');
    return at ? strtoull(at + 1, NULL, 10) : 0;
}
