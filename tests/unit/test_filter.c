/* The supervisor's seccomp filter, run here by a small interpreter of the
 * classic BPF it is made of (loads of seccomp_data words, jumps on
 * constants, returns), against system calls of every ABI the kernel may
 * hand it. The kernel runs the same instructions; this says what they
 * answer for calls a test machine cannot make (an x86_64 VM without IA32
 * emulation faults on `int $0x80`). */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/net.h>
#include <linux/seccomp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <cmocka.h>

#include "libc/libc.h"
#include "supervisor/supervisor.h"

enum { I386_CONNECT = 362, I386_SOCKETCALL = 102, I386_SENDTO = 369, I386_GETPID = 20 };

/* Runs the filter on data: its return value. Fails the test on an
 * instruction the interpreter does not know, or a jump out of the program. */
static uint32_t run_filter(const struct seccomp_data *data)
{
    unsigned short length;
    const struct sock_filter *code = sv_filter_program(&length);
    uint32_t accumulator = 0;
    for (unsigned pc = 0; pc < length; pc++) {
        const struct sock_filter *op = &code[pc];
        switch (op->code) {
        case BPF_LD | BPF_W | BPF_ABS:
            assert_true(op->k + 4 <= sizeof *data);
            memcpy(&accumulator, (const char *)data + op->k, 4);
            break;
        case BPF_JMP | BPF_JEQ | BPF_K:
            pc += accumulator == op->k ? op->jt : op->jf;
            break;
        case BPF_JMP | BPF_JSET | BPF_K:
            pc += (accumulator & op->k) ? op->jt : op->jf;
            break;
        case BPF_JMP | BPF_JGE | BPF_K:
            pc += accumulator >= op->k ? op->jt : op->jf;
            break;
        case BPF_RET | BPF_K:
            return op->k;
        default:
            fail_msg("instruction %u: code 0x%x", pc, op->code);
        }
    }
    fail_msg("ran off the end of the program");
    return 0;
}

static uint32_t call(uint32_t arch, int nr, uint64_t a0, uint64_t a1, uint64_t a2,
                     uint64_t a3)
{
    struct seccomp_data data = { .nr = nr, .arch = arch,
                                 .args = { a0, a1, a2, a3, 0, 0 } };
    return run_filter(&data);
}

static const uint32_t NOTIFY = SECCOMP_RET_USER_NOTIF, ALLOW = SECCOMP_RET_ALLOW;

static void test_native_calls(void **state)
{
    (void)state;
    uint32_t arch = AUDIT_ARCH_X86_64;
    assert_int_equal(call(arch, __NR_connect, 3, 0, 16, 0), NOTIFY);
    assert_int_equal(call(arch, __NR_close, 3, 0, 0, 0), NOTIFY);
    /* The shim's own calls, marked, never leave the kernel. */
    assert_int_equal(call(arch, __NR_connect, 3, 0, 16, BH_SUPERVISED_MARK), ALLOW);
    assert_int_equal(call(arch, __NR_close, 3, 0, 0, BH_SUPERVISED_MARK), ALLOW);
    assert_int_equal(call(arch, __NR_sendto, 3, 0, 1, MSG_FASTOPEN), NOTIFY);
    assert_int_equal(call(arch, __NR_sendto, 3, 0, 1, 0), ALLOW);
    assert_int_equal(call(arch, __NR_sendmsg, 3, 0, MSG_FASTOPEN, 0), NOTIFY);
    assert_int_equal(call(arch, __NR_getpid, 0, 0, 0, 0), ALLOW);
}

static void test_i386_calls_are_trapped(void **state)
{
    (void)state;
    uint32_t arch = AUDIT_ARCH_I386;
    assert_int_equal(call(arch, I386_CONNECT, 3, 0, 16, 0), NOTIFY);
    assert_int_equal(call(arch, I386_SOCKETCALL, SYS_CONNECT, 0, 0, 0), NOTIFY);
    assert_int_equal(call(arch, I386_SOCKETCALL, SYS_RECV, 0, 0, 0), ALLOW);
    /* A direct Fast Open send cannot be answered by the supervisor here. */
    assert_int_equal(call(arch, I386_SENDTO, 3, 0, 1, MSG_FASTOPEN),
                     SECCOMP_RET_ERRNO | EOPNOTSUPP);
    assert_int_equal(call(arch, I386_SENDTO, 3, 0, 1, 0), ALLOW);
    assert_int_equal(call(arch, I386_GETPID, 0, 0, 0, 0), ALLOW);
}

static void test_other_abis_fail(void **state)
{
    (void)state;
    /* x32: numbers with bit 30 set, under the x86_64 architecture. */
    assert_int_equal(call(AUDIT_ARCH_X86_64, 0x40000000 | __NR_connect, 3, 0, 16, 0),
                     SECCOMP_RET_ERRNO | ENOSYS);
    assert_int_equal(call(AUDIT_ARCH_AARCH64, 203, 3, 0, 16, 0),
                     SECCOMP_RET_ERRNO | ENOSYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_native_calls),
        cmocka_unit_test(test_i386_calls_are_trapped),
        cmocka_unit_test(test_other_abis_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
