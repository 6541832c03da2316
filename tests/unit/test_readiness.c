/* The readiness layer (readiness/), driven through its interface with
 * real sockets on loopback: a never-connected TCP socket is exactly what
 * a waiting fd is (the kernel reports it POLLOUT|POLLHUP at once), and
 * one connected to a listener while hidden is what an admitted one is.
 * Every poll, ppoll, select, pselect and epoll variant keeps a hidden fd
 * out of its results, keeps the caller's timeout, and sees the fd again
 * after bh_waiting_show; threads asleep in them wake; epoll registrations
 * made before and during the wait, level- and edge-triggered, one-shot,
 * in two sets, come back as the program last gave them. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "readiness/readiness.h"

static int listener = -1;
static struct sockaddr_in listening;

static int64_t now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static int tcp_socket(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    return fd;
}

/* The admitted connect: on loopback it completes before the next poll. */
static void connect_now(int fd)
{
    int rc = connect(fd, (struct sockaddr *)&listening, sizeof listening);
    assert_true(rc == 0 || errno == EINPROGRESS);
}

static int set_up(void **state)
{
    (void)state;
    socklen_t length = sizeof listening;
    listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    listening = (struct sockaddr_in){.sin_family = AF_INET,
                                     .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (listener < 0 || bind(listener, (struct sockaddr *)&listening, length) != 0 ||
        listen(listener, SOMAXCONN) != 0 ||
        getsockname(listener, (struct sockaddr *)&listening, &length) != 0)
        return -1;
    return 0;
}

static int tear_down(void **state)
{
    (void)state;
    bh_waiting_reset();
    close(listener);
    return 0;
}

static short poll_one(int fd, int timeout_ms)
{
    struct pollfd entry = {.fd = fd, .events = POLLIN | POLLOUT};
    int found = bh_poll(&entry, 1, timeout_ms);
    assert_int_equal(found, entry.revents != 0);
    return entry.revents;
}

/* ---- poll and ppoll ------------------------------------------------------ */

/* Nothing waiting: the kernel's answer. One fd waiting: only it hidden. */
static void test_only_waiting_fds_are_hidden(void **state)
{
    (void)state;
    int fd = tcp_socket(), waiting = tcp_socket();
    assert_int_equal(bh_waiting_active, 0);
    assert_int_equal(poll_one(fd, 0), POLLOUT | POLLHUP);
    assert_int_equal(bh_waiting_verdict(fd, 0), BH_WAITING_NONE);
    assert_int_equal(bh_waiting_hide(waiting), 0);
    assert_int_equal(bh_waiting_active, 1);
    assert_int_equal(poll_one(fd, 0), POLLOUT | POLLHUP);
    assert_int_equal(poll_one(waiting, 0), 0);
    close(fd);
    close(waiting);
}

static void test_poll_hides_and_keeps_the_timeout(void **state)
{
    (void)state;
    int fd = tcp_socket(), pipes[2];
    assert_int_equal(pipe(pipes), 0);
    assert_int_equal(bh_waiting_hide(fd), 0);
    assert_int_equal(bh_waiting_verdict(fd, 0), BH_WAITING_HIDDEN);
    int64_t start = now_ms();
    assert_int_equal(poll_one(fd, 100), 0);
    assert_true(now_ms() - start >= 100);

    /* Beside a ready fd: only that one counts, the waker never shows. */
    struct pollfd entries[3] = {{.fd = fd, .events = POLLOUT},
                                {.fd = -1, .events = POLLIN},
                                {.fd = pipes[1], .events = POLLOUT}};
    assert_int_equal(bh_poll(entries, 3, 1000), 1);
    assert_int_equal(entries[0].revents, 0);
    assert_int_equal(entries[1].revents, 0);
    assert_int_equal(entries[2].revents, POLLOUT);

    connect_now(fd);  /* admitted, but not shown yet */
    assert_int_equal(poll_one(fd, 50), 0);
    bh_waiting_show(fd, 0);
    assert_int_equal(poll_one(fd, 1000), POLLOUT);
    assert_int_equal(bh_waiting_active, 0);
    close(fd);
    close(pipes[0]);
    close(pipes[1]);
}

static void test_ppoll_hides_and_keeps_the_timeout(void **state)
{
    (void)state;
    int fd = tcp_socket();
    sigset_t mask;
    sigemptyset(&mask);
    assert_int_equal(bh_waiting_hide(fd), 0);
    struct pollfd entry = {.fd = fd, .events = POLLOUT};
    struct timespec timeout = {0, 100 * 1000000};
    int64_t start = now_ms();
    assert_int_equal(bh_ppoll(&entry, 1, &timeout, &mask), 0);
    assert_true(now_ms() - start >= 100);
    assert_int_equal(entry.revents, 0);
    connect_now(fd);
    bh_waiting_show(fd, 0);
    assert_int_equal(bh_ppoll(&entry, 1, &timeout, NULL), 1);
    assert_int_equal(entry.revents, POLLOUT);
    close(fd);
}

/* Above the copy on the stack the copy is mapped: hidden all the same. */
static void test_a_long_poll_array(void **state)
{
    (void)state;
    enum { LONG = 2000 };
    static struct pollfd entries[LONG];
    int fd = tcp_socket();
    for (int i = 0; i < LONG; i++)
        entries[i] = (struct pollfd){.fd = -1};
    entries[LONG - 1] = (struct pollfd){.fd = fd, .events = POLLOUT};
    assert_int_equal(bh_waiting_hide(fd), 0);
    assert_int_equal(bh_poll(entries, LONG, 50), 0);
    assert_int_equal(entries[LONG - 1].revents, 0);
    bh_waiting_show(fd, ECONNREFUSED);
    assert_int_equal(bh_poll(entries, LONG, 1000), 1);
    assert_int_equal(entries[LONG - 1].revents, POLLOUT | POLLERR | POLLHUP);
    close(fd);
}

/* The refusal: POLLERR until SO_ERROR is read, then the socket as it is. */
static void test_a_refusal_is_reported_until_read(void **state)
{
    (void)state;
    int fd = tcp_socket();
    assert_int_equal(bh_waiting_hide(fd), 0);
    bh_waiting_show(fd, ECONNREFUSED);
    assert_int_equal(poll_one(fd, -1), POLLOUT | POLLERR | POLLHUP);
    struct pollfd reading = {.fd = fd, .events = POLLIN};
    assert_int_equal(bh_poll(&reading, 1, 0), 1);
    assert_int_equal(reading.revents, POLLERR | POLLHUP);
    assert_int_equal(bh_waiting_verdict(fd, 0), ECONNREFUSED);
    assert_int_equal(bh_waiting_verdict(fd, 1), ECONNREFUSED);
    assert_int_equal(bh_waiting_verdict(fd, 1), BH_WAITING_NONE);
    assert_int_equal(bh_waiting_active, 0);
    close(fd);
}

static void test_forget_and_reset_empty_the_table(void **state)
{
    (void)state;
    int fd = tcp_socket(), other = tcp_socket();
    assert_int_equal(bh_waiting_hide(fd), 0);
    assert_int_equal(bh_waiting_hide(other), 0);
    assert_int_equal(bh_waiting_active, 2);
    bh_waiting_forget(fd);
    assert_int_equal(bh_waiting_verdict(fd, 0), BH_WAITING_NONE);
    assert_int_equal(poll_one(fd, 0), POLLOUT | POLLHUP);
    assert_int_equal(poll_one(other, 0), 0);
    bh_waiting_reset();
    assert_int_equal(bh_waiting_active, 0);
    assert_int_equal(poll_one(other, 0), POLLOUT | POLLHUP);
    close(fd);
    close(other);
}

/* ---- threads asleep wake at the verdict ---------------------------------- */

enum { POLL, PPOLL, SELECT, PSELECT, EPOLL_WAIT, EPOLL_PWAIT, EPOLL_PWAIT2 };

struct sleeper {
    int call, fd, epfd;
    int timeout_ms;
    int found;
    uint32_t events;
    int64_t slept_ms;
};

static int sleep_in(struct sleeper *sleeper)
{
    struct pollfd entry = {.fd = sleeper->fd, .events = POLLOUT};
    struct epoll_event event;
    struct timespec timeout = {sleeper->timeout_ms / 1000,
                               (sleeper->timeout_ms % 1000) * 1000000L};
    struct timeval tv = {sleeper->timeout_ms / 1000, (sleeper->timeout_ms % 1000) * 1000};
    const struct timespec *ts = sleeper->timeout_ms < 0 ? NULL : &timeout;
    fd_set writable;
    FD_ZERO(&writable);
    FD_SET(sleeper->fd, &writable);
    int found;
    switch (sleeper->call) {
    case POLL:
        found = bh_poll(&entry, 1, sleeper->timeout_ms);
        sleeper->events = (uint32_t)entry.revents;
        return found;
    case PPOLL:
        found = bh_ppoll(&entry, 1, ts, NULL);
        sleeper->events = (uint32_t)entry.revents;
        return found;
    case SELECT:
        found = bh_select(sleeper->fd + 1, NULL, &writable, NULL,
                          sleeper->timeout_ms < 0 ? NULL : &tv);
        sleeper->events = FD_ISSET(sleeper->fd, &writable) ? POLLOUT : 0;
        return found;
    case PSELECT:
        found = bh_pselect(sleeper->fd + 1, NULL, &writable, NULL, ts, NULL);
        sleeper->events = FD_ISSET(sleeper->fd, &writable) ? POLLOUT : 0;
        return found;
    case EPOLL_WAIT:
        found = bh_epoll_wait(sleeper->epfd, &event, 1, sleeper->timeout_ms);
        break;
    case EPOLL_PWAIT:
        found = bh_epoll_pwait(sleeper->epfd, &event, 1, sleeper->timeout_ms, NULL);
        break;
    default:
        found = bh_epoll_pwait2(sleeper->epfd, &event, 1, ts, NULL);
        break;
    }
    sleeper->events = found > 0 ? event.events : 0;
    return found;
}

static void *sleeping(void *argument)
{
    struct sleeper *sleeper = argument;
    int64_t start = now_ms();
    sleeper->found = sleep_in(sleeper);
    sleeper->slept_ms = now_ms() - start;
    return NULL;
}

/* A thread sleeps in `call` on a hidden fd, registered in epoll before
 * the hide; it sees nothing until the admitted connect is shown, then
 * wakes at once. */
static void wakes_at_the_verdict(int call)
{
    int fd = tcp_socket(), epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event event = {.events = EPOLLOUT, .data.u64 = 77};
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event), 0);
    assert_int_equal(bh_waiting_hide(fd), 0);
    struct sleeper sleeper = {.call = call, .fd = fd, .epfd = epfd, .timeout_ms = 150};
    sleeping(&sleeper);
    assert_int_equal(sleeper.found, 0);
    assert_true(sleeper.slept_ms >= 150);

    sleeper.timeout_ms = 10000;
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, sleeping, &sleeper), 0);
    struct timespec moment = {0, 100 * 1000000};
    nanosleep(&moment, NULL);  /* the sleeper is in its call, or about to be */
    connect_now(fd);
    bh_waiting_show(fd, 0);
    pthread_join(thread, NULL);
    assert_int_equal(sleeper.found, 1);
    assert_true(sleeper.events & POLLOUT);
    assert_true(sleeper.slept_ms < 5000);
    close(fd);
    close(epfd);
}

