/* See password_file.h. */
#include "password_file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int bh_password_file_problem(const struct bh_config *config, enum bh_password_for which,
                             char *why, size_t whylen)
{
    const char *key = which == BH_PASSWORD_REDIS ? "fleet_password_file"
                                                 : "fleet_sentinel_password_file";
    const char *path = which == BH_PASSWORD_REDIS ? config->fleet_password_file
                                                  : config->fleet_sentinel_password_file;
    int line = which == BH_PASSWORD_REDIS ? config->fleet_password_file_line
                                          : config->fleet_sentinel_password_file_line;
    struct stat info;
    if (!path)
        return 0;
    if (stat(path, &info) < 0) {
        snprintf(why, whylen, "%s:%d: %s: %s: %s", config->path, line, key, path,
                 strerror(errno));
        return -1;
    }
    /* Not a file (a FIFO, /dev/zero): the agent says so, and reads nothing. */
    if (S_ISREG(info.st_mode) && (info.st_mode & 077)) {
        snprintf(why, whylen, "%s:%d: %s: %s: others may read it (mode %04o); chmod 600 it",
                 config->path, line, key, path, (unsigned)(info.st_mode & 07777));
        return 1;
    }
    return 0;
}
