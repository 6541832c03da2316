/* The real libc functions behind the hooks, in one typed table.
 *
 * Each hook reaches libc through libc_NAME(), never through dlsym itself.
 * A symbol is looked up with dlsym(RTLD_NEXT) on first use, so hooks work
 * even when another library's constructor calls them before ours ran. */
#ifndef BH_LIBC_H
#define BH_LIBC_H

#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/select.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/types.h>
#include <sys/uio.h>

/* X(return type, name, parameter list, argument list) */
#define BH_LIBC_FUNCTIONS(X)                                                   \
    X(int, connect, (int fd, const struct sockaddr *to, socklen_t len), (fd, to, len)) \
    X(ssize_t, sendto, (int fd, const void *buf, size_t n, int flags,          \
                        const struct sockaddr *to, socklen_t len),             \
      (fd, buf, n, flags, to, len))                                            \
    X(ssize_t, sendmsg, (int fd, const struct msghdr *msg, int flags), (fd, msg, flags)) \
    X(ssize_t, recvmsg, (int fd, struct msghdr *msg, int flags), (fd, msg, flags)) \
    X(int, sendmmsg, (int fd, struct mmsghdr *vec, unsigned int n, int flags),  \
      (fd, vec, n, flags))                                                     \
    X(int, recvmmsg, (int fd, struct mmsghdr *vec, unsigned int n, int flags,  \
                      struct timespec *timeout),                               \
      (fd, vec, n, flags, timeout))                                            \
    X(ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n))              \
    X(ssize_t, write, (int fd, const void *buf, size_t n), (fd, buf, n))       \
    X(ssize_t, readv, (int fd, const struct iovec *iov, int count), (fd, iov, count)) \
    X(ssize_t, writev, (int fd, const struct iovec *iov, int count), (fd, iov, count)) \
    X(ssize_t, recv, (int fd, void *buf, size_t n, int flags), (fd, buf, n, flags)) \
    X(ssize_t, send, (int fd, const void *buf, size_t n, int flags), (fd, buf, n, flags)) \
    X(ssize_t, recvfrom, (int fd, void *buf, size_t n, int flags,              \
                          struct sockaddr *from, socklen_t *len),              \
      (fd, buf, n, flags, from, len))                                          \
    X(ssize_t, __read_chk, (int fd, void *buf, size_t n, size_t buflen),       \
      (fd, buf, n, buflen))                                                    \
    X(ssize_t, __recv_chk, (int fd, void *buf, size_t n, size_t buflen, int flags), \
      (fd, buf, n, buflen, flags))                                             \
    X(ssize_t, __recvfrom_chk, (int fd, void *buf, size_t n, size_t buflen,    \
                                int flags, struct sockaddr *from, socklen_t *len), \
      (fd, buf, n, buflen, flags, from, len))                                  \
    X(int, getsockopt, (int fd, int level, int name, void *value, socklen_t *len), \
      (fd, level, name, value, len))                                           \
    X(int, setsockopt, (int fd, int level, int name, const void *value, socklen_t len), \
      (fd, level, name, value, len))                                           \
    X(int, close, (int fd), (fd))                                              \
    X(int, close_range, (unsigned first, unsigned last, int flags), (first, last, flags)) \
    /* glibc's is variadic; six arguments are what it passes to the kernel */ \
    X(long, syscall, (long number, long a, long b, long c, long d, long e, long f), \
      (number, a, b, c, d, e, f))                                              \
    X(int, fclose, (FILE *stream), (stream))                                   \
    X(int, fcloseall, (void), ())                                              \
    X(int, dup, (int fd), (fd))                                                \
    X(int, dup2, (int oldfd, int newfd), (oldfd, newfd))                       \
    X(int, dup3, (int oldfd, int newfd, int flags), (oldfd, newfd, flags))     \
    X(int, fcntl, (int fd, int cmd, void *arg), (fd, cmd, arg))                \
    X(int, fcntl64, (int fd, int cmd, void *arg), (fd, cmd, arg))              \
    X(int, socket, (int domain, int type, int protocol), (domain, type, protocol)) \
    X(int, socketpair, (int domain, int type, int protocol, int fds[2]),       \
      (domain, type, protocol, fds))                                           \
    X(int, accept, (int fd, struct sockaddr *from, socklen_t *len), (fd, from, len)) \
    X(int, accept4, (int fd, struct sockaddr *from, socklen_t *len, int flags), \
      (fd, from, len, flags))                                                  \
    X(int, open, (const char *path, int flags, mode_t mode), (path, flags, mode)) \
    X(int, open64, (const char *path, int flags, mode_t mode), (path, flags, mode)) \
    X(int, openat, (int dirfd, const char *path, int flags, mode_t mode),      \
      (dirfd, path, flags, mode))                                              \
    X(int, openat64, (int dirfd, const char *path, int flags, mode_t mode),    \
      (dirfd, path, flags, mode))                                              \
    X(int, creat, (const char *path, mode_t mode), (path, mode))               \
    X(FILE *, fopen, (const char *path, const char *mode), (path, mode))       \
    X(FILE *, fopen64, (const char *path, const char *mode), (path, mode))     \
    X(int, pipe, (int fds[2]), (fds))                                          \
    X(int, pipe2, (int fds[2], int flags), (fds, flags))                       \
    X(int, eventfd, (unsigned value, int flags), (value, flags))               \
    X(int, epoll_create, (int size), (size))                                   \
    X(int, epoll_create1, (int flags), (flags))                                \
    X(int, epoll_ctl, (int epfd, int op, int fd, struct epoll_event *event),   \
      (epfd, op, fd, event))                                                   \
    X(int, epoll_wait, (int epfd, struct epoll_event *events, int most, int timeout), \
      (epfd, events, most, timeout))                                           \
    X(int, epoll_pwait, (int epfd, struct epoll_event *events, int most,       \
                         int timeout, const sigset_t *mask),                   \
      (epfd, events, most, timeout, mask))                                     \
    X(int, epoll_pwait2, (int epfd, struct epoll_event *events, int most,      \
                          const struct timespec *timeout, const sigset_t *mask), \
      (epfd, events, most, timeout, mask))                                     \
    X(int, poll, (struct pollfd *fds, nfds_t count, int timeout), (fds, count, timeout)) \
    X(int, ppoll, (struct pollfd *fds, nfds_t count, const struct timespec *timeout, \
                   const sigset_t *mask),                                      \
      (fds, count, timeout, mask))                                             \
    X(int, __poll_chk, (struct pollfd *fds, nfds_t count, int timeout, size_t length), \
      (fds, count, timeout, length))                                           \
    X(int, __ppoll_chk, (struct pollfd *fds, nfds_t count,                     \
                         const struct timespec *timeout, const sigset_t *mask, \
                         size_t length),                                       \
      (fds, count, timeout, mask, length))                                     \
    X(int, select, (int count, fd_set *readable, fd_set *writable,             \
                    fd_set *exceptional, struct timeval *timeout),             \
      (count, readable, writable, exceptional, timeout))                       \
    X(int, pselect, (int count, fd_set *readable, fd_set *writable,            \
                     fd_set *exceptional, const struct timespec *timeout,      \
                     const sigset_t *mask),                                    \
      (count, readable, writable, exceptional, timeout, mask))                 \
    X(int, signalfd, (int fd, const sigset_t *mask, int flags), (fd, mask, flags)) \
    X(int, timerfd_create, (int clock, int flags), (clock, flags))             \
    X(int, inotify_init1, (int flags), (flags))                                \
    X(int, memfd_create, (const char *name, unsigned flags), (name, flags))    \
    X(int, execve, (const char *path, char *const argv[], char *const envp[]), \
      (path, argv, envp))                                                      \
    X(int, execvpe, (const char *file, char *const argv[], char *const envp[]), \
      (file, argv, envp))                                                      \
    X(int, fexecve, (int fd, char *const argv[], char *const envp[]), (fd, argv, envp)) \
    X(pid_t, _Fork, (void), ())                                                \
    X(int, posix_spawn, (pid_t *pid, const char *path,                         \
                         const posix_spawn_file_actions_t *actions,            \
                         const posix_spawnattr_t *attributes, char *const argv[], \
                         char *const envp[]),                                  \
      (pid, path, actions, attributes, argv, envp))                            \
    X(int, posix_spawnp, (pid_t *pid, const char *file,                        \
                          const posix_spawn_file_actions_t *actions,           \
                          const posix_spawnattr_t *attributes, char *const argv[], \
                          char *const envp[]),                                 \
      (pid, file, actions, attributes, argv, envp))                            \
    X(int, setuid, (uid_t uid), (uid))                                         \
    X(int, seteuid, (uid_t euid), (euid))                                      \
    X(int, setreuid, (uid_t ruid, uid_t euid), (ruid, euid))                   \
    X(int, setresuid, (uid_t ruid, uid_t euid, uid_t suid), (ruid, euid, suid)) \
    X(int, getaddrinfo, (const char *node, const char *service,                \
                         const struct addrinfo *hints, struct addrinfo **res), \
      (node, service, hints, res))                                             \
    X(struct hostent *, gethostbyname, (const char *name), (name))             \
    X(struct hostent *, gethostbyname2, (const char *name, int family), (name, family)) \
    X(int, gethostbyname_r, (const char *name, struct hostent *ret, char *buf, \
                             size_t buflen, struct hostent **result, int *h_errnop), \
      (name, ret, buf, buflen, result, h_errnop))                              \
    X(int, gethostbyname2_r, (const char *name, int family, struct hostent *ret, \
                              char *buf, size_t buflen, struct hostent **result, \
                              int *h_errnop),                                  \
      (name, family, ret, buf, buflen, result, h_errnop))

