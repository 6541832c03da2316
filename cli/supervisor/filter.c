/* The filter `bulkhead run` installs in its child before exec. It stays
 * for the life of the tree (every descendant inherits it, exec or not)
 * and stacks with any filter a program installs of its own.
 *
 * It asks the supervisor about connect() and close(), only those the shim
 * did not mark (libc.h: BH_SUPERVISED_MARK): what the shim counts itself
 * never costs a round trip; and about sendto(), sendmsg() and sendmmsg()
 * with MSG_FASTOPEN, which connect without connect() (fastopen.c): a send
 * without it never leaves the kernel. Every other system call is allowed
 * in the kernel.
 *
 * The architecture is checked first: a 64-bit program can make 32-bit
 * calls (`int $0x80` on x86_64), with their own numbers. The 32-bit ABI's
 * connect() and socketcall(SYS_CONNECT) are asked about too (connects.c
 * reads their arguments), as are its socketcall sends, whose flags are in
 * the program's memory; its direct sends with MSG_FASTOPEN fail with
 * EOPNOTSUPP here (as with client Fast Open off). x32 calls (numbers with
 * bit 30 set) fail with ENOSYS, as on kernels without x32; any other
 * architecture's calls too. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/net.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "libc/libc.h"
#include "supervisor/supervisor.h"

/* The 32-bit ABI's numbers (no header of this build has them). ARM has no
 * socketcall: its number there matches no call. */
#if defined(__x86_64__)
#define SV_ARCH AUDIT_ARCH_X86_64
#define COMPAT_ARCH AUDIT_ARCH_I386
enum { COMPAT_CONNECT = 362, COMPAT_SOCKETCALL = 102, COMPAT_SENDTO = 369,
       COMPAT_SENDMSG = 370, COMPAT_SENDMMSG = 345 };
#elif defined(__aarch64__)
#define SV_ARCH AUDIT_ARCH_AARCH64
#define COMPAT_ARCH AUDIT_ARCH_ARM
enum { COMPAT_CONNECT = 283, COMPAT_SOCKETCALL = -1, COMPAT_SENDTO = 290,
       COMPAT_SENDMSG = 296, COMPAT_SENDMMSG = 374 };
#else
#define SV_ARCH 0
#define COMPAT_ARCH 0
enum { COMPAT_CONNECT = -1, COMPAT_SOCKETCALL = -1, COMPAT_SENDTO = -1,
       COMPAT_SENDMSG = -1, COMPAT_SENDMMSG = -1 };
#endif
#define X32_BIT 0x40000000u

/* Linux 5.19: once the supervisor has received a notification, only a
 * fatal signal ends the program's wait for the answer (connects.c). */
#ifndef SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
#define SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (1UL << 5)
#endif

int sv_filter_supported(void)
{
    uint32_t action = SECCOMP_RET_USER_NOTIF;
    if (SV_ARCH == 0) {
        errno = ENOSYS;
        return 0;
    }
    return syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0;
}

/* The kernel takes a filter without no_new_privs from a process with
 * CAP_SYS_ADMIN (root): set-ID programs of its tree keep their privilege. */
