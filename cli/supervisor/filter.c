/* The filter `bulkhead run` installs in its child before exec. It stays
 * for the life of the tree (every descendant inherits it, exec or not)
 * and stacks with any filter a program installs of its own.
 *
 * It asks the supervisor about connect() and close(), only those the shim
 * did not mark (libc.h: BH_SUPERVISED_MARK): what the shim counts itself
 * never costs a round trip; and about sendto(), sendmsg() and sendmmsg()
 * with MSG_FASTOPEN, which connect without connect() (fastopen.c): a send
 * without it never leaves the kernel. Every other system call, and every
 * call of another architecture's ABI, is allowed in the kernel. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "libc/libc.h"
#include "supervisor/supervisor.h"

#if defined(__x86_64__)
#define SV_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SV_ARCH AUDIT_ARCH_AARCH64
#else
#define SV_ARCH 0
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
    LOAD_ARCH, CHECK_ARCH, LOAD_NR,
    IS_CONNECT, IS_CLOSE, IS_SENDTO, IS_SENDMMSG, IS_SENDMSG,
    LOAD_SENDMSG_FLAGS, SENDMSG_FASTOPEN, LOAD_SENDTO_FLAGS, SENDTO_FASTOPEN,
    LOAD_MARK_LOW, CHECK_MARK_LOW, LOAD_MARK_HIGH, CHECK_MARK_HIGH,
    NOTIFY, ALLOW,
};
#define TO(from, to) ((to) - (from) - 1)
#define JEQ(at, value, yes, no) \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (value), TO(at, yes), TO(at, no))
#define JSET(at, bits, yes, no) \
    BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, (bits), TO(at, yes), TO(at, no))
#define LOAD(offset) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (offset))

int sv_filter_install(void)
{
    /* sendto's and sendmmsg's flags are their fourth argument, sendmsg's
     * its third; MSG_FASTOPEN is in their low 32 bits (flags are an int). */
    struct sock_filter code[] = {
        [LOAD_ARCH] = LOAD(offsetof(struct seccomp_data, arch)),
        [CHECK_ARCH] = JEQ(CHECK_ARCH, SV_ARCH, LOAD_NR, ALLOW),
        [LOAD_NR] = LOAD(offsetof(struct seccomp_data, nr)),
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
        [NOTIFY] = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        [ALLOW] = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = { sizeof code / sizeof code[0], code };
    if (!sv_filter_supported()) {
        errno = ENOSYS;
        return -1;
    }
    if (!sv_filter_keeps_privileges() && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                        SECCOMP_FILTER_FLAG_NEW_LISTENER, &program);
}
