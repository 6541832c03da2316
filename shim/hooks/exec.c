/* Hooks that replace the program image: the exec family.
 *
 * glibc's execv, execvp, execl... call an internal execve alias, so each
 * one is hooked, not just execve. Every hook adds the hand-off variable
 * (see core/handoff.c) to the environment the new image starts with, and
 * first says when that image is one the shim cannot reach (core/reach.c). No
 * malloc (exec may run in a vfork child, or a signal handler) and little
 * stack (a handler's alternate stack may be small). */
#include <errno.h>
#include <stdarg.h>
#include <unistd.h>

#include "core/handoff.h"
#include "core/outcome.h"
#include "core/reach.h"
#include "hooks/export.h"
#include "libc/libc.h"

enum exec_kind { BY_PATH, BY_SEARCH, BY_FD };

static int exec_real(enum exec_kind kind, const char *name, int fd,
                     char *const argv[], char *const envp[])
{
    if (kind == BY_SEARCH)
        return libc_execvpe(name, argv, envp);
    if (kind == BY_FD)
        return libc_fexecve(fd, argv, envp);
    return libc_execve(name, argv, envp);
}

static int bh_exec(enum exec_kind kind, const char *name, int fd,
                   char *const argv[], char *const envp[])
{
    struct bh_handoff handoff;
    bh_reach_before_exec(name, kind == BY_SEARCH, fd);
    bh_outcome_before_exec();
    if (!bh_handoff_encode(&handoff, envp))
        return exec_real(kind, name, fd, argv, envp);
    int rc = exec_real(kind, name, fd, argv, handoff.envp);
    int saved_errno = errno;
    bh_handoff_release(&handoff);  /* exec failed: nothing has changed */
    errno = saved_errno;
    return rc;
}

/* execl and friends: count the arguments, then copy them into argv. */
#define COUNT_ARGS(first, count) do {                                         \
        va_list args; va_start(args, first);                                  \
        for (count = 1; va_arg(args, char *); count++) ;                      \
        va_end(args); } while (0)
#define COPY_ARGS(first, argv, envp) do {                                     \
        va_list args; va_start(args, first); argv[0] = (char *)first;        \
        for (size_t i = 1; (argv[i] = va_arg(args, char *)); i++) ;           \
        envp = va_arg(args, char **); va_end(args); } while (0)

BH_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    return bh_exec(BY_PATH, path, -1, argv, envp);
}
BH_EXPORT int execv(const char *path, char *const argv[])
{
    return bh_exec(BY_PATH, path, -1, argv, environ);
}
BH_EXPORT int execvp(const char *file, char *const argv[])
{
    return bh_exec(BY_SEARCH, file, -1, argv, environ);
}
BH_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    return bh_exec(BY_SEARCH, file, -1, argv, envp);
}
BH_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    return bh_exec(BY_FD, NULL, fd, argv, envp);
}
BH_EXPORT int execl(const char *path, const char *arg, ...)
{
    size_t count;
    COUNT_ARGS(arg, count);
    char *argv[count + 1], **unused;
    COPY_ARGS(arg, argv, unused);
    (void)unused;
    return bh_exec(BY_PATH, path, -1, argv, environ);
}
BH_EXPORT int execlp(const char *file, const char *arg, ...)
{
    size_t count;
    COUNT_ARGS(arg, count);
    char *argv[count + 1], **unused;
    COPY_ARGS(arg, argv, unused);
    (void)unused;
    return bh_exec(BY_SEARCH, file, -1, argv, environ);
}
BH_EXPORT int execle(const char *path, const char *arg, ...)
{
    size_t count;
    COUNT_ARGS(arg, count);
    char *argv[count + 1], **envp;
    COPY_ARGS(arg, argv, envp);
    return bh_exec(BY_PATH, path, -1, argv, envp);
}
