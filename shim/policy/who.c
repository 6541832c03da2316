/* WHO: parsing "program=GLOB", "user=NAME|UID" and "env=VAR=VALUE", and
 * matching them against an identity.
 *
 * Runs inside the shim while the rules are read, before main: plain libc
 * (fnmatch, getpwnam_r), no sockets of its own, nothing that reaches the
 * shim's hooks. */
#include <errno.h>
#include <fnmatch.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "policy/who.h"

enum {
    PASSWD_BUFFER_START = 1024,
    PASSWD_BUFFER_MAX = 1 << 20,  /* a passwd entry is a line of text */
};

extern char **environ;

void bh_identity_self(struct bh_identity *self)
{
    self->program = program_invocation_short_name;
    /* For a script the kernel starts its interpreter with the script's
     * path as argv[1]: AT_EXECFN still names the script. */
    const char *executed = (const char *)getauxval(AT_EXECFN);
    const char *slash = executed ? strrchr(executed, '/') : NULL;
    self->executed = slash ? slash + 1 : executed;
    if (self->executed && strcmp(self->executed, self->program) == 0)
        self->executed = NULL;
    self->uid = geteuid();
    self->env = environ;
}

/* ASCII only: the shim runs under whatever locale the host program set. */
static bool is_identifier_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_identifier_char(char c)
{
    return is_identifier_start(c) || (c >= '0' && c <= '9');
}

/* Past the bracket expression opening at text[0], or NULL when it never
 * closes: fnmatch would then take the '[' as a plain character, which is
 * never what a glob's author meant. A ']' right after "[" or "[!" is a
 * member, and "[:alpha:]" inside is one class. */
static const char *skip_bracket(const char *text)
{
    const char *c = text + 1;

    if (*c == '!' || *c == '^')
        c++;
    if (*c == ']')
        c++;
    while (*c && *c != ']') {
        if (c[0] == '[' && c[1] == ':') {
            const char *end = strstr(c + 2, ":]");
            if (!end)
                return NULL;
            c = end + 2;
        } else {
            c++;
        }
    }
    return *c ? c + 1 : NULL;
}

/* NULL, or what is wrong with a program= glob. */
static const char *check_glob(const char *glob)
{
    if (*glob == '\0')
        return "has a bad glob (empty)";
    if (strchr(glob, '/'))
        return "has a bad glob (a '/': program= matches the program's short "
               "name, without its directory)";
    for (const char *c = glob; *c; ) {
        if (*c == '\\' && c[1]) {
            c += 2;  /* fnmatch takes the next character as it is */
        } else if (*c == '[') {
            c = skip_bracket(c);
            if (!c)
                return "has a bad glob (a '[' without its ']')";
        } else {
            c++;
        }
    }
    return NULL;
}

/* NULL, or what is wrong with an env= VAR=VALUE; VALUE may be empty. */
static const char *check_env(const char *assignment)
{
    const char *equals = strchr(assignment, '=');

    if (!equals)
        return "has no '=' between variable and value (use env=VAR=VALUE)";
    if (!is_identifier_start(assignment[0]))
        return "has a bad variable name (use A-Z a-z 0-9 _, not starting "
               "with a digit)";
    for (const char *c = assignment; c < equals; c++)
        if (!is_identifier_char(*c))
            return "has a bad variable name (use A-Z a-z 0-9 _, not starting "
                   "with a digit)";
    return NULL;
}

/* A uid written in digits; -1 when it is not one. (uid_t)-1 is no uid: it
 * means "unchanged" to setresuid and friends. */
static int parse_uid(const char *text, uid_t *uid)
{
    char *end;
    unsigned long long number;

    if (text[0] < '0' || text[0] > '9')
        return -1;
    errno = 0;
    number = strtoull(text, &end, 10);
    if (*end != '\0' || errno == ERANGE || number >= (uid_t)-1)
        return -1;
    *uid = (uid_t)number;
    return 0;
}

