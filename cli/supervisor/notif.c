/* The supervisor's plain dealings with the kernel and the tree, used by
 * every other file here and calling none of them (filter.c's socketcall
 * test aside, which is below it): answering a notification, checking that
 * it is still valid, reading the program's memory, /proc and fds, passing
 * an fd over a channel, and waking the main thread. No state of its own. */
#include <errno.h>
#include <fcntl.h>
#include <linux/net.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "supervisor/supervisor.h"

int sv_respond(int listener, uint64_t id, int64_t value, int error, uint32_t flags)
{
    struct seccomp_notif_resp response = { .id = id, .val = value, .error = error,
                                           .flags = flags };
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &response);
}

void sv_continue(int listener, uint64_t id)
{
    sv_respond(listener, id, 0, 0, SECCOMP_USER_NOTIF_FLAG_CONTINUE);
}

void sv_fail(int listener, uint64_t id, int err)
{
    sv_respond(listener, id, -1, -err, 0);
}

int sv_still_valid(int listener, uint64_t id)
{
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
}

int sv_read_memory(pid_t tid, uint64_t at, void *into, size_t length)
{
    struct iovec here = { into, length };
    struct iovec there = { (void *)(uintptr_t)at, length };
    ssize_t got = process_vm_readv(tid, &here, 1, &there, 1, 0);
    if (got >= 0 && got < (ssize_t)length)
        errno = EFAULT;  /* a short read: the rest is not mapped */
    return got == (ssize_t)length ? 0 : -1;
}

/* A /proc file of pid, whole (NUL-terminated, up to size - 1 bytes). */
ssize_t sv_read_proc(pid_t pid, const char *what, char *text, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, what);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t length = read(fd, text, size - 1);
    close(fd);
    if (length >= 0)
        text[length] = '\0';
    return length;
}

/* A number after "Key:" in /proc/pid/status (the nth, from 0); -1. */
long sv_status_field(pid_t pid, const char *key, int nth)
{
    char text[4096];
    if (sv_read_proc(pid, "status", text, sizeof text) < 0)
        return -1;
    const char *at = strstr(text, key);
    if (!at)
        return -1;
    char *end = (char *)at + strlen(key);
    long value = -1;
    for (int i = 0; i <= nth; i++)
        value = strtol(end, &end, 10);
    return value;
}

pid_t sv_process_of(pid_t tid)
{
    return (pid_t)sv_status_field(tid, "Tgid:", 0);
}

/* A thread that leads its process (every single-threaded program's) is
 * its process: pidfd_open takes it at once, and refuses any other thread
 * (EINVAL, or ENOENT on newer kernels), whose process /proc names. */
int sv_copy_fd(pid_t tid, int fd, pid_t *pid)
{
    *pid = tid;
    int pidfd = (int)syscall(SYS_pidfd_open, tid, 0);
    if (pidfd < 0) {
        *pid = sv_process_of(tid);
        pidfd = *pid > 0 ? (int)syscall(SYS_pidfd_open, *pid, 0) : -1;
    }
    int copy = pidfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0) : -1;
    int saved_errno = errno;  /* EPERM: the program may not be read */
    if (pidfd >= 0)
        close(pidfd);
    errno = saved_errno;
    return copy;
}

int sv_is_stream(int sock)
{
    int type = 0;
    socklen_t length = sizeof type;
    return getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &length) == 0 &&
           type == SOCK_STREAM;
}

int sv_is_nonblocking(int sock)
{
    int flags = fcntl(sock, F_GETFL);
    return flags >= 0 && (flags & O_NONBLOCK);
}

int sv_call_args(const struct seccomp_notif *notif, uint64_t args[6])
{
    if (!sv_filter_socketcall(&notif->data)) {
        memcpy(args, notif->data.args, 6 * sizeof args[0]);
        return 0;
    }
    /* socketcall(call, uint32_t *args): as many as that call takes */
    uint32_t words[6] = { 0 };
    uint32_t call = (uint32_t)notif->data.args[0];
    size_t count = call == SYS_SENDTO ? 6 : call == SYS_SENDMMSG ? 4 : 3;
    if (sv_read_memory((pid_t)notif->pid, notif->data.args[1], words,
                       count * sizeof words[0]) < 0)
        return -1;
    for (int i = 0; i < 6; i++)
        args[i] = words[i];
    return 0;
}

void sv_send_fd(int channel, int fd, int error)
{
    char control[CMSG_SPACE(sizeof(int))] = { 0 };
    struct iovec data = { &error, sizeof error };
    struct msghdr message = { .msg_iov = &data, .msg_iovlen = 1 };
    if (fd >= 0) {
        message.msg_control = control;
        message.msg_controllen = sizeof control;
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        header->cmsg_level = SOL_SOCKET;
        header->cmsg_type = SCM_RIGHTS;
        header->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(header), &fd, sizeof(int));
    }
    (void)!sendmsg(channel, &message, MSG_NOSIGNAL);
}

int sv_receive_fd(int channel)
{
    int error = EIO, listener = -1;
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec data = { &error, sizeof error };
    struct msghdr message = { .msg_iov = &data, .msg_iovlen = 1,
                              .msg_control = control, .msg_controllen = sizeof control };
    if (recvmsg(channel, &message, MSG_CMSG_CLOEXEC) <= 0)
        return -1;
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    if (header && header->cmsg_type == SCM_RIGHTS)
        memcpy(&listener, CMSG_DATA(header), sizeof listener);
    errno = error;
    return listener;
}

void sv_wake(struct sv_state *state)
{
    uint64_t one = 1;
    (void)!write(state->wake, &one, sizeof one);
}