/* Functions that return nothing (or never return): V(name, params, args) */
#define BH_LIBC_VOID_FUNCTIONS(V)                                              \
    V(closefrom, (int lowfd), (lowfd))                                         \
    V(_exit, (int status), (status))                                           \
    V(_Exit, (int status), (status))

#define BH_LIBC_FIELD(type, name, params, args) type (*name) params;
#define BH_LIBC_VOID_FIELD(name, params, args) void (*name) params;
struct bh_libc {
    BH_LIBC_FUNCTIONS(BH_LIBC_FIELD)
    BH_LIBC_VOID_FUNCTIONS(BH_LIBC_VOID_FIELD)
};
#undef BH_LIBC_FIELD
#undef BH_LIBC_VOID_FIELD

/* Hidden, as the whole shim is: a hook's tail jump then reads its slot
 * straight, not through the GOT. */
extern struct bh_libc bh_libc __attribute__((visibility("hidden")));
void *bh_libc_lookup(const char *name);
/* The real vfork, to be jumped to, never called: its child returns into
 * the frame that called it, so no C frame may stand in between. */
void *bh_libc_vfork(void);

/* Under `bulkhead run`'s seccomp supervisor (which sets this variable for
 * its tree), the shim marks its own connect() and close() calls: raw
 * system calls with this value as a fourth argument, which the kernel
 * ignores and the supervisor's filter lets through without asking it.
 * The shim counts what it connects; the supervisor counts only what
 * reaches the kernel unmarked (Go, static programs, raw syscalls), so a
 * connection is never counted twice. */
