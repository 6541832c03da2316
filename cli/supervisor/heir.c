/* run's heir: answers the tree's trapped calls once the supervisor is dead.
 *
 * With every copy of the listener closed, the kernel fails each trapped
 * call with ENOSYS: connects with an error nobody understands, and closes,
 * which then leave the fd open. So before the tree starts, run starts an
 * heir: a process forked twice (nobody's child in the tree, which run
 * reaps as its subreaper) in a session of its own (the terminal's signals
 * and a kill of run's process group miss it). It gets a copy of the
 * listener and then only waits on a socket to the supervisor. run's
 * normal end says "done" there, and the heir exits; the socket's end
 * without it is the supervisor's death (SIGKILL, the OOM killer), and the
 * heir takes over, single-threaded, nothing that waits:
 *   - a connect a rule matches, of a stream socket, fails with its
 *     compartment's errno (on_failure = closed; open: it goes through
 *     uncounted), and a program it may not read is as unreadable.c says;
 *   - everything else goes through (other connects, closes), but a
 *     MSG_FASTOPEN send to a matched destination, which fails with
 *     EOPNOTSUPP as under the supervisor (fastopen.c);
 *   - the first call it answers is told in one line on run's stderr;
 *   - the calls the supervisor had received and not answered are answered
 *     first, the same way (the pending table, below).
 * The tree's open connections keep their permits: the supervisor parked
 * them in socket records (sockets.c), settled by the kernel's word when
 * their sockets are gone. The heir asks it every second, and once the
 * tree is gone (the listener hangs up: no process uses the filter) until
 * none of the supervisor's records is left (a second at most), and exits.
 *
 * Why not supervise on: the supervisor's state (its counted sockets,
 * per_process counts, watched outcomes, waiting workers) died with it,
 * and an heir that admits and waits could die the same way. Refusing is
 * what on_failure = closed does whenever the cap cannot be kept, and the
 * line says why.
 *
 * The pending table: PENDING_SLOTS slots, each a busy word and one
 * notification, in an anonymous shared mapping made before the fork. The
 * supervisor's main thread takes the lowest free slot (busy = 1) and
 * receives into it; the thread that answers the call frees it (busy = 0,
 * release). The heir reads it only once the supervisor is dead, when
 * nothing writes it any more. A slot still busy whose call was answered
 * (killed between the answer and the free) is answered again and the
 * kernel refuses it (ENOENT): ids are never reused. With every slot busy
 * a call is received into private memory, and a supervisor killed then
 * leaves it unanswered: its thread waits until a signal ends the wait. */
#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "supervisor/supervisor.h"

enum {
    PENDING_SLOTS = 4096,
    REAP_EVERY_MS = 1000,     /* the heir's look at parked sockets */
    SETTLE_MS = 1000,         /* its last looks, once the tree is gone */
    HEIR_EXIT_WAIT_MS = 1000, /* run's wait for the heir after "done" */
};

static const char DONE = 'd';

struct slot {
    _Atomic uint32_t busy;
    uint32_t unused;
    /* the notification follows, notification_size bytes */
};

static char *table;
static size_t stride;

size_t sv_notif_size(void)
{
    struct seccomp_notif_sizes sizes = { 0 };
    syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes);
    return sizes.seccomp_notif > sizeof(struct seccomp_notif)
               ? sizes.seccomp_notif : sizeof(struct seccomp_notif);
}

static struct slot *slot_at(int i)
{
    return (struct slot *)(table + (size_t)i * stride);
}

struct seccomp_notif *sv_pending_take(void)
{
    for (int i = 0; table && i < PENDING_SLOTS; i++) {
        struct slot *slot = slot_at(i);
        if (!atomic_load_explicit(&slot->busy, memory_order_acquire)) {
            atomic_store(&slot->busy, 1);
            return (struct seccomp_notif *)(slot + 1);
        }
    }
    return NULL;
}

void sv_pending_done(const struct seccomp_notif *notif)
{
    const char *at = (const char *)notif;
    if (!table || at < table || at >= table + PENDING_SLOTS * stride)
        return;  /* received into private memory */
    struct slot *slot = (struct slot *)at - 1;
    atomic_store_explicit(&slot->busy, 0, memory_order_release);
}

/* ---- the heir's side ---- */

struct heir {
    struct sv_state *state;
    pid_t supervisor;
    int told;
};

/* The errno a trapped connect now fails with; 0: it goes through. */
static int orphan_refusal(struct sv_state *state, const struct seccomp_notif *notif)
{
    struct sockaddr_storage to;
    uint64_t args[6];
    if (sv_call_args(notif, args) < 0)  /* a 32-bit socketcall's, in memory */
        return errno == EPERM ? sv_unreadable(state, (pid_t)notif->pid) : 0;
    socklen_t length = (socklen_t)args[2];
    if (length < sizeof(struct sockaddr_in) || length > sizeof to)
        return 0;  /* no TCP connect (EINVAL, or AF_UNSPEC's disconnect) */
    if (sv_read_memory((pid_t)notif->pid, args[1], &to, length) < 0)
        return errno == EPERM ? sv_unreadable(state, (pid_t)notif->pid) : 0;
    int rule = to.ss_family == AF_INET || to.ss_family == AF_INET6
                   ? bh_rule_index_match(state->rules, (struct sockaddr *)&to, length) : -1;
    if (rule < 0 || state->config.on_failure_open)
        return 0;
    pid_t pid;
    int sock = sv_copy_fd((pid_t)notif->pid, (int)args[0], &pid);
    if (sock < 0)
        return errno == EPERM ? sv_unreadable(state, (pid_t)notif->pid) : 0;
    int stream = sv_is_stream(sock);
    close(sock);
    const struct bh_compartment *compartments = state->config.compartments;
    return stream ? compartments[state->config.rules[rule].compartment].refusal_errno : 0;
}