static void test_poll_wakes(void **state) { (void)state; wakes_at_the_verdict(POLL); }
static void test_ppoll_wakes(void **state) { (void)state; wakes_at_the_verdict(PPOLL); }
static void test_select_wakes(void **state) { (void)state; wakes_at_the_verdict(SELECT); }
static void test_pselect_wakes(void **state) { (void)state; wakes_at_the_verdict(PSELECT); }
static void test_epoll_wait_wakes(void **state)
{
    (void)state;
    wakes_at_the_verdict(EPOLL_WAIT);
}
static void test_epoll_pwait_wakes(void **state)
{
    (void)state;
    wakes_at_the_verdict(EPOLL_PWAIT);
}
static void test_epoll_pwait2_wakes(void **state)
{
    (void)state;
    wakes_at_the_verdict(EPOLL_PWAIT2);
}

/* Several threads asleep on one hidden fd all wake at one show; a show
 * of another fd meanwhile wakes them only to look again: each keeps its
 * timeout. */
static void test_every_thread_wakes_and_timeouts_hold(void **state)
{
    (void)state;
    enum { THREADS = 4 };
    int fd = tcp_socket(), other = tcp_socket();
    assert_int_equal(bh_waiting_hide(fd), 0);
    assert_int_equal(bh_waiting_hide(other), 0);
    struct sleeper sleepers[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        sleepers[i] = (struct sleeper){.call = i % 2 ? SELECT : POLL, .fd = fd,
                                       .timeout_ms = 400};
        assert_int_equal(pthread_create(&threads[i], NULL, sleeping, &sleepers[i]), 0);
    }
    struct timespec moment = {0, 100 * 1000000};
    nanosleep(&moment, NULL);
    bh_waiting_show(other, 0);  /* not theirs */
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(sleepers[i].found, 0);
        assert_true(sleepers[i].slept_ms >= 400);
    }
    for (int i = 0; i < THREADS; i++) {
        sleepers[i].timeout_ms = 10000;
        assert_int_equal(pthread_create(&threads[i], NULL, sleeping, &sleepers[i]), 0);
    }
    nanosleep(&moment, NULL);
    connect_now(fd);
    bh_waiting_show(fd, 0);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(sleepers[i].found, 1);
        assert_int_equal(sleepers[i].events, POLLOUT);
        assert_true(sleepers[i].slept_ms < 5000);
    }
    close(fd);
    close(other);
}

