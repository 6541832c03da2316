/* `bulkhead run` as the supervisor of its tree.
 *
 * run forks: the child installs the filter (filter.c), hands the listener
 * to the parent over a socketpair (SCM_RIGHTS) and execs the command; the
 * parent stays, answers the filter's notifications, forwards the signals
 * it is sent to the child, and exits with the child's status once the
 * whole tree is gone (it is the tree's subreaper: a daemon the command
 * leaves behind still has its connects answered, since with the listener
 * closed they would fail with ENOSYS).
 *
 * Counted sockets are checked with the kernel (sockets.c) a few ms after
 * a trapped close while any is counted, after the exit of any process
 * with counted sockets (its pidfd) and of its own children and orphans
 * (SIGCHLD), every second as a backstop, and when a compartment is full.
 * Sockets still connecting are looked at on their own schedule
 * (outcomes.c), and at a trapped close of their fd; connects in progress
 * every 20 ms, for notifications that died while they wait (connects.c).
 * Their permits are parked in socket records once their connects began
 * (sockets.c): if this process is killed, the tree keeps them until its
 * sockets are gone, and the heir it started before the tree (heir.c)
 * answers the tree's trapped calls from then on. */
#include <errno.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "log/log.h"
#include "libc/libc.h"
#include "supervisor/supervisor.h"

/* Linux 6.6: the program woken by an answer runs on the supervisor's CPU
 * (and the supervisor on the program's), instead of each waiting to be
 * scheduled elsewhere; ten times faster a round trip on a loaded machine.
 * Older kernels refuse it, and nothing else changes. */
#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif

enum {
    SCAN_SOON_MS = 2,        /* after a close or an exit: the first look */
    SCAN_BACKSTOP_MS = 1000, /* while any socket is counted */
};

static const int forwarded[] = { SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
                                 SIGWINCH, SIGALRM };

static void ignore_error(void *ctx, const char *message)
{
    (void)ctx;
    (void)message;  /* run checked the file a moment ago and said its errors */
}

static void register_compartments(struct sv_state *state)
{
    static int starts[BH_MAX_COMPARTMENTS], indexes[BH_MAX_COMPARTMENTS],
               live[BH_MAX_COMPARTMENTS];
    int count = state->config.compartment_count;
    for (int i = 0; i < count; i++)
        starts[i] = bh_starting_limit(&state->config.compartments[i]);
    if (bh_compartments_register(&state->ns, state->config.compartments, starts, count,
                                 indexes, live) < 0)
        for (int i = 0; i < count; i++)
            indexes[i] = -1;
    for (int i = 0; i < count; i++)
        state->shared_index[i] = indexes[i] >= 0 ? indexes[i] : -1;
}

/* The namespace is out of reach: on_failure decides, as in the shim
 * (shim.c): open runs unlimited (no supervisor), closed refuses whatever
 * the rules match. */
static int unreachable(struct sv_state *state, const char *err)
{
    int open = state->config.on_failure_open;
    cli_error("run: seccomp supervisor: %s; %s", err,
              open ? "running without limits (on_failure = open)"
                   : "refusing every connection the rules match (on_failure = closed)");
    for (int i = 0; i < state->config.compartment_count; i++)
        state->shared_index[i] = BH_SHARED_UNREACHABLE;
    return open ? -1 : 0;
}

/* The rules, their index and the namespace, as the shim would have them. */
static int prepare(struct sv_state *state, const char *rules)
{
    char err[512];
    if (bh_config_load(rules, &state->config, ignore_error, NULL) != 0)
        return -1;
    enum bh_log_level level = state->config.log_level;
    const char *override = getenv("BULKHEAD_LOG");
    if (override)
        bh_log_level_parse(override, &level);
    bh_log_remember_stderr();
    bh_log_configure(level, state->config.log_file, state->config.syslog_socket);
    state->rules = bh_rule_index_build(&state->config);
    if (!state->rules) {
        cli_error("run: seccomp supervisor: out of memory");
        return -1;
    }
    if (bh_namespace_open(state->config.namespace_name, 1, &state->ns, err,
                          sizeof err) == 0)
        register_compartments(state);
    else if (unreachable(state, err) < 0)
        return -1;
    if (state->config.observe)
        state->destinations = bh_destinations_open(geteuid(), state->config.namespace_name, 1);
    state->admitter = (struct bh_admitter) { &state->config, &state->ns, state->shared_index,
                                             NULL };
    for (int i = 0; i < state->config.rule_count; i++)
        state->names += state->config.rules[i].kind == BH_RULE_HOSTNAME;
    return 0;
}

/* ---- the child's side ---- */

