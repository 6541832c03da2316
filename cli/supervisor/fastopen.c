/* A trapped send with MSG_FASTOPEN: sendto(), sendmsg() or sendmmsg(),
 * which connect a TCP socket without connect() (the filter traps them
 * only with that flag: every other send stays in the kernel).
 *
 * Such a connect is never counted here. To a destination a rule matches,
 * on a stream socket, the send fails with EOPNOTSUPP: what the kernel
 * itself answers when client Fast Open is off (net.ipv4.tcp_fastopen
 * without bit 1), so every program that uses MSG_FASTOPEN already has a
 * way on without it, connect() then send, and that connect is trapped
 * and counted (connects.c) with the address it carries. Anything else
 * (no address, not AF_INET/AF_INET6, no rule, another kind of socket) is
 * answered CONTINUE: the kernel sends as the program asked.
 *
 * A program whose memory may not be read (unreadable.c): where its
 * connects are refused, its Fast Open sends fail as above, so that it
 * falls back to connect() and is told why there.
 *
 * A 32-bit program's socketcall sends are all trapped (the filter cannot
 * read their flags): those with MSG_FASTOPEN fail, the rest proceed, as
 * do all of an unreadable program's (their flags cannot be known).
 *
 * All of it is quick (no admission, nothing that waits): done on the
 * main thread. As for connect, a program that rewrites its address after
 * our read and before the kernel's can slip past: a cap, not a sandbox. */
#include <errno.h>
#include <linux/net.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "supervisor/supervisor.h"

enum { MMSG_MAX = 1024, MMSG_CHUNK = 64 };  /* the kernel sends at most UIO_MAXIOV */

/* Whether the sockaddr of `length` bytes at `at` in the program is one a
 * rule matches; -1 when the program may not be read (EPERM). */
static int matched_at(const struct sv_state *state, pid_t tid, uint64_t at, uint32_t length)
{
    struct sockaddr_storage to;
    if (!at || length < sizeof(sa_family_t) || length > sizeof to)
        return 0;  /* none, or one the kernel refuses (EINVAL) */
    if (sv_read_memory(tid, at, &to, length) < 0)
        return errno == EPERM ? -1 : 0;  /* EFAULT: the kernel's to answer */
    return (to.ss_family == AF_INET || to.ss_family == AF_INET6) &&
           bh_rule_index_match(state->rules, (struct sockaddr *)&to, (socklen_t)length) >= 0;
}

static int message_matched(const struct sv_state *state, pid_t tid, const struct msghdr *message)
{
    return matched_at(state, tid, (uint64_t)(uintptr_t)message->msg_name, message->msg_namelen);
}

/* sendmmsg: any of its messages' destinations (-1: unreadable) (only the first connects,
 * but with Fast Open off the kernel would fail the whole call at it). */
static int any_matched(const struct sv_state *state, pid_t tid, uint64_t at, uint32_t count)
{
    struct mmsghdr messages[MMSG_CHUNK];
    count = count < MMSG_MAX ? count : MMSG_MAX;
    for (uint32_t done = 0; done < count; done += MMSG_CHUNK) {
        uint32_t chunk = count - done < MMSG_CHUNK ? count - done : MMSG_CHUNK;
        if (sv_read_memory(tid, at + done * sizeof messages[0], messages,
                           chunk * sizeof messages[0]) < 0)
            return errno == EPERM ? -1 : 0;
        for (uint32_t i = 0; i < chunk; i++) {
            int matched = message_matched(state, tid, &messages[i].msg_hdr);
            if (matched)
                return matched;
        }
    }
    return 0;
}

static int destination_matched(const struct sv_state *state, const struct seccomp_notif *notif)
{
    pid_t tid = (pid_t)notif->pid;
    const __u64 *args = notif->data.args;
    struct msghdr message;
    if (notif->data.nr == __NR_sendto)
        return matched_at(state, tid, args[4], (uint32_t)args[5]);
    if (notif->data.nr == __NR_sendmmsg)
        return any_matched(state, tid, args[1], (uint32_t)args[2]);
    if (sv_read_memory(tid, args[1], &message, sizeof message) < 0)
        return errno == EPERM ? -1 : 0;
    return message_matched(state, tid, &message);
}

/* Whether the program's socket is a stream one: a matched destination
 * fails there only (a datagram socket ignores the flag). */
static int socket_is_stream(const struct seccomp_notif *notif)
{
    pid_t pid;
    int sock = sv_copy_fd((pid_t)notif->pid, (int)notif->data.args[0], &pid);
    if (sock < 0)
        return 0;  /* a bad fd: the kernel says EBADF */
    int stream = sv_is_stream(sock);
    close(sock);
    return stream;
}

/* A 32-bit socketcall send, trapped whatever its flags (they are in the
 * program's memory, out of the filter's reach): with MSG_FASTOPEN it
 * fails, whatever the destination, as the filter fails the 32-bit ABI's
 * direct sends with it (their msghdr is not read); without, CONTINUE. */
static int compat_fastopen(const struct seccomp_notif *notif)
{
    uint64_t args[6];
    uint32_t call = (uint32_t)notif->data.args[0];
    return sv_call_args(notif, args) == 0 &&
           (args[call == SYS_SENDMSG ? 2 : 3] & MSG_FASTOPEN) != 0;
}

void sv_fastopen_trapped(struct sv_state *state, const struct seccomp_notif *notif)
{
    int refused;
    if (sv_filter_compat(&notif->data)) {
        refused = compat_fastopen(notif);
    } else {
        int matched = destination_matched(state, notif);
        refused = matched < 0 ? sv_unreadable(state, (pid_t)notif->pid) != 0
                              : matched && socket_is_stream(notif);
    }
    if (refused && sv_still_valid(state->listener, notif->id))
        sv_fail(state->listener, notif->id, EOPNOTSUPP);
    else
        sv_continue(state->listener, notif->id);
}
