/* libFuzzer: rules file bytes -> bh_config_load -> (if valid) the rule
 * index -> free. bh_config_load takes a path only, so each input goes
 * through one memfd, reopened by its /proc/self/fd path (a regular file,
 * as the parser demands): an ftruncate, a pwrite and an open per run. */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config/config.h"
#include "rules/rule_index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];
static size_t path_length;

struct seen {
    int count;
};

/* Every error is one line naming the file first. */
static void check_error(void *ctx, const char *message)
{
    struct seen *seen = ctx;
    seen->count++;
    if (strncmp(message, path, path_length) != 0 || message[path_length] != ':'
        || strchr(message, '\n'))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    if (fd < 0) {
        fd = memfd_create("rules.ini", MFD_CLOEXEC);
        if (fd < 0)
            abort();
        path_length = (size_t)snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();

    struct bh_config config;
    struct seen seen = { 0 };
    int errors = bh_config_load(path, &config, check_error, &seen);
    if (errors != seen.count)
        abort();
    if (errors == 0) {
        struct bh_rule_index *index = bh_rule_index_build(&config);
        if (!index)
            abort();
        bh_rule_index_free(index);
    }
    bh_config_free(&config);
    return 0;
}
