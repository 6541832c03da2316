/* WHO matching; see who.h. */
#include "policy/who.h"

#include <errno.h>
#include <fnmatch.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

void bh_identity_self(struct bh_identity *self)
{
    self->program = program_invocation_short_name;
    self->uid = geteuid();
    self->env = environ;
}

int bh_who_matches(const struct bh_who *who, const struct bh_identity *identity)
{
    const char *value = strchr(who->text, '=') + 1;
    switch (who->kind) {
    case BH_WHO_PROGRAM:
        return identity->program && fnmatch(value, identity->program, 0) == 0;
    case BH_WHO_USER:
        return identity->uid == who->uid;
    case BH_WHO_ENV:
        for (char *const *env = identity->env; env && *env; env++)
            if (strcmp(*env, value) == 0)
                return 1;
        return 0;
    }
    return 0;
}
