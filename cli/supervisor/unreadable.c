/* Programs of the tree the supervisor may not read.
 *
 * Reading a connect's address (process_vm_readv) and copying its socket
 * (pidfd_getfd) need ptrace access to the program. A process of run's
 * own user grants it unless it is not dumpable (prctl(PR_SET_DUMPABLE,
 * 0), as ssh-agent, gpg-agent and many security-minded services do; or
 * it runs an executable its user may not read), which only
 * CAP_SYS_PTRACE reads; Yama's ptrace_scope refuses it to a process that
 * is not the program's ancestor (run's heir, heir.c). Nothing else
 * tells where such a connect goes, so neither which compartment it falls
 * into: on_failure decides, as when the namespace is out of reach.
 * closed (the default) refuses it with the errno every compartment
 * refuses with (ECONNREFUSED when they differ); open lets it through
 * uncounted. Either way one line per process says which and why.
 *
 * Called by the main thread and by workers: the processes already told
 * are kept under a mutex (the last TOLD of them: a process forgotten
 * there is told once more, nothing worse). */
#include <errno.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "supervisor/supervisor.h"

enum { TOLD = 64 };

static pthread_mutex_t told_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t told[TOLD];
static int told_next;

/* 1 the first time pid is asked about (among the last TOLD). */
static int first_time(pid_t pid)
{
    int first = 1;
    pthread_mutex_lock(&told_lock);
    for (int i = 0; i < TOLD && first; i++)
        first = told[i] != pid;
    if (first) {
        told[told_next] = pid;
        told_next = (told_next + 1) % TOLD;
    }
    pthread_mutex_unlock(&told_lock);
    return first;
}

/* The errno a connect whose destination is unknown is refused with. */
static int refusal_errno(const struct bh_config *config)
{
    int err = config->compartments[0].refusal_errno;
    for (int i = 1; i < config->compartment_count; i++)
        if (config->compartments[i].refusal_errno != err)
            return ECONNREFUSED;
    return err;
}

/* Why the kernel refuses us the process: a non-dumpable one's /proc
 * files belong to root. */
static const char *why_unreadable(pid_t pid)
{
    char path[64];
    struct stat info;
    snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
    if (geteuid() != 0 && stat(path, &info) == 0 && info.st_uid == 0)
        return "it is not dumpable, and run may not read a non-dumpable process "
               "without CAP_SYS_PTRACE";
    return "the kernel refuses run ptrace access to it (see kernel.yama.ptrace_scope)";
}

static void tell(const struct bh_config *config, pid_t pid, int err)
{
    char name[64] = "?", path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    FILE *comm = fopen(path, "re");
    if (comm) {
        if (fgets(name, sizeof name, comm))
            name[strcspn(name, "\n")] = '\0';
        fclose(comm);
    }
    char refusing[96];
    snprintf(refusing, sizeof refusing, "refusing them with %s (on_failure = closed)",
             bh_errno_name(err));
    cli_error("run: cannot inspect %s[%d]'s connects (%s: %s): %s", name, (int)pid,
              strerror(EPERM), why_unreadable(pid),
              config->on_failure_open ? "letting them through uncounted (on_failure = open)"
                                      : refusing);
}

int sv_unreadable(struct sv_state *state, pid_t tid)
{
    const struct bh_config *config = &state->config;
    if (config->compartment_count == 0)
        return 0;  /* nothing to cap */
    int err = config->on_failure_open ? 0 : refusal_errno(config);
    pid_t pid = sv_process_of(tid);
    if (pid > 0 && first_time(pid))
        tell(config, pid, err);
    return err;
}

void sv_answer_unreadable(struct sv_state *state, const struct seccomp_notif *notif)
{
    /* shorter than a sockaddr_in, no TCP connect is made (the kernel
     * answers EINVAL, or disconnects for AF_UNSPEC); a 32-bit socketcall's
     * length is in the memory we may not read */
    int short_address = !sv_filter_socketcall(&notif->data) &&
                        notif->data.args[2] < sizeof(struct sockaddr_in);
    int err = short_address ? 0 : sv_unreadable(state, (pid_t)notif->pid);
    if (err && sv_still_valid(state->listener, notif->id))
        sv_fail(state->listener, notif->id, err);
    else
        sv_continue(state->listener, notif->id);
}