int sv_filter_keeps_privileges(void)
{
    struct __user_cap_header_struct header = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    return syscall(SYS_capget, &header, data) == 0 &&
           (data[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective & CAP_TO_MASK(CAP_SYS_ADMIN));
}

/* The low (or high) 32 bits of argument n, as BPF loads 32 bits at a time. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ARG_LOW(n) (offsetof(struct seccomp_data, args[n]))
#define ARG_HIGH(n) (offsetof(struct seccomp_data, args[n]) + 4)
#else
#define ARG_LOW(n) (offsetof(struct seccomp_data, args[n]) + 4)
#define ARG_HIGH(n) (offsetof(struct seccomp_data, args[n]))
#endif

/* The program's instructions, in order; a jump names where it goes. */
enum {
    LOAD_ARCH, CHECK_ARCH, LOAD_NR, IS_X32,
    IS_CONNECT, IS_CLOSE, IS_SENDTO, IS_SENDMMSG, IS_SENDMSG,
    LOAD_SENDMSG_FLAGS, SENDMSG_FASTOPEN, LOAD_SENDTO_FLAGS, SENDTO_FASTOPEN,
    LOAD_MARK_LOW, CHECK_MARK_LOW, LOAD_MARK_HIGH, CHECK_MARK_HIGH,
    CHECK_COMPAT, LOAD_COMPAT_NR, C_IS_CONNECT, C_IS_SOCKETCALL, C_IS_SENDTO,
    C_IS_SENDMMSG, C_IS_SENDMSG, C_LOAD_CALL, C_CALL_CONNECT, C_CALL_SENDTO,
    C_CALL_SENDMSG, C_CALL_SENDMMSG, C_LOAD_SENDMSG_FLAGS, C_SENDMSG_FASTOPEN,
    C_LOAD_SENDTO_FLAGS, C_SENDTO_FASTOPEN,
    NOTIFY, ALLOW, NO_FASTOPEN, NO_SYSCALL,
};
#define TO(from, to) ((to) - (from) - 1)
#define JEQ(at, value, yes, no) \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (value), TO(at, yes), TO(at, no))
#define JSET(at, bits, yes, no) \
    BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, (bits), TO(at, yes), TO(at, no))
#define JGE(at, value, yes, no) \
    BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, (value), TO(at, yes), TO(at, no))
#define LOAD(offset) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (offset))
#define FAIL(err) BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((err) & SECCOMP_RET_DATA))

/* Whether the system call in `data` is the 32-bit ABI's (socketcall's
 * calls included): one the filter asks about and a 64-bit mind would
 * misread. */
int sv_filter_compat(const struct seccomp_data *data)
{
    return COMPAT_ARCH != 0 && data->arch == COMPAT_ARCH;
}

int sv_filter_socketcall(const struct seccomp_data *data)
{
    return sv_filter_compat(data) && data->nr == (uint32_t)COMPAT_SOCKETCALL;
}

enum sv_call sv_filter_call(const struct seccomp_data *data)
{
    if (!sv_filter_compat(data))
        return data->nr == __NR_connect ? SV_CALL_CONNECT
             : data->nr == __NR_close ? SV_CALL_CLOSE : SV_CALL_SEND;
    if (data->nr == (uint32_t)COMPAT_CONNECT)
        return SV_CALL_CONNECT;
    return (uint32_t)data->args[0] == SYS_CONNECT ? SV_CALL_CONNECT : SV_CALL_SEND;
}

/* sendto's and sendmmsg's flags are their fourth argument, sendmsg's its
 * third; MSG_FASTOPEN is in their low 32 bits (flags are an int). */