/* A burst: threads entering poll and select while the shows of their fds
 * come as fast as the main thread can make them, before, during or after
 * each one's look at the table. None may sleep past its show. */
static void test_no_wake_lost_in_a_burst(void **state)
{
    (void)state;
    enum { THREADS = 8, ROUNDS = 20 };
    for (int round = 0; round < ROUNDS; round++) {
        struct sleeper sleepers[THREADS];
        pthread_t threads[THREADS];
        for (int i = 0; i < THREADS; i++) {
            int fd = tcp_socket();
            assert_int_equal(bh_waiting_hide(fd), 0);
            connect_now(fd);
            sleepers[i] = (struct sleeper){.call = i % 2 ? PSELECT : PPOLL, .fd = fd,
                                           .timeout_ms = 10000};
            assert_int_equal(pthread_create(&threads[i], NULL, sleeping, &sleepers[i]), 0);
        }
        for (int i = 0; i < THREADS; i++)
            bh_waiting_show(sleepers[i].fd, 0);
        for (int i = 0; i < THREADS; i++)
            pthread_join(threads[i], NULL);
        for (int i = 0; i < THREADS; i++) {
            assert_int_equal(sleepers[i].found, 1);
            assert_true(sleepers[i].slept_ms < 5000);
            close(sleepers[i].fd);
        }
        int accepted;  /* the listener's queue never fills */
        while ((accepted = accept4(listener, NULL, NULL, SOCK_CLOEXEC)) >= 0)
            close(accepted);
    }
}

