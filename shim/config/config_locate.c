/* Where the rules file is. Every variable is read with secure_getenv(): in a
 * setuid or otherwise AT_SECURE process the caller's environment must not
 * pick the rules, so only /etc is looked at there. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"

static const char system_rules[] = "/etc/bulkhead/rules.ini";

/* With the effective ids, which are the ones open() will use. */
static int is_readable(const char *path)
{
    return faccessat(AT_FDCWD, path, R_OK, AT_EACCESS) == 0;
}

/* $XDG_CONFIG_HOME/bulkhead/rules.ini, or ~/.config/...; 0 when neither
 * variable gives an absolute directory (the XDG spec ignores relative ones)
 * or the path does not fit. */
static int user_rules_path(char *buf, unsigned long buflen)
{
    const char *config_home = secure_getenv("XDG_CONFIG_HOME");
    const char *home = secure_getenv("HOME");
    int length;

    if (config_home && config_home[0] == '/')
        length = snprintf(buf, buflen, "%s/bulkhead/rules.ini", config_home);
    else if (home && home[0] == '/')
        length = snprintf(buf, buflen, "%s/.config/bulkhead/rules.ini", home);
    else
        return 0;
    return length >= 0 && (unsigned long)length < buflen;
}

int bh_config_locate(char *buf, unsigned long buflen)
{
    const char *named = secure_getenv("BULKHEAD_CONFIG");

    /* A file named explicitly is used even when missing, so that loading it
     * fails loudly instead of quietly falling back to another file. A
     * relative name is made absolute here, once: the process may chdir()
     * before it reads the file again or starts a child (see
     * bh_config_hand_down). */
    if (named && named[0] != '\0') {
        char cwd[4096];
        if (named[0] == '/' || !getcwd(cwd, sizeof cwd))
            snprintf(buf, buflen, "%s", named);
        else
            snprintf(buf, buflen, "%s/%s", strcmp(cwd, "/") == 0 ? "" : cwd, named);
        return 0;
    }
    if (user_rules_path(buf, buflen) && is_readable(buf))
        return 0;
    snprintf(buf, buflen, "%s", system_rules);
    return is_readable(buf) ? 0 : -1;
}

/* The entry is replaced in place, as glibc's setenv() does for a variable
 * that exists, rather than through setenv(): the program may define its
 * own (bash does, and it knows nothing of its variables before main), and
 * a program that reads main()'s envp sees the same array. Every entry of
 * the name is replaced: getenv() takes the first, execve() passes all. */
void bh_config_hand_down(const char *located)
{
    static const char name[] = "BULKHEAD_CONFIG=";
    const char *named = secure_getenv("BULKHEAD_CONFIG");
    if (!named || named[0] == '\0' || named[0] == '/' || located[0] != '/')
        return;
    size_t size = sizeof name + strlen(located);
    for (char **entry = environ; *entry; entry++) {
        if (strncmp(*entry, name, sizeof name - 1) != 0)
            continue;
        char *absolute = malloc(size);  /* in environ for the image's life */
        if (!absolute)
            return;
        snprintf(absolute, size, "%s%s", name, located);
        *entry = absolute;
    }
}
