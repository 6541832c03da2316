/* exec_altstack HOST PORT PROGRAM [ARGS...]
 *
 * Connects one socket (so the shim has a connection to hand off), then
 * execs PROGRAM from a signal handler running on a 16 KiB alternate
 * stack, as a supervisor's SIGCHLD or SIGTERM handler might. Whatever the
 * shim does in its exec hook must fit there.
 *
 * Exit: PROGRAM's status; 1 when connect failed, 2 on setup errors, 3 when
 * exec returned. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "client_util.h"

enum { ALT_STACK_SIZE = 16 * 1024 };

static char **program;

static void exec_program(int signal_number)
{
    (void)signal_number;
    execv(program[0], program);
    _exit(3);
}

int main(int argc, char **argv)
{
    struct sockaddr_storage to;
    socklen_t length;
    if (argc < 4 || parse_address(argv[1], atoi(argv[2]), &to, &length) < 0) {
        fprintf(stderr, "usage: exec_altstack HOST PORT PROGRAM [ARGS...]\n");
        return 2;
    }
    program = argv + 3;
    int fd = socket(to.ss_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&to, length) < 0) {
        printf("%s\n", errno_text(errno));
        return 1;
    }
    static char alt_stack[ALT_STACK_SIZE];
    stack_t stack = { .ss_sp = alt_stack, .ss_size = sizeof alt_stack };
    struct sigaction action = { .sa_handler = exec_program, .sa_flags = SA_ONSTACK };
    sigemptyset(&action.sa_mask);
    if (sigaltstack(&stack, NULL) < 0 || sigaction(SIGUSR1, &action, NULL) < 0)
        return 2;
    raise(SIGUSR1);
    return 3;
}