/* ---- select and pselect -------------------------------------------------- */

static void test_select_hides_and_reports_a_refusal(void **state)
{
    (void)state;
    int fd = tcp_socket();
    fd_set readable, writable, exceptional;
    assert_int_equal(bh_waiting_hide(fd), 0);
    FD_ZERO(&readable);
    FD_ZERO(&writable);
    FD_ZERO(&exceptional);
    FD_SET(fd, &readable);
    FD_SET(fd, &writable);
    FD_SET(fd, &exceptional);
    struct timeval timeout = {0, 100000};
    int64_t start = now_ms();
    assert_int_equal(bh_select(fd + 1, &readable, &writable, &exceptional, &timeout), 0);
    assert_true(now_ms() - start >= 100);
    assert_false(FD_ISSET(fd, &readable) || FD_ISSET(fd, &writable));
    assert_int_equal(timeout.tv_sec, 0);
    assert_true(timeout.tv_usec < 1000);

    bh_waiting_show(fd, ECONNREFUSED);
    FD_SET(fd, &readable);
    FD_SET(fd, &writable);
    FD_SET(fd, &exceptional);
    struct timespec none = {0, 0};
    assert_int_equal(bh_pselect(fd + 1, &readable, &writable, &exceptional, &none, NULL),
                     2);
    assert_true(FD_ISSET(fd, &readable) && FD_ISSET(fd, &writable));
    assert_false(FD_ISSET(fd, &exceptional));
    close(fd);
}

