/* Start-up: find and load the rules, join the namespace, adopt what the
 * previous program image handed over at exec.
 *
 * Runs once per process image, from the constructor or from the first hook
 * that needs it, whichever comes first (pthread_once). A thread-local flag
 * lets hooks called from inside start-up pass straight through instead of
 * waiting on themselves. Anything that goes wrong turns the shim off for
 * this process: the program runs unlimited, never dies of us (except under
 * BULKHEAD_STRICT=1 with bad rules, which is what strict asks for). */
#include "core/shim.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "adaptive/adaptive.h"
#include "core/async_connect.h"
#include "core/copies.h"
#include "core/handoff.h"
#include "core/joined.h"
#include "core/observe.h"
#include "core/outcome.h"
#include "core/stall.h"
#include "fdtable/fd_table.h"
#include "log/log.h"
#include "libc/libc.h"
#include "policy/who.h"

enum { EXIT_CONFIG = 78 };  /* EX_CONFIG from sysexits.h */

static pthread_once_t start_once = PTHREAD_ONCE_INIT;
static __thread int starting_here;

/* Bad rules are one line (once per process tree, see log.h): the
 * first error by line, as `bulkhead check` lists them first, and how many
 * more it will list. Some errors are found only when their section ends,
 * so they do not arrive in line order. */
struct config_errors {
    const char *path;
    char first[512];
    long first_line;   /* 0: an error about the whole file */
    int count;
};

/* "PATH:LINE: ..." gives LINE; "PATH: ..." is about the whole file. */
static long error_line(const struct config_errors *errors, const char *message)
{
    size_t length = strlen(errors->path);
    if (strncmp(message, errors->path, length) != 0 || message[length] != ':')
        return 0;
    return strtol(message + length + 1, NULL, 10);
}

static void keep_config_error(void *ctx, const char *message)
{
    struct config_errors *errors = ctx;
    long line = error_line(errors, message);
    if (errors->count++ == 0 || line < errors->first_line) {
        snprintf(errors->first, sizeof errors->first, "%s", message);
        errors->first_line = line;
    }
}

static void report_config_errors(const struct config_errors *errors, const char *path)
{
    if (errors->count == 1)
        bh_log_startup_problem("%s", errors->first);
    else
        bh_log_startup_problem("%s (and %d more: bulkhead check %s)", errors->first,
                               errors->count - 1, path);
}

static int strict_mode(void)
{
    const char *strict = getenv("BULKHEAD_STRICT");
    return strict && strcmp(strict, "1") == 0;
}

static void configure_log(void)
{
    enum bh_log_level level = bh_shim.config.log_level;
    const char *override = getenv("BULKHEAD_LOG");
    if (override && bh_log_level_parse(override, &level) < 0)
        bh_log_startup_problem("BULKHEAD_LOG: \"%s\" is not one of error, warn, "
                               "info, debug", override);
    bh_log_configure(level, bh_shim.config.log_file, bh_shim.config.syslog_socket);
}

static int load_rules(void)
{
    char path[4096];
    if (bh_config_locate(path, sizeof path) < 0)
        return -1;  /* no rules anywhere: do nothing, quietly */
    bh_config_hand_down(path);
    struct config_errors errors = { .path = path, .count = 0 };
    if (bh_config_load(path, &bh_shim.config, keep_config_error, &errors)) {
        report_config_errors(&errors, path);  /* before the log is set up: stderr */
        if (strict_mode())
            libc__exit(EXIT_CONFIG);
        return -1;  /* the errors said what; the program runs unlimited */
    }
    configure_log();
    for (int i = 0; i < bh_shim.config.compartment_count; i++)
        bh_shim.watch[i] = bh_outcome_watch(&bh_shim.config.compartments[i], 0);
    bh_shim.rules = bh_rule_index_build(&bh_shim.config);
    if (!bh_shim.rules) {
        bh_log_startup_problem("out of memory indexing %s; running without limits",
                               path);
        return -1;
    }
    return 0;
}

/* What differs between the namespace's live state and these rules, one
 * "[name] live (file)" entry after another, said once per process tree at
 * the end of registration. */
struct live_differences {
    char limits[512], modes[512];
};

