/* int80_connect PORT N connect|socketcall GO_FILE
 *
 * Built by the tests with gcc -static (not PIE: its data has 32-bit
 * addresses), into build/tests/int80_connect. A 64-bit program that
 * connects N TCP sockets to 127.0.0.1:PORT through the i386 ABI
 * (`int $0x80`): its connect (362), or socketcall(SYS_CONNECT, args)
 * (102). Prints "ok" or the errno name for each, then waits for GO_FILE
 * to exist before it closes them and exits. Prints "no-int80" and exits 3
 * where the machine runs no i386 calls (no IA32 emulation, or a virtual
 * machine without it: `int $0x80` faults). Exit: 0, 2 usage or setup, 3. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/net.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { I386_GETPID = 20, I386_SOCKETCALL = 102, I386_CONNECT = 362, MOST = 64 };

/* In the data segment, below 4 GiB: an i386 call sees 32-bit pointers. */
static struct sockaddr_in to = { .sin_family = AF_INET };
static unsigned int socketcall_args[3];

static long int80(long nr, long a, long b, long c)
{
    long ret;
    __asm__ volatile("int $0x80"
                     : "=a"(ret)
                     : "a"(nr), "b"(a), "c"(b), "d"(c)
                     : "r8", "r9", "r10", "r11", "memory", "cc");
    return ret;
}

static sigjmp_buf probing;

static void faulted(int signal_number)
{
    siglongjmp(probing, signal_number);
}

/* Whether an i386 call works here: getpid() through it. */
static int int80_works(void)
{
    struct sigaction action = { .sa_handler = faulted }, old;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &old);
    int works = sigsetjmp(probing, 1) == 0 && int80(I386_GETPID, 0, 0, 0) == getpid();
    sigaction(SIGSEGV, &old, NULL);
    return works;
}

static long connect_i386(int fd, int through_socketcall)
{
    if (!through_socketcall)
        return int80(I386_CONNECT, fd, (long)(unsigned long)&to, sizeof to);
    socketcall_args[0] = (unsigned int)fd;
    socketcall_args[1] = (unsigned int)(unsigned long)&to;
    socketcall_args[2] = sizeof to;
    return int80(I386_SOCKETCALL, SYS_CONNECT, (long)(unsigned long)socketcall_args, 0);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int n = argc == 5 ? atoi(argv[2]) : 0;
    int through_socketcall = argc == 5 && strcmp(argv[3], "socketcall") == 0;
    if (n <= 0 || n > MOST || (!through_socketcall && strcmp(argv[3], "connect") != 0) ||
        inet_pton(AF_INET, "127.0.0.1", &to.sin_addr) != 1 ||
        (unsigned long)&to > 0xffffffffUL) {
        fprintf(stderr, "usage: int80_connect PORT N connect|socketcall GO_FILE\n");
        return 2;
    }
    if (!int80_works()) {
        printf("no-int80\n");
        return 3;
    }
    to.sin_port = htons((unsigned short)atoi(argv[1]));
    int fds[MOST];
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        long rc = fds[i] < 0 ? -errno : connect_i386(fds[i], through_socketcall);
        printf("%s\n", rc == 0 ? "ok" : strerrorname_np((int)-rc));
    }
    while (access(argv[4], F_OK) != 0)
        usleep(10000);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return 0;
}
