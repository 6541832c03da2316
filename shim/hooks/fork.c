/* Hooks that start children without our pthread_atfork handlers:
 *   - _Fork (glibc 2.34, async-signal-safe): fork() reaches it inside
 *     libc, not through this hook, and runs the handlers itself;
 *   - vfork: the child runs on our memory until it execs or exits (Python's
 *     subprocess); the hook must not stand between the caller and the real
 *     vfork as a C frame, so it is a jump (x86-64; elsewhere not hooked);
 *   - posix_spawn and posix_spawnp, whose child execs inside libc.
 * What each does with the copies the child takes: core/copies.c. */
#include <spawn.h>
#include <unistd.h>

#include "core/copies.h"
#include "core/shim.h"
#include "hooks/export.h"
#include "libc/libc.h"

BH_EXPORT pid_t _Fork(void) { return bh_shim_fork_bare(); }

#if defined(__x86_64__)
/* pid_t vfork(void): the copies are listed, then the real vfork is jumped
 * to with the caller's return address on top of the stack, as if called. */
__asm__(".text\n"
        ".globl vfork\n"
        ".type vfork, @function\n"
        "vfork:\n"
        "    sub $8, %rsp\n"          /* the stack aligned for a call */
        "    call bh_copies_before_vfork\n"
        "    add $8, %rsp\n"
        "    jmp *%rax\n"
        ".size vfork, .-vfork\n");
#endif

BH_EXPORT int posix_spawn(pid_t *pid, const char *path,
                          const posix_spawn_file_actions_t *actions,
                          const posix_spawnattr_t *attributes, char *const argv[],
                          char *const envp[])
{
    return bh_copies_spawn(libc_posix_spawn, pid, path, actions, attributes, argv, envp);
}
BH_EXPORT int posix_spawnp(pid_t *pid, const char *file,
                           const posix_spawn_file_actions_t *actions,
                           const posix_spawnattr_t *attributes, char *const argv[],
                           char *const envp[])
{
    return bh_copies_spawn(libc_posix_spawnp, pid, file, actions, attributes, argv, envp);
}