static void tell_once(struct heir *heir)
{
    if (heir->told++)
        return;
    cli_error("run: the seccomp supervisor (pid %d) died; its tree lives on: from now on "
              "its connects the rules match %s; its open connections keep their permits "
              "until they close", (int)heir->supervisor,
              heir->state->config.on_failure_open
                  ? "go through uncounted (on_failure = open)"
                  : "fail with their compartment's errno (on_failure = closed)");
}

static void answer(struct heir *heir, const struct seccomp_notif *notif)
{
    struct sv_state *state = heir->state;
    if (!sv_still_valid(state->listener, notif->id))
        return;  /* answered, or its caller is gone */
    tell_once(heir);
    enum sv_call call = sv_filter_call(&notif->data);  /* whatever its ABI */
    if (call == SV_CALL_CLOSE) {
        sv_continue(state->listener, notif->id);
    } else if (call == SV_CALL_CONNECT) {
        int err = orphan_refusal(state, notif);
        if (err)
            sv_fail(state->listener, notif->id, err);
        else
            sv_continue(state->listener, notif->id);
    } else {
        sv_fastopen_trapped(state, notif);
    }
}

static int64_t now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* The tree gone: what its exit closed goes back. The listener may hang
 * up before the last process's files are closed, so the heir looks until
 * none of the supervisor's records is left, SETTLE_MS at most (a socket
 * passed out of the tree keeps its record: any reaper settles it later). */
static void settle(struct heir *heir)
{
    struct bh_namespace *ns = &heir->state->ns;
    int64_t until = now_ms() + SETTLE_MS;
    bh_socket_reap_surely(ns, -1);
    while (bh_socket_made_by(ns, (int32_t)heir->supervisor) > 0 && now_ms() < until) {
        struct timespec pause = { 0, 10 * 1000000L };
        nanosleep(&pause, NULL);
        bh_socket_reap_surely(ns, -1);
    }
}

/* Until no process uses the filter any more. */
static void take_over(struct heir *heir, int listener)
{
    struct sv_state *state = heir->state;
    state->listener = listener;
    for (int i = 0; i < PENDING_SLOTS; i++)
        if (atomic_load(&slot_at(i)->busy))
            answer(heir, (struct seccomp_notif *)(slot_at(i) + 1));
    size_t size = sv_notif_size();
    struct seccomp_notif *notif = malloc(size);
    int64_t reaped_at = 0;
    for (;;) {
        sv_names_refresh(state, SV_NAMES_EVERY_MS);
        if (now_ms() - reaped_at >= REAP_EVERY_MS) {
            bh_socket_reap(&state->ns, -1);
            reaped_at = now_ms();
        }
        struct pollfd watched = { listener, POLLIN, 0 };
        if (poll(&watched, 1, REAP_EVERY_MS) < 0 && errno != EINTR)
            break;
        if (notif && (watched.revents & POLLIN)) {
            memset(notif, 0, size);
            if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, notif) == 0)
                answer(heir, notif);
        } else if (watched.revents & (POLLHUP | POLLERR | POLLNVAL)) {
            break;
        }
    }
    free(notif);
    settle(heir);
}

/* Out of the tree's way: its own session, only stderr of run's files. */
static void settle_in(int channel)
{
    setsid();
    prctl(PR_SET_NAME, "bulkhead heir");
    signal(SIGPIPE, SIG_IGN);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, STDIN_FILENO);
        dup2(null, STDOUT_FILENO);
    }
    if (channel > 3)
        syscall(SYS_close_range, 3, channel - 1, 0);
    syscall(SYS_close_range, channel + 1, ~0U, 0);
}

static void heir_main(struct sv_state *state, int channel, pid_t supervisor)
{
    settle_in(channel);
    int listener = sv_receive_fd(channel);
    if (listener < 0)
        return;  /* no filter: nothing to take over */
    char word;
    ssize_t got;
    while ((got = read(channel, &word, 1)) < 0 && errno == EINTR)
        ;
    if (got == 1 && word == DONE)
        return;
    struct heir heir = { state, supervisor, 0 };
    take_over(&heir, listener);
}

int sv_heir_start(struct sv_state *state)
{
    int ends[2];
    stride = (sizeof(struct slot) + sv_notif_size() + 7) & ~(size_t)7;
    table = mmap(NULL, PENDING_SLOTS * stride, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (table == MAP_FAILED)
        table = NULL;
    pid_t supervisor = getpid(), middle = -1;
    if (!table || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) < 0 ||
        (middle = fork()) < 0) {
        cli_error("run: seccomp supervisor: no heir (%s): if run dies, its tree's "
                  "connects fail with ENOSYS", strerror(errno));
        return -1;
    }
    if (middle == 0) {
        close(ends[0]);
        if (fork() == 0)
            heir_main(state, ends[1], supervisor);
        _exit(0);
    }
    close(ends[1]);
    waitpid(middle, NULL, 0);
    return ends[0];
}

void sv_heir_hand(int channel, int listener)
{
    if (channel >= 0 && listener >= 0)
        sv_send_fd(channel, listener, 0);
}

void sv_heir_release(int channel)
{
    if (channel < 0)
        return;
    (void)!write(channel, &DONE, 1);
    struct pollfd gone = { channel, POLLIN, 0 };  /* its end closes as it exits */
    char byte;
    int64_t until = now_ms() + HEIR_EXIT_WAIT_MS;
    while (now_ms() < until && poll(&gone, 1, (int)(until - now_ms())) > 0 &&
           read(channel, &byte, 1) > 0)
        ;
    close(channel);
}
