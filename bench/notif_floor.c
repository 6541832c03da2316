/* The floor of a seccomp supervisor: `notif_floor CMD [ARG...]` runs CMD
 * under a filter that asks about every connect() and close(), as `bulkhead
 * run`'s does, and a listener thread that answers each notification with
 * SECCOMP_USER_NOTIF_FLAG_CONTINUE at once, having looked at nothing. What
 * CMD's calls cost over bare is the kernel's round trip itself; the bench
 * sets the supervisor's figures beside it (bench/seccomp.py).
 *
 * Like `bulkhead run`: a fork, the child installs the filter and hands
 * its listener over a socketpair, then execs CMD; the parent asks the
 * kernel to wake the program on the answering CPU
 * (SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP, Linux 6.6) and exits with CMD's
 * status. x86_64 and aarch64 only: other architectures exit 2. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif

static void fail(const char *what)
{
    fprintf(stderr, "notif_floor: %s: %s\n", what, strerror(errno));
    exit(2);
}

#ifdef ARCH
static int install_filter(void)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_connect, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_close, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
    };
    struct sock_fprog program = { sizeof code / sizeof code[0], code };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        fail("no_new_privs");
    int listener = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                                SECCOMP_FILTER_FLAG_NEW_LISTENER, &program);
    if (listener < 0)
        fail("seccomp");
    return listener;
}
#endif

static void send_fd(int channel, int fd)
{
    char control[CMSG_SPACE(sizeof(int))] = { 0 };
    char byte = 0;
    struct iovec data = { &byte, 1 };
    struct msghdr message = { .msg_iov = &data, .msg_iovlen = 1,
                              .msg_control = control, .msg_controllen = sizeof control };
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &fd, sizeof(int));
    if (sendmsg(channel, &message, 0) < 0)
        fail("sendmsg");
}

static int receive_fd(int channel)
{
    char control[CMSG_SPACE(sizeof(int))];
    char byte;
    struct iovec data = { &byte, 1 };
    struct msghdr message = { .msg_iov = &data, .msg_iovlen = 1,
                              .msg_control = control, .msg_controllen = sizeof control };
    if (recvmsg(channel, &message, MSG_CMSG_CLOEXEC) <= 0)
        fail("recvmsg");
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    if (!header || header->cmsg_type != SCM_RIGHTS)
        fail("no listener came");
    int fd;
    memcpy(&fd, CMSG_DATA(header), sizeof fd);
    return fd;
}

/* Every notification answered CONTINUE, until the tree is gone (the
 * receive fails then) or the process exits with CMD's status. */
static void *answer(void *listener_fd)
{
    int listener = *(int *)listener_fd;
    struct seccomp_notif_sizes sizes;
    if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) < 0)
        fail("notif sizes");
    struct seccomp_notif *notif = calloc(1, sizes.seccomp_notif);
    if (!notif)
        fail("calloc");
    for (;;) {
        memset(notif, 0, sizes.seccomp_notif);
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, notif) < 0) {
            if (errno == EINTR || errno == ENOENT)
                continue;  /* ENOENT: its caller died before we got it */
            return NULL;
        }
        struct seccomp_notif_resp response = { .id = notif->id,
                                               .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE };
        ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &response);
    }
}

int main(int argc, char **argv)
{
#ifndef ARCH
    (void)argc;
    (void)argv;
    fprintf(stderr, "notif_floor: this architecture is not one it knows\n");
    return 2;
#else
    if (argc < 2) {
        fprintf(stderr, "usage: notif_floor CMD [ARG...]\n");
        return 2;
    }
    int channel[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, channel) < 0)
        fail("socketpair");
    pid_t child = fork();
    if (child < 0)
        fail("fork");
    if (child == 0) {
        int listener = install_filter();
        send_fd(channel[1], listener);
        close(listener);
        execvp(argv[1], argv + 1);
        fail(argv[1]);
    }
    close(channel[1]);
    int listener = receive_fd(channel[0]);
    close(channel[0]);
    ioctl(listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP);
    pthread_t thread;
    if (pthread_create(&thread, NULL, answer, &listener) != 0)
        fail("pthread_create");
    int status;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR)
            fail("waitpid");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
#endif
}