/* ---- epoll --------------------------------------------------------------- */

static int epoll_events(int epfd, struct epoll_event *event, int timeout_ms)
{
    return bh_epoll_wait(epfd, event, 1, timeout_ms);
}

static void test_epoll_ctl_while_hidden_is_answered_as_the_kernel_would(void **state)
{
    (void)state;
    int fd = tcp_socket(), epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event event = {.events = EPOLLIN, .data.u64 = 1};
    assert_int_equal(bh_waiting_hide(fd), 0);
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &event), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event), 0);
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event), -1);
    assert_int_equal(errno, EEXIST);
    assert_int_equal(bh_epoll_ctl(listener, EPOLL_CTL_ADD, fd, &event), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_ADD, fd, NULL), -1);
    assert_int_equal(errno, EFAULT);
    assert_int_equal(epoll_events(epfd, &event, 50), 0);  /* kernel: HUP at once */
    event = (struct epoll_event){.events = EPOLLOUT, .data.u64 = 2};
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &event), 0);
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL), 0);
    event = (struct epoll_event){.events = EPOLLOUT, .data.u64 = 3};
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event), 0);
    assert_int_equal(epoll_events(epfd, &event, 50), 0);
    connect_now(fd);
    assert_int_equal(epoll_events(epfd, &event, 50), 0);
    bh_waiting_show(fd, 0);
    assert_int_equal(epoll_events(epfd, &event, 1000), 1);
    assert_int_equal(event.events, EPOLLOUT);
    assert_int_equal(event.data.u64, 3);
    /* Back in the kernel: its own answers again. */
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event), -1);
    assert_int_equal(errno, EEXIST);
    close(fd);
    close(epfd);
}

static void test_one_fd_in_two_epoll_sets(void **state)
{
    (void)state;
    int fd = tcp_socket(), first = epoll_create1(0), second = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLOUT, .data.u64 = 11};
    assert_int_equal(bh_epoll_ctl(first, EPOLL_CTL_ADD, fd, &event), 0);
    event.data.u64 = 22;
    event.events = EPOLLOUT | EPOLLET;
    assert_int_equal(bh_epoll_ctl(second, EPOLL_CTL_ADD, fd, &event), 0);
    assert_int_equal(bh_waiting_hide(fd), 0);
    assert_int_equal(epoll_events(first, &event, 0), 0);
    assert_int_equal(epoll_events(second, &event, 50), 0);
    connect_now(fd);
    bh_waiting_show(fd, 0);
    assert_int_equal(epoll_events(first, &event, 1000), 1);
    assert_int_equal(event.data.u64, 11);
    assert_int_equal(epoll_events(first, &event, 0), 1);  /* level: again */
    assert_int_equal(epoll_events(second, &event, 1000), 1);
    assert_int_equal(event.data.u64, 22);
    assert_int_equal(epoll_events(second, &event, 0), 0);  /* edge: once */
    close(fd);
    close(first);
    close(second);
}

/* A one-shot registration that already fired stays disarmed through the
 * wait; one armed comes back armed and fires once. */
static void test_oneshot_registrations(void **state)
{
    (void)state;
    int fired = tcp_socket(), armed = tcp_socket(), epfd = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLOUT | EPOLLONESHOT, .data.u64 = 1};
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_ADD, fired, &event), 0);
    assert_int_equal(epoll_events(epfd, &event, 0), 1);  /* never connected: HUP */
    event = (struct epoll_event){.events = EPOLLOUT | EPOLLONESHOT, .data.u64 = 2};
    assert_int_equal(bh_waiting_hide(armed), 0);
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_ADD, armed, &event), 0);
    assert_int_equal(bh_waiting_hide(fired), 0);
    assert_int_equal(epoll_events(epfd, &event, 50), 0);
    connect_now(fired);
    connect_now(armed);
    bh_waiting_show(fired, 0);
    bh_waiting_show(armed, 0);
    assert_int_equal(epoll_events(epfd, &event, 1000), 1);
    assert_int_equal(event.data.u64, 2);
    assert_int_equal(epoll_events(epfd, &event, 50), 0);
    event = (struct epoll_event){.events = EPOLLOUT | EPOLLONESHOT, .data.u64 = 1};
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_MOD, fired, &event), 0);
    assert_int_equal(epoll_events(epfd, &event, 1000), 1);
    assert_int_equal(event.data.u64, 1);
    close(fired);
    close(armed);
    close(epfd);
}