static void child(int channel, char **argv, const sigset_t *mask)
{
    int listener = sv_filter_install();
    sv_send_fd(channel, listener, listener < 0 ? errno : 0);
    if (listener >= 0) {
        close(listener);
        setenv(BH_SUPERVISED_VARIABLE, "1", 1);  /* the shim marks its calls */
    }
    close(channel);
    sigprocmask(SIG_SETMASK, mask, NULL);
    execvp(argv[0], argv);
    cli_error("run: %s: %s", argv[0], strerror(errno));
    _exit(CLI_CANNOT_EXEC);
}

/* ---- the parent's loop ---- */

struct tree {
    pid_t child;
    int status;         /* the child's, once it exited */
    int child_done;
    int signals;        /* signalfd */
    int64_t scan_at;    /* CLOCK_MONOTONIC ms; 0: none due */
    int scans_soon;     /* looks left after the last event */
};

static int64_t now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* A close or an exit: look at 2, 20 and 200 ms (a trapped close is
 * answered before the kernel closes). */
static void scan_soon(struct tree *tree)
{
    tree->scans_soon = 3;
    tree->scan_at = now_ms() + SCAN_SOON_MS;
}

static void reap(struct tree *tree)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == tree->child) {
            tree->status = status;
            tree->child_done = 1;
        }
        scan_soon(tree);
    }
}

/* 1 once the child exited and the tree has no process left. */
static int tree_gone(const struct tree *tree)
{
    siginfo_t info;
    return tree->child_done &&
           waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD;
}

static void take_signals(struct tree *tree)
{
    struct signalfd_siginfo info;
    while (read(tree->signals, &info, sizeof info) == (ssize_t)sizeof info) {
        if (info.ssi_signo == SIGCHLD)
            reap(tree);
        else if (info.ssi_code != SI_KERNEL && !tree->child_done)
            kill(tree->child, (int)info.ssi_signo);  /* the terminal's reach it anyway */
    }
}

/* Received into the pending table (heir.c) when it has room, so that the
 * heir answers it should we die before we do; spare otherwise. */
static void take_notification(struct sv_state *state, struct tree *tree,
                              struct seccomp_notif *spare, size_t size)
{
    struct seccomp_notif *notif = sv_pending_take();
    if (!notif)
        notif = spare;
    memset(notif, 0, size);
    if (ioctl(state->listener, SECCOMP_IOCTL_NOTIF_RECV, notif) < 0) {
        sv_pending_done(notif);
        return;  /* its caller is gone already */
    }
    enum sv_call call = sv_filter_call(&notif->data);
    if (call == SV_CALL_CONNECT) {
        if (!sv_connect_trapped(state, notif))
            sv_pending_done(notif);  /* else a worker's, once it answered */
        return;
    }
    if (call == SV_CALL_SEND) {  /* with MSG_FASTOPEN, or a 32-bit socketcall's */
        sv_fastopen_trapped(state, notif);
        sv_pending_done(notif);
        return;
    }
    sv_outcome_closing(state, (int)notif->data.args[0]);  /* before the fd goes */
    sv_continue(state->listener, notif->id);
    sv_pending_done(notif);
    if (sv_sockets_live() > 0)  /* a close: maybe of a counted socket */
        scan_soon(tree);
}

static void scan_if_due(struct sv_state *state, struct tree *tree)
{
    if (atomic_exchange(&state->rescan, 0))
        scan_soon(tree);
    int64_t now = now_ms();
    if (!tree->scan_at || now < tree->scan_at)
        return;
    int left = sv_sockets_scan(state, NULL);
    if (tree->scans_soon > 0 && --tree->scans_soon > 0)
        tree->scan_at = now + SCAN_SOON_MS * (tree->scans_soon == 2 ? 10 : 100);
    else
        tree->scan_at = left != 0 ? now + SCAN_BACKSTOP_MS : 0;
}

static int poll_timeout(const struct tree *tree, int names_ms)
{
    int timeout = names_ms, outcomes_ms = sv_outcomes_due_ms();
    int connects_ms = sv_connects_due_ms();
    if (outcomes_ms >= 0 && (timeout < 0 || outcomes_ms < timeout))
        timeout = outcomes_ms;
    if (connects_ms >= 0 && (timeout < 0 || connects_ms < timeout))
        timeout = connects_ms;
    if (tree->scan_at) {
        int64_t wait = tree->scan_at - now_ms();
        int scan_ms = wait < 0 ? 0 : (int)wait;
        timeout = timeout < 0 || scan_ms < timeout ? scan_ms : timeout;
    }
    return timeout;
}

/* poll() on the signals, the listener and the exits of every process with
 * counted sockets (their pidfds: an exit anywhere in the tree, not only
 * of our children); an exit means a look at the sockets soon. */
