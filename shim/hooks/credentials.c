/* Hooks that can change the effective uid: setuid, seteuid, setreuid and
 * setresuid. A daemon that starts as root and drops to its own user
 * (nginx's `user www-data;`, haproxy's `user nobody`) can no longer reach
 * root's namespace, whose objects are 0600; after a change that worked,
 * the process joins the new uid's namespace (core/shim.c), where every
 * worker of that user counts together. The log file is held open across
 * the change first, so the worker can still say what happened. */
#include <unistd.h>

#include "core/shim.h"
#include "hooks/export.h"
#include "libc/libc.h"

#define BH_UID_CHANGE(name, params, args)                                     \
    static int bh_##name params                                                \
    {                                                                          \
        bh_shim_before_uid_change();                                           \
        int rc = libc_##name args;                                             \
        bh_shim_after_uid_change(rc);                                          \
        return rc;                                                             \
    }
BH_UID_CHANGE(setuid, (uid_t uid), (uid))
BH_UID_CHANGE(seteuid, (uid_t euid), (euid))
BH_UID_CHANGE(setreuid, (uid_t ruid, uid_t euid), (ruid, euid))
BH_UID_CHANGE(setresuid, (uid_t ruid, uid_t euid, uid_t suid), (ruid, euid, suid))

BH_EXPORT int setuid(uid_t uid) { return bh_setuid(uid); }
BH_EXPORT int seteuid(uid_t euid) { return bh_seteuid(euid); }
BH_EXPORT int setreuid(uid_t ruid, uid_t euid) { return bh_setreuid(ruid, euid); }
BH_EXPORT int setresuid(uid_t ruid, uid_t euid, uid_t suid)
{
    return bh_setresuid(ruid, euid, suid);
}
