/* WHO: whom a compartment's reserve or bypass is for.
 *
 * A WHO is written "program=GLOB", "user=NAME" (or a uid) or
 * "env=VAR=VALUE". It is matched against an identity: the shim's own (the
 * program's short name, its effective uid, its environment, all fixed for
 * the life of a program image), or one `bulkhead explain` is asked about.
 * A leaf: libc only (fnmatch, getpwnam_r), never the shim's hooks. */
#ifndef BH_WHO_H
#define BH_WHO_H

#include <stddef.h>
#include <sys/types.h>

enum { BH_WHO_MAX = 64 };  /* a WHO as written, with NUL */

/* Whom a reserve or a bypass is for. */
enum bh_who_kind {
    BH_WHO_PROGRAM,  /* program=GLOB: argv[0]'s base name, or the executed file's */
    BH_WHO_USER,     /* user=NAME or user=UID: the effective user */
    BH_WHO_ENV,      /* env=VAR=VALUE: the variable set to exactly VALUE */
};
struct bh_who {
    enum bh_who_kind kind;
    char text[BH_WHO_MAX]; /* as written, "program=billing-*": names it in
                              stat, set and explain, and in the namespace */
    uid_t uid;             /* user=: resolved when the file is read */
};

struct bh_identity {
    const char *program;  /* argv[0]'s short name; NULL: unknown (explain
                             without --program): program= never matches */
    const char *executed; /* the short name of the file execve() was given,
                             when it differs: a script's own name, which
                             its #! interpreter's argv[0] hides; or NULL */
    uid_t uid;
    char *const *env;     /* environ-style, NULL-terminated */
};

/* This process: program_invocation_short_name, the file it was executed
 * as (getauxval(AT_EXECFN)), geteuid(), environ. comm is not asked: it is
 * the executed file's name cut to 15 characters, and the program may
 * rename it (prctl PR_SET_NAME). */
void bh_identity_self(struct bh_identity *self);

/* Parses text into who; 0, or -1 with what is wrong in why ("has an
 * unknown kind \"group\"; use program=, user= or env="). */
int bh_who_parse(const char *text, struct bh_who *who, char *why, size_t whylen);

/* 1 when the identity is one of whom `who` names; program= matches
 * either name. */
int bh_who_matches(const struct bh_who *who, const struct bh_identity *identity);
/* For a program= WHO: the identity's name it matched (program, then
 * executed), or NULL. */
const char *bh_who_program_matched(const struct bh_who *who,
                                   const struct bh_identity *identity);

#endif