/* getpwnam_r with a buffer grown until the entry fits. 0 found, else the
 * error (ENOENT when there is no such user). */
static int look_up_user(const char *name, uid_t *uid)
{
    struct passwd entry, *found = NULL;
    size_t size = PASSWD_BUFFER_START;
    int error;

    for (;;) {
        char *buffer = malloc(size);
        if (!buffer)
            return ENOMEM;
        error = getpwnam_r(name, &entry, buffer, size, &found);
        if (error == 0 && found)
            *uid = entry.pw_uid;
        free(buffer);
        if (error != ERANGE || size >= PASSWD_BUFFER_MAX)
            break;
        size *= 2;
    }
    if (error == 0 && !found)
        return ENOENT;
    return error;
}

/* A name first, as chown does, then digits as a uid. */
static const char *parse_user(const char *name, struct bh_who *who,
                              char *why, size_t whylen)
{
    int error;

    if (*name == '\0')
        return "has no user name (use user=NAME or user=UID)";
    error = look_up_user(name, &who->uid);
    if (error == 0)
        return NULL;
    if (parse_uid(name, &who->uid) == 0)
        return NULL;
    if (error == ENOENT)
        return "names no such user";
    snprintf(why, whylen, "names a user that cannot be looked up: %s",
             strerror(error));
    return why;
}

/* The part after the kind's "=" in text, or NULL when text is not of it. */
static const char *after_kind(const char *text, const char *kind)
{
    size_t length = strlen(kind);
    return strncmp(text, kind, length) == 0 ? text + length : NULL;
}

static const char *parse_kind(const char *text, struct bh_who *who,
                              char *why, size_t whylen)
{
    const char *rest;

    if ((rest = after_kind(text, "program="))) {
        who->kind = BH_WHO_PROGRAM;
        return check_glob(rest);
    }
    if ((rest = after_kind(text, "user="))) {
        who->kind = BH_WHO_USER;
        return parse_user(rest, who, why, whylen);
    }
    if ((rest = after_kind(text, "env="))) {
        who->kind = BH_WHO_ENV;
        return check_env(rest);
    }
    snprintf(why, whylen, "has an unknown kind \"%.*s\"; use program=, user= "
             "or env=", (int)strcspn(text, "="), text);
    return why;
}

int bh_who_parse(const char *text, struct bh_who *who, char *why, size_t whylen)
{
    const char *problem;

    memset(who, 0, sizeof *who);
    if (strlen(text) >= BH_WHO_MAX) {
        snprintf(why, whylen, "is longer than %d characters", BH_WHO_MAX - 1);
        return -1;
    }
    problem = parse_kind(text, who, why, whylen);
    if (problem) {
        if (problem != why)
            snprintf(why, whylen, "%s", problem);
        return -1;
    }
    snprintf(who->text, sizeof who->text, "%s", text);
    return 0;
}

/* env= is matched on the whole entry: "VAR=VALUE" exactly. */
static bool has_entry(char *const *env, const char *entry)
{
    for (; env && *env; env++)
        if (strcmp(*env, entry) == 0)
            return true;
    return false;
}

const char *bh_who_program_matched(const struct bh_who *who,
                                   const struct bh_identity *identity)
{
    const char *glob = who->text + strlen("program=");
    if (identity->program && fnmatch(glob, identity->program, 0) == 0)
        return identity->program;
    if (identity->executed && fnmatch(glob, identity->executed, 0) == 0)
        return identity->executed;
    return NULL;
}

int bh_who_matches(const struct bh_who *who, const struct bh_identity *identity)
{
    switch (who->kind) {
    case BH_WHO_PROGRAM:
        return bh_who_program_matched(who, identity) != NULL;
    case BH_WHO_USER:
        return identity->uid == who->uid;
    case BH_WHO_ENV:
        return has_entry(identity->env, who->text + strlen("env="));
    }
    return 0;
}
