/* Hooks that fork without pthread_atfork handlers: glibc's _Fork (public
 * since 2.34, async-signal-safe). fork() reaches it inside libc, not
 * through this hook, and runs our handlers itself. */
#include <unistd.h>

#include "core/shim.h"
#include "hooks/export.h"

BH_EXPORT pid_t _Fork(void) { return bh_shim_fork_bare(); }
