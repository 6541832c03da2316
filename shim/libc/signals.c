#include "libc/signals.h"

#include <errno.h>
#include <signal.h>

static int is_fault(int sig)
{
    return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL ||
           sig == SIGTRAP;
}

int bh_signals_all_restart(void)
{
    int saved_errno = errno;
    sigset_t blocked;
    int restart = pthread_sigmask(SIG_BLOCK, NULL, &blocked) == 0;
    for (int sig = 1; restart && sig < NSIG; sig++) {
        struct sigaction action;
        /* glibc refuses to show its own signals (EINVAL): they restart.
         * A fault's signal comes from the faulting instruction, never
         * while a thread sleeps in a system call: its handler (a
         * sanitizer's, a crash reporter's) cannot be what woke the wait. */
        if (sig == SIGKILL || sig == SIGSTOP || is_fault(sig) ||
            sigismember(&blocked, sig) == 1 || sigaction(sig, NULL, &action) < 0)
            continue;
        int handled = (action.sa_flags & SA_SIGINFO) ||
                      (action.sa_handler != SIG_DFL && action.sa_handler != SIG_IGN);
        restart = !handled || (action.sa_flags & SA_RESTART);
    }
    errno = saved_errno;
    return restart;
}