static const struct sock_filter code[] = {
    [LOAD_ARCH] = LOAD(offsetof(struct seccomp_data, arch)),
    [CHECK_ARCH] = JEQ(CHECK_ARCH, SV_ARCH, LOAD_NR, CHECK_COMPAT),
    [LOAD_NR] = LOAD(offsetof(struct seccomp_data, nr)),
    [IS_X32] = JGE(IS_X32, X32_BIT, NO_SYSCALL, IS_CONNECT),
    [IS_CONNECT] = JEQ(IS_CONNECT, __NR_connect, LOAD_MARK_LOW, IS_CLOSE),
    [IS_CLOSE] = JEQ(IS_CLOSE, __NR_close, LOAD_MARK_LOW, IS_SENDTO),
    [IS_SENDTO] = JEQ(IS_SENDTO, __NR_sendto, LOAD_SENDTO_FLAGS, IS_SENDMMSG),
    [IS_SENDMMSG] = JEQ(IS_SENDMMSG, __NR_sendmmsg, LOAD_SENDTO_FLAGS, IS_SENDMSG),
    [IS_SENDMSG] = JEQ(IS_SENDMSG, __NR_sendmsg, LOAD_SENDMSG_FLAGS, ALLOW),
    [LOAD_SENDMSG_FLAGS] = LOAD(ARG_LOW(2)),
    [SENDMSG_FASTOPEN] = JSET(SENDMSG_FASTOPEN, MSG_FASTOPEN, NOTIFY, ALLOW),
    [LOAD_SENDTO_FLAGS] = LOAD(ARG_LOW(3)),
    [SENDTO_FASTOPEN] = JSET(SENDTO_FASTOPEN, MSG_FASTOPEN, NOTIFY, ALLOW),
    [LOAD_MARK_LOW] = LOAD(ARG_LOW(3)),
    [CHECK_MARK_LOW] = JEQ(CHECK_MARK_LOW, (uint32_t)(BH_SUPERVISED_MARK & 0xffffffffu),
                           LOAD_MARK_HIGH, NOTIFY),
    [LOAD_MARK_HIGH] = LOAD(ARG_HIGH(3)),
    [CHECK_MARK_HIGH] = JEQ(CHECK_MARK_HIGH, (uint32_t)(BH_SUPERVISED_MARK >> 32),
                            ALLOW, NOTIFY),
    [CHECK_COMPAT] = JEQ(CHECK_COMPAT, COMPAT_ARCH, LOAD_COMPAT_NR, NO_SYSCALL),
    [LOAD_COMPAT_NR] = LOAD(offsetof(struct seccomp_data, nr)),
    [C_IS_CONNECT] = JEQ(C_IS_CONNECT, (uint32_t)COMPAT_CONNECT, NOTIFY, C_IS_SOCKETCALL),
    [C_IS_SOCKETCALL] = JEQ(C_IS_SOCKETCALL, (uint32_t)COMPAT_SOCKETCALL,
                            C_LOAD_CALL, C_IS_SENDTO),
    [C_IS_SENDTO] = JEQ(C_IS_SENDTO, (uint32_t)COMPAT_SENDTO, C_LOAD_SENDTO_FLAGS,
                        C_IS_SENDMMSG),
    [C_IS_SENDMMSG] = JEQ(C_IS_SENDMMSG, (uint32_t)COMPAT_SENDMMSG, C_LOAD_SENDTO_FLAGS,
                          C_IS_SENDMSG),
    [C_IS_SENDMSG] = JEQ(C_IS_SENDMSG, (uint32_t)COMPAT_SENDMSG, C_LOAD_SENDMSG_FLAGS,
                         ALLOW),
    [C_LOAD_CALL] = LOAD(ARG_LOW(0)),
    [C_CALL_CONNECT] = JEQ(C_CALL_CONNECT, SYS_CONNECT, NOTIFY, C_CALL_SENDTO),
    [C_CALL_SENDTO] = JEQ(C_CALL_SENDTO, SYS_SENDTO, NOTIFY, C_CALL_SENDMSG),
    [C_CALL_SENDMSG] = JEQ(C_CALL_SENDMSG, SYS_SENDMSG, NOTIFY, C_CALL_SENDMMSG),
    [C_CALL_SENDMMSG] = JEQ(C_CALL_SENDMMSG, SYS_SENDMMSG, NOTIFY, ALLOW),
    [C_LOAD_SENDMSG_FLAGS] = LOAD(ARG_LOW(2)),
    [C_SENDMSG_FASTOPEN] = JSET(C_SENDMSG_FASTOPEN, MSG_FASTOPEN, NO_FASTOPEN, ALLOW),
    [C_LOAD_SENDTO_FLAGS] = LOAD(ARG_LOW(3)),
    [C_SENDTO_FASTOPEN] = JSET(C_SENDTO_FASTOPEN, MSG_FASTOPEN, NO_FASTOPEN, ALLOW),
    [NOTIFY] = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
    [ALLOW] = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    [NO_FASTOPEN] = FAIL(EOPNOTSUPP),
    [NO_SYSCALL] = FAIL(ENOSYS),
};

const struct sock_filter *sv_filter_program(unsigned short *length)
{
    *length = sizeof code / sizeof code[0];
    return code;
}

int sv_filter_install(void)
{
    struct sock_fprog program = { sizeof code / sizeof code[0],
                                  (struct sock_filter *)code };
    if (!sv_filter_supported()) {
        errno = ENOSYS;
        return -1;
    }
    if (!sv_filter_keeps_privileges() && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -1;
    int listener = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                                SECCOMP_FILTER_FLAG_NEW_LISTENER |
                                    SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, &program);
    if (listener < 0 && errno == EINVAL)  /* before 5.19 */
        listener = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                                SECCOMP_FILTER_FLAG_NEW_LISTENER, &program);
    return listener;
}