static void append_entry(char *list, size_t size, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static void append_entry(char *list, size_t size, const char *format, ...)
{
    size_t used = strlen(list);
    if (used + 4 >= size)
        return;
    if (used)
        used += (size_t)snprintf(list + used, size - used, ", ");
    va_list args;
    va_start(args, format);
    vsnprintf(list + used, size - used, format, args);
    va_end(args);
}

/* Who left the live limit where it is: set and apply record their change
 * as the controller's last (bh_adaptive_moved); a limit nobody changed is
 * the one the first program's rules registered. */
static const char *live_limit_origin(struct bh_namespace *ns, int shared)
{
    struct bh_adaptive_view adaptive;
    bh_adaptive_read(ns, shared, &adaptive);
    if (adaptive.last_reason == BH_ADAPTIVE_SET)
        return "set by bulkhead set or apply";
    if (adaptive.last_reason != BH_ADAPTIVE_NONE)
        return "left there by its adaptive controller";
    return "registered by the rules of a program that started earlier";
}

/* The live limit and controller win over the rules: a limit set by
 * bulkhead set or apply, or by the rules of a program started earlier in
 * the namespace, stays until the namespace is reset. */
static void note_live(struct bh_namespace *ns, const struct bh_compartment *compartment,
                      int shared, int live_limit, struct live_differences *differ)
{
    enum bh_adaptive_mode live = (enum bh_adaptive_mode)atomic_load(
        &bh_adaptive_fields(ns, shared)->mode);
    if (live_limit != bh_starting_limit(compartment) && compartment->fleet_limit == 0 &&
        !bh_adaptive_on(ns, shared))
        append_entry(differ->limits, sizeof differ->limits, "[%s] %d (file: %d; %s)",
                     compartment->name, live_limit, compartment->limit,
                     live_limit_origin(ns, shared));
    if (live != compartment->adaptive)
        append_entry(differ->modes, sizeof differ->modes, "[%s] %s (file: %s)",
                     compartment->name, bh_adaptive_mode_name(live),
                     bh_adaptive_mode_name(compartment->adaptive));
}

static void say_live_differences(const struct live_differences *differ)
{
    static const char why[] = "set by bulkhead set or apply, or by the rules of "
                              "a program that started earlier";
    if (differ->limits[0])
        bh_log_once_per_tree("BULKHEAD_LIVE_SAID", BH_LOG_WARN, "using the namespace's "
                             "live limits, %s, not %s's; bulkhead apply %s "
                             "takes the file's", differ->limits, bh_shim.config.path,
                             bh_shim.config.path);
    if (differ->modes[0])
        bh_log_once_per_tree("BULKHEAD_LIVE_ADAPTIVE_SAID", BH_LOG_WARN, "using the "
                             "namespace's live adaptive modes, %s, not %s's: %s; "
                             "bulkhead apply %s takes the file's", differ->modes,
                             bh_shim.config.path, why, bh_shim.config.path);
}

static void note_registered(struct bh_joined *joined, int i, int shared, int live_limit,
                            const struct bh_identity *self,
                            struct live_differences *differ)
{
    const struct bh_compartment *compartment = &bh_shim.config.compartments[i];
    joined->shared_index[i] = shared < 0 ? -1 : shared;
    if (shared < 0) {
        bh_log_startup_problem("[%s]: cannot register in namespace \"%s\" (%s); "
                               "not limited", compartment->name, bh_shim.config.namespace_name,
                               strerror(-shared));
        return;
    }
    joined->local_index[shared] = i;
    joined->membership[i] = bh_membership_of(&bh_shim.config, &joined->ns, i, shared, self);
    note_live(&joined->ns, compartment, shared, live_limit, differ);
}

/* Every compartment of the rules, under one take of the namespace lock. */
static void register_compartments(struct bh_joined *joined)
{
    static int starts[BH_MAX_COMPARTMENTS], indexes[BH_MAX_COMPARTMENTS],
               live_limits[BH_MAX_COMPARTMENTS];
    static struct live_differences differ;
    int count = bh_shim.config.compartment_count;
    struct bh_identity self;
    bh_identity_self(&self);
    for (int i = 0; i < count; i++)
        starts[i] = bh_starting_limit(&bh_shim.config.compartments[i]);
    if (bh_compartments_register(&joined->ns, bh_shim.config.compartments, starts,
                                 count, indexes, live_limits) < 0)
        for (int i = 0; i < count; i++)
            indexes[i] = -errno;
    differ.limits[0] = differ.modes[0] = '\0';
    for (int i = 0; i < count; i++)
        note_registered(joined, i, indexes[i], live_limits[i], &self, &differ);
    say_live_differences(&differ);
}

/* The namespace's shared state is out of reach: another user's object
 * under our key, the machine's SysV ids used up, a uid we cannot see
 * through. on_failure decides: closed (the default) refuses whatever the
 * rules match until the state is reachable, since running unlimited would
 * let any local user switch the limits off; open runs unlimited. */
static void unreachable(struct bh_joined *joined, const char *err)
{
    int open = bh_shim.config.on_failure_open;
    if (open)
        bh_log_startup_problem("%s; running without limits (on_failure = open)", err);
    else
        bh_log_startup_problem("%s; refusing every connection the rules match "
                               "until it is reachable (on_failure = closed)", err);
    for (int i = 0; i < bh_shim.config.compartment_count; i++)
        joined->shared_index[i] = open ? -1 : BH_SHARED_UNREACHABLE;
}

/* Opens the euid's namespace into `joined` and registers the rules there;
 * out of reach, on_failure decides (the next uid change tries again). */
static void open_joined(struct bh_joined *joined)
{
    char err[512];
    for (int i = 0; i < BH_MAX_COMPARTMENTS; i++)
        joined->local_index[i] = -1;
    if (bh_namespace_open(bh_shim.config.namespace_name, 1, &joined->ns, err,
                          sizeof err) < 0) {
        if (errno == EPERM || errno == EEXIST)
            snprintf(err + strlen(err), sizeof err - strlen(err), "; %s",
                     errno == EPERM ? "ipcrm removes it (root or its owner)"
                                    : "bulkhead reset --force removes it");
        unreachable(joined, err);
        return;
    }
    joined->ns.refused = bh_joined_owe;
    if (joined->id > 0 && bh_permits_own_counts(&joined->ns) < 0) {
        bh_namespace_close(&joined->ns);  /* the counts would be another's */
        snprintf(err, sizeof err, "namespace \"%s\" of uid %u: no memory for this "
                 "process's counts", bh_shim.config.namespace_name, (unsigned)geteuid());
        unreachable(joined, err);
        return;
    }
    register_compartments(joined);
}

/* Past BH_JOINED_MAX namespaces (or out of memory): the euid's is out of
 * reach, and on_failure decides. Written alike by every such change. */
static struct bh_joined *beyond_the_last(void)
{
    static struct bh_joined beyond = { .id = -1 };
    char err[160];
    snprintf(err, sizeof err, "namespace \"%s\" of uid %u: this process already "
             "counts in %d namespaces", bh_shim.config.namespace_name,
             (unsigned)geteuid(), BH_JOINED_MAX);
    unreachable(&beyond, err);
    return &beyond;
}

/* Connects count in the euid's namespace from now: one joined before, or
 * one opened now. Filled in before it is published, so that a thread
 * reads the old one or the new, never one half made (joined.h). */
static void join_namespace(void)
{
    struct bh_joined *joined = bh_joined_find(geteuid());
    if (!joined) {
        joined = bh_joined_new();
        if (joined)
            open_joined(joined);
        else
            joined = beyond_the_last();
        joined->admitter = (struct bh_admitter){ &bh_shim.config, &joined->ns,
                                                 joined->shared_index, joined->membership };
        if (joined->id >= 0)
            bh_joined_add(joined);
    }
    bh_joined_switch(joined);
}

void bh_shim_before_uid_change(void)
{
    atomic_fetch_add(&bh_shim.uid_changes_under_way, 1);
    if (bh_shim_active())
        bh_log_hold_file();
}

static void uid_change_ended(void)
{
    atomic_fetch_add(&bh_shim.uid_changes_ended, 1);
    atomic_fetch_sub(&bh_shim.uid_changes_under_way, 1);
    libc_syscall(SYS_futex, (long)&bh_shim.uid_changes_ended, FUTEX_WAKE_PRIVATE, INT_MAX, 0, 0, 0);
}

int bh_shim_uid_settled(void)
{
    int saved_errno = errno;
    const struct timespec slice = { 0, 10 * 1000 * 1000 };
    for (int i = 0; i < 100 && atomic_load(&bh_shim.uid_changes_under_way) > 0; i++) {
        uint32_t ended = atomic_load(&bh_shim.uid_changes_ended);
        if (atomic_load(&bh_shim.uid_changes_under_way) > 0)
            libc_syscall(SYS_futex, (long)&bh_shim.uid_changes_ended, FUTEX_WAIT_PRIVATE,
                         ended, (long)&slice, 0, 0);
    }
    int settled = atomic_load(&bh_shim.uid_changes_under_way) > 0 ||
                  bh_joined_now()->ns.uid == geteuid();
    errno = saved_errno;
    return settled;
}

/* The effective uid changed: the process joins the new uid's namespace,
 * as every worker of that user does. The one it leaves stays joined
 * (joined.c), with its connections and counts: their closes give permits
 * back there while the process can reach it (root can; a worker that
 * dropped root for good cannot, and SEM_UNDO gives them back at exit),
 * and a process that comes back to it finds them again. Threads
 * connecting meanwhile count in either namespace, each connection in
 * the one it took its permits from; one the old namespace refuses waits
 * for the change to end (bh_shim_uid_settled). */
void bh_shim_after_uid_change(int rc)
{
    int saved_errno = errno;
    struct bh_joined *was = bh_shim_active() ? bh_joined_now() : NULL;
    uid_t now = geteuid();
    if (rc < 0 || !was || now == was->ns.uid) {
        if (rc == 0 && was)
            bh_joined_settle();
        uid_change_ended();
        errno = saved_errno;
        return;
    }
    uint32_t held = was->ns.state ? bh_permits_held_total(&was->ns) : 0;
    if (held)
        bh_log(BH_LOG_WARN, "%s[%d] changed its uid from %u to %u holding %u permit%s "
               "of namespace \"%s\" of uid %u: each goes back at its connection's "
               "close if uid %u may still reach that namespace (root may), else at "
               "a later uid change that can, or when it exits",
               program_invocation_short_name, (int)getpid(),
               (unsigned)was->ns.uid, (unsigned)now, held, held == 1 ? "" : "s",
               bh_shim.config.namespace_name, (unsigned)was->ns.uid, (unsigned)now);
    join_namespace();
    bh_joined_settle();
    bh_log(BH_LOG_INFO, "%s[%d] changed its uid from %u to %u: its connections count "
           "in namespace \"%s\" of uid %u (bulkhead stat -u %u)",
           program_invocation_short_name, (int)getpid(), (unsigned)was->ns.uid,
           (unsigned)now, bh_shim.config.namespace_name, (unsigned)now, (unsigned)now);
    uid_change_ended();
    errno = saved_errno;
}

static void forget_after_fork(void)
{
    bh_copies_after_fork_child();
    bh_observe_after_fork_child();
    bh_log_forget_after_fork();
    bh_joined_after_fork_child();
    bh_rule_index_after_fork(bh_shim.rules);
    bh_stall_after_fork_child();
    bh_async_after_fork_child();
}

/* glibc's _Fork runs no pthread_atfork handler: ours run around it here.
 * Both are async-signal-safe, as _Fork is (no lock, no allocation). */
pid_t bh_shim_fork_bare(void)
{
    if (!bh_shim_active())
        return libc__Fork();
    int saved_errno = errno;
    bh_copies_before_fork();
    errno = saved_errno;
    pid_t pid = libc__Fork();
    if (pid == 0) {
        saved_errno = errno;
        forget_after_fork();
        errno = saved_errno;
    }
    return pid;
}

static void start_once_per_image(void)
{
    starting_here = 1;
    bh_log_remember_stderr();
    /* Rules with no compartment (the packaged /etc/bulkhead/rules.ini is
     * [global] alone) count nothing: no namespace is made for them, unless
     * they observe. */
    int active = load_rules() == 0 &&
                 (bh_shim.config.compartment_count > 0 || bh_shim.config.observe);
    if (active) {
        join_namespace();
        if (bh_shim.config.observe)
            bh_observe_start(geteuid(), bh_shim.config.namespace_name);
        bh_fd_table_reset();
        bh_handoff_adopt();
        pthread_atfork(bh_copies_before_fork, NULL, forget_after_fork);
        bh_log_once_per_tree("BULKHEAD_LOADED_SAID", BH_LOG_INFO,
                             "%s loaded: namespace \"%s\", %d compartment%s, %d rule%s",
                             bh_shim.config.path, bh_shim.config.namespace_name,
                             bh_shim.config.compartment_count,
                             bh_shim.config.compartment_count == 1 ? "" : "s",
                             bh_shim.config.rule_count,
                             bh_shim.config.rule_count == 1 ? "" : "s");
    }
    /* Under run's seccomp supervisor, what we count is marked so that it
     * is not counted again; a shim that counts nothing leaves its calls
     * to the supervisor. */
    if (active && getenv(BH_SUPERVISED_VARIABLE)) {
        bh_libc_mark_for_supervisor();
        bh_shim.supervised = 1;
    }
    unsetenv(BH_HANDOFF_VARIABLE); /* meant for this image only */
    /* The gate before the status: a thread that finds the status set
     * finds the gate too, and one that finds the gate set finds all the
     * rest. */
    atomic_store_explicit(&bh_shim.gate, !active      ? BH_SHIM_GATE_NONE
                                         : bh_observing ? BH_SHIM_GATE_OBSERVING
                                                        : BH_SHIM_GATE_PLAIN,
                          memory_order_release);
    atomic_store_explicit(&bh_shim.status, active ? BH_SHIM_ACTIVE : BH_SHIM_OFF,
                          memory_order_release);
    starting_here = 0;
}

void bh_shim_start(void)
{
    if (starting_here)
        return;  /* a hook called from inside start-up: pass through */
    int saved_errno = errno;
    pthread_once(&start_once, start_once_per_image);
    errno = saved_errno;
}

__attribute__((constructor)) static void start_at_load(void)
{
    bh_shim_start();
}
