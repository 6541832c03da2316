/* readiness_cost: what the readiness layer (shim/readiness/) costs per
 * call while fds wait. In the shim only the engine makes an fd wait, so
 * this program links the layer itself and hides a never-connected TCP
 * socket through its interface, as the engine does; the calls are the
 * same inline functions the hooks are made of (bench_client's readiness
 * mode counts the hooks themselves, nothing waiting).
 *
 *   readiness_cost N poll|epoll bare|idle|waiting|hidden
 *
 * N calls with timeout 0 on one end of a socketpair, which is writable:
 * bare straight to libc, idle through the layer with nothing waiting,
 * waiting with one other fd hidden, hidden (poll) with that fd in the
 * array too. Every call must find exactly the socketpair's end. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "readiness/readiness.h"

enum { WARMUP = 200 };

static void fail(const char *what)
{
    perror(what);
    exit(1);
}

static int call_once(int epfd, struct pollfd *entries, nfds_t count, int bare)
{
    struct epoll_event event;
    if (epfd >= 0)
        return bare ? libc_epoll_wait(epfd, &event, 1, 0) : bh_epoll_wait(epfd, &event, 1, 0);
    return bare ? libc_poll(entries, count, 0) : bh_poll(entries, count, 0);
}

static __attribute__((noinline)) void
measured_readiness(int epfd, struct pollfd *entries, nfds_t count, int bare, long n)
{
    for (long i = 0; i < n; i++)
        if (call_once(epfd, entries, count, bare) != 1)
            fail("the call did not find the one ready fd");
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: readiness_cost N poll|epoll bare|idle|waiting|hidden\n");
        return 2;
    }
    long n = atol(argv[1]);
    int epoll = strcmp(argv[2], "epoll") == 0, bare = strcmp(argv[3], "bare") == 0;
    int pair[2], epfd = -1;
    int waiting = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) < 0 || waiting < 0)
        fail("socket");
    struct pollfd entries[2] = {{.fd = pair[0], .events = POLLOUT},
                                {.fd = waiting, .events = POLLOUT}};
    nfds_t count = strcmp(argv[3], "hidden") == 0 ? 2 : 1;
    if (epoll) {
        struct epoll_event event = {.events = EPOLLOUT};
        if ((epfd = epoll_create1(0)) < 0 ||
            epoll_ctl(epfd, EPOLL_CTL_ADD, pair[0], &event) != 0)
            fail("epoll");
    }
    if ((strcmp(argv[3], "waiting") == 0 || count == 2) && bh_waiting_hide(waiting) != 0)
        fail("bh_waiting_hide");
    measured_readiness(epfd, entries, count, bare, WARMUP);
    measured_readiness(epfd, entries, count, bare, n);
    return 0;
}