#define BH_SUPERVISED_VARIABLE "BULKHEAD_SUPERVISED"
#define BH_SUPERVISED_MARK 0x62756c6b68656164ull  /* "bulkhead" */
/* Points the table's connect and close at the marked calls. Start-up only. */
void bh_libc_mark_for_supervisor(void);

/* Each slot starts out pointing at bh_libc_first_NAME (libc.c), which
 * looks the real symbol up, stores it in the slot and calls it: a hook
 * is then one load and a tail jump, with no test and no stack frame.
 * Relaxed atomics: any thread may fill a slot first, all fill it with the
 * same value, and a plain load is what x86 and arm64 emit anyway. */
#define BH_LIBC_CALL(type, name, params, args)                                  \
    type bh_libc_first_##name params;                                          \
    static inline __attribute__((always_inline)) type libc_##name params      \
    {                                                                          \
        return __atomic_load_n(&bh_libc.name, __ATOMIC_RELAXED) args;          \
    }
BH_LIBC_FUNCTIONS(BH_LIBC_CALL)
#undef BH_LIBC_CALL

#define BH_LIBC_VOID_CALL(name, params, args)                                   \
    void bh_libc_first_##name params;                                          \
    static inline __attribute__((always_inline)) void libc_##name params      \
    {                                                                          \
        __atomic_load_n(&bh_libc.name, __ATOMIC_RELAXED) args;                 \
    }
BH_LIBC_VOID_FUNCTIONS(BH_LIBC_VOID_CALL)
#undef BH_LIBC_VOID_CALL

#endif
