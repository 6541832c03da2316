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

#include "config/config.h"

struct bh_identity {
    const char *program;  /* short name; NULL: unknown (explain without
                             --program): program= never matches */
    uid_t uid;
    char *const *env;     /* environ-style, NULL-terminated */
};

/* This process: program_invocation_short_name, geteuid(), environ. */
void bh_identity_self(struct bh_identity *self);

/* Parses text into who; 0, or -1 with what is wrong in why ("has an
 * unknown kind \"group\"; use program=, user= or env="). */
int bh_who_parse(const char *text, struct bh_who *who, char *why, size_t whylen);

/* 1 when the identity is one of whom `who` names. */
int bh_who_matches(const struct bh_who *who, const struct bh_identity *identity);

#endif