/* Registered while a thread already sleeps in epoll_wait on the set. */
static void test_registration_during_the_wait(void **state)
{
    (void)state;
    int fd = tcp_socket(), epfd = epoll_create1(0);
    assert_int_equal(bh_waiting_hide(fd), 0);
    struct sleeper sleeper = {.call = EPOLL_WAIT, .fd = fd, .epfd = epfd,
                              .timeout_ms = 10000};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, sleeping, &sleeper), 0);
    struct timespec moment = {0, 100 * 1000000};
    nanosleep(&moment, NULL);
    struct epoll_event event = {.events = EPOLLOUT | EPOLLET, .data.u64 = 5};
    assert_int_equal(bh_epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event), 0);
    nanosleep(&moment, NULL);
    bh_waiting_show(fd, ECONNREFUSED);
    pthread_join(thread, NULL);
    assert_int_equal(sleeper.found, 1);
    /* The refusal as the kernel reports one: with EPOLLERR. */
    assert_int_equal(sleeper.events & (EPOLLOUT | EPOLLERR | EPOLLHUP),
                     EPOLLOUT | EPOLLERR | EPOLLHUP);
    assert_true(sleeper.slept_ms < 5000);
    close(fd);
    close(epfd);
}

/* An epoll fd closed while the fd waited: skipped at the show. */
static void test_an_epoll_set_closed_meanwhile(void **state)
{
    (void)state;
    int fd = tcp_socket(), gone = epoll_create1(0), kept = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLOUT, .data.u64 = 9};
    assert_int_equal(bh_epoll_ctl(gone, EPOLL_CTL_ADD, fd, &event), 0);
    assert_int_equal(bh_epoll_ctl(kept, EPOLL_CTL_ADD, fd, &event), 0);
    assert_int_equal(bh_waiting_hide(fd), 0);
    close(gone);
    assert_int_equal(epoll_events(kept, &event, 0), 0);
    connect_now(fd);
    bh_waiting_show(fd, 0);
    assert_int_equal(epoll_events(kept, &event, 1000), 1);
    assert_int_equal(event.data.u64, 9);
    close(fd);
    close(kept);
}

/* No room: an fd in more epoll sets than a slot holds, or one fd more
 * than the table holds, is not hidden at all (the engine refuses it). */
static void test_no_room_hides_nothing(void **state)
{
    (void)state;
    enum { SETS = 9, SLOTS = 512 };
    int fd = tcp_socket(), sets[SETS];
    struct epoll_event event = {.events = EPOLLOUT};
    for (int i = 0; i < SETS; i++) {
        sets[i] = epoll_create1(0);
        assert_int_equal(bh_epoll_ctl(sets[i], EPOLL_CTL_ADD, fd, &event), 0);
    }
    assert_int_equal(bh_waiting_hide(fd), -1);
    assert_int_equal(errno, ENOSPC);
    assert_int_equal(bh_waiting_active, 0);
    for (int i = 0; i < SETS; i++) {
        assert_int_equal(epoll_events(sets[i], &event, 0), 1);
        close(sets[i]);
    }
    close(fd);

    static int fds[SLOTS + 1];
    for (int i = 0; i < SLOTS; i++) {
        fds[i] = tcp_socket();
        assert_int_equal(bh_waiting_hide(fds[i]), 0);
    }
    fds[SLOTS] = tcp_socket();
    assert_int_equal(bh_waiting_hide(fds[SLOTS]), -1);
    assert_int_equal(errno, ENOSPC);
    assert_int_equal(poll_one(fds[SLOTS], 0), POLLOUT | POLLHUP);
    for (int i = 0; i <= SLOTS; i++)
        close(fds[i]);
}

