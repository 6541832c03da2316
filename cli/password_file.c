/* See password_file.h. */
#include "password_file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int bh_password_file_problem(const struct bh_config *config, char *why, size_t whylen)
{
    const char *path = config->fleet_password_file;
    struct stat info;
    if (!path)
        return 0;
    if (stat(path, &info) < 0) {
        snprintf(why, whylen, "%s:%d: fleet_password_file: %s: %s", config->path,
                 config->fleet_password_file_line, path, strerror(errno));
        return -1;
    }
    /* Not a file (a FIFO, /dev/zero): the agent says so, and reads nothing. */
    if (S_ISREG(info.st_mode) && (info.st_mode & 077)) {
        snprintf(why, whylen, "%s:%d: fleet_password_file: %s: others may read it "
                 "(mode %04o); chmod 600 it", config->path,
                 config->fleet_password_file_line, path,
                 (unsigned)(info.st_mode & 07777));
        return 1;
    }
    return 0;
}
