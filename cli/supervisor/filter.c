/* The filter `bulkhead run` installs in its child before exec. It stays
 * for the life of the tree (every descendant inherits it, exec or not)
 * and stacks with any filter a program installs of its own.
 *
 * It asks the supervisor about connect() and close() only, and only those
 * the shim did not mark (libc.h: BH_SUPERVISED_MARK): what the shim
 * counts itself never costs a round trip. Every other system call, and
 * every call of another architecture's ABI, is allowed in the kernel. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
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
    return SV_ARCH != 0;
}

#define ARG3_LOW offsetof(struct seccomp_data, args[3])
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ARG3_HIGH (ARG3_LOW + 4)
#else
#define ARG3_HIGH ARG3_LOW
#undef ARG3_LOW
#define ARG3_LOW (offsetof(struct seccomp_data, args[3]) + 4)
#endif

int sv_filter_install(void)
{
    struct sock_filter code[] = {
        /* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        /* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SV_ARCH, 0, 8),
        /* 2 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        /* 3 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_connect, 1, 0),
        /* 4 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_close, 0, 5),
        /* 5 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG3_LOW),
        /* 6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
                         (uint32_t)(BH_SUPERVISED_MARK & 0xffffffffu), 0, 2),
        /* 7 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG3_HIGH),
        /* 8 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
                         (uint32_t)(BH_SUPERVISED_MARK >> 32), 1, 0),
        /* 9 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        /* 10 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = { sizeof code / sizeof code[0], code };
    if (!sv_filter_supported()) {
        errno = ENOSYS;
        return -1;
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                        SECCOMP_FILTER_FLAG_NEW_LISTENER, &program);
}