/* After fork the child's table is empty (reset), the parent's intact. */
static void test_the_child_after_reset(void **state)
{
    (void)state;
    int fd = tcp_socket();
    assert_int_equal(bh_waiting_hide(fd), 0);
    assert_int_equal(poll_one(fd, 0), 0);  /* a waker made, inherited */
    pid_t child = fork();
    if (child == 0) {
        bh_waiting_reset();
        struct pollfd entry = {.fd = fd, .events = POLLOUT};
        _exit(bh_waiting_active == 0 && poll(&entry, 1, 0) == 1 ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(poll_one(fd, 0), 0);
    close(fd);
}

/* The lowest-numbered eventfd of the process: the layer's waker here. */
static int first_eventfd(void)
{
    char path[64], target[64];
    for (int fd = 0; fd < 1024; fd++) {
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t length = readlink(path, target, sizeof target - 1);
        if (length > 0 && (target[length] = '\0', strcmp(target, "anon_inode:[eventfd]") == 0))
            return fd;
    }
    return -1;
}

/* The program closes the layer's eventfd and gets its number for an
 * eventfd of its own: that one is never read nor written, and a show
 * still wakes a poll. */
static void test_a_waker_the_program_closed(void **state)
{
    (void)state;
    int fd = tcp_socket();
    assert_int_equal(bh_waiting_hide(fd), 0);
    assert_int_equal(poll_one(fd, 0), 0);
    int waker = first_eventfd();
    assert_true(waker >= 0);
    close(waker);
    int mine = eventfd(5, EFD_NONBLOCK);
    assert_int_equal(mine, waker);
    struct sleeper sleeper = {.call = POLL, .fd = fd, .timeout_ms = 10000};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, sleeping, &sleeper), 0);
    struct timespec moment = {0, 100 * 1000000};
    nanosleep(&moment, NULL);
    connect_now(fd);
    bh_waiting_show(fd, 0);
    pthread_join(thread, NULL);
    assert_int_equal(sleeper.found, 1);
    assert_true(sleeper.slept_ms < 5000);
    uint64_t count = 0;
    assert_int_equal(read(mine, &count, sizeof count), sizeof count);
    assert_int_equal(count, 5);
    close(mine);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_only_waiting_fds_are_hidden, set_up,
                                        tear_down),
        cmocka_unit_test_setup_teardown(test_poll_hides_and_keeps_the_timeout, set_up,
                                        tear_down),
        cmocka_unit_test_setup_teardown(test_ppoll_hides_and_keeps_the_timeout, set_up,
                                        tear_down),
        cmocka_unit_test_setup_teardown(test_a_long_poll_array, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_a_refusal_is_reported_until_read, set_up,
                                        tear_down),
        cmocka_unit_test_setup_teardown(test_forget_and_reset_empty_the_table, set_up,
                                        tear_down),
        cmocka_unit_test_setup_teardown(test_poll_wakes, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_ppoll_wakes, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_select_wakes, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_pselect_wakes, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_epoll_wait_wakes, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_epoll_pwait_wakes, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_epoll_pwait2_wakes, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_every_thread_wakes_and_timeouts_hold, set_up,
                                        tear_down),
        cmocka_unit_test_setup_teardown(test_no_wake_lost_in_a_burst, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_select_hides_and_reports_a_refusal, set_up,
                                        tear_down),
        cmocka_unit_test_setup_teardown(
            test_epoll_ctl_while_hidden_is_answered_as_the_kernel_would, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_one_fd_in_two_epoll_sets, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_oneshot_registrations, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_registration_during_the_wait, set_up,
                                        tear_down),
        cmocka_unit_test_setup_teardown(test_an_epoll_set_closed_meanwhile, set_up,
                                        tear_down),
        cmocka_unit_test_setup_teardown(test_no_room_hides_nothing, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_the_child_after_reset, set_up, tear_down),
        cmocka_unit_test_setup_teardown(test_a_waker_the_program_closed, set_up,
                                        tear_down),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