static int wait_for_events(struct pollfd *watched, int count, struct tree *tree,
                           int timeout_ms)
{
    struct pollfd *exits;
    int watching = sv_processes_watch(&exits);
    struct pollfd *all = malloc((size_t)(count + watching) * sizeof *all);
    if (!all) {
        free(exits);
        return poll(watched, (nfds_t)count, timeout_ms) < 0 && errno != EINTR ? -1 : 0;
    }
    memcpy(all, watched, (size_t)count * sizeof *all);
    if (watching)
        memcpy(all + count, exits, (size_t)watching * sizeof *all);
    int rc = poll(all, (nfds_t)(count + watching), timeout_ms);
    memcpy(watched, all, (size_t)count * sizeof *all);
    if (rc > 0 && sv_processes_exited(all + count, watching) > 0)
        scan_soon(tree);
    free(all);
    free(exits);
    return rc < 0 && errno != EINTR ? -1 : 0;
}

static void supervise(struct sv_state *state, struct tree *tree)
{
    size_t size = sv_notif_size();
    struct seccomp_notif *notif = malloc(size);
    while (notif && !tree_gone(tree)) {
        struct pollfd watched[3] = { { tree->signals, POLLIN, 0 },
                                     { state->wake, POLLIN, 0 },
                                     { state->listener, POLLIN, 0 } };
        int names_ms = sv_names_refresh(state, SV_NAMES_EVERY_MS);
        if (sv_sockets_live() > 0 && !tree->scan_at)
            tree->scan_at = now_ms() + SCAN_BACKSTOP_MS;
        if (wait_for_events(watched, state->listener >= 0 ? 3 : 2, tree,
                            poll_timeout(tree, names_ms)) < 0)
            break;
        if (watched[0].revents)
            take_signals(tree);
        uint64_t woken;
        if (watched[1].revents)
            (void)!read(state->wake, &woken, sizeof woken);
        if (watched[2].revents & POLLIN)
            take_notification(state, tree, notif, size);
        scan_if_due(state, tree);
        sv_outcomes_poll(state);
        sv_connects_look(state);
    }
    free(notif);
}

/* The child's status as ours: its code, or its death by the same signal. */
static int exit_like(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    int signal_number = WTERMSIG(status);
    signal(signal_number, SIG_DFL);
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, signal_number);
    sigprocmask(SIG_UNBLOCK, &unblock, NULL);
    raise(signal_number);
    return 128 + signal_number;
}

static int block_signals(sigset_t *old)
{
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGCHLD);
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        sigaddset(&blocked, forwarded[i]);
    sigprocmask(SIG_BLOCK, &blocked, old);
    return signalfd(-1, &blocked, SFD_CLOEXEC | SFD_NONBLOCK);
}

int sv_run(const char *rules, char **argv, const char *why)
{
    static struct sv_state state;
    sigset_t old;
    int channel[2];
    if (!sv_filter_supported() || prepare(&state, rules) < 0)
        return -1;
    int heir = sv_heir_start(&state);  /* before the subreaper, the signals, the tree */
    struct tree tree = { .signals = block_signals(&old) };
    state.pid = getpid();
    state.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (tree.signals < 0 || state.wake < 0 || prctl(PR_SET_CHILD_SUBREAPER, 1) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, channel) < 0 ||
        (tree.child = fork()) < 0) {
        cli_error("run: seccomp supervisor: %s", strerror(errno));
        sigprocmask(SIG_SETMASK, &old, NULL);
        sv_heir_release(heir);
        return -1;
    }
    if (tree.child == 0)
        child(channel[1], argv, &old);
    close(channel[1]);
    state.listener = sv_receive_fd(channel[0]);
    int refused = errno;
    sv_heir_hand(heir, state.listener);
    if (state.listener < 0 && why[0])  /* busy: a filter of the tree has a listener */
        cli_error("run: the kernel refused the seccomp filter (%s): %s; %s",
                  strerror(refused), why, refused == EBUSY && getenv(BH_SUPERVISED_VARIABLE)
                      ? "an outer bulkhead run's supervisor caps it, by its rules"
                      : "its connections will not be limited");
    else if (state.listener >= 0 && why[0]) {
        cli_error("run: %s: capped through seccomp", why);
        sv_names_say(&state, argv[0]);
    }
    if (state.listener >= 0)
        ioctl(state.listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP);
    close(channel[0]);
    supervise(&state, &tree);
    sv_sockets_scan(&state, NULL);  /* parked ones outlive us: give back what is gone */
    sv_heir_release(heir);
    return exit_like(tree.status);
}
