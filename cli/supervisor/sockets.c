/* Counted sockets, by inode, and the processes they were counted for.
 *
 * A socket's permits are given back when no process has it open any
 * more, not at a close(): dup, fork and SCM_RIGHTS share it. The kernel
 * is asked (sock_diag, unprivileged, as `ss` does), socket by socket, with
 * shim/permits/socket_records.c's lookup by address: the local address
 * is read from the supervisor's copy once its connect has begun, the
 * remote one is where it connected. A socket still open shows its inode;
 * one whose last reference is closed shows none (gone, or an orphan
 * finishing its close). A lookup is a hash lookup in the kernel; a dump of
 * every TCP socket walks the whole table, a millisecond on this machine.
 *
 * Shared by the supervisor's threads under one mutex, never held across
 * a lookup. A socket's permits are taken by the supervisor's own process
 * (SEM_UNDO); once its connect has begun and its addresses are known,
 * they are parked in an unlisted socket record of the namespace
 * (shim/permits/socket_records.c), so that they stay taken while the
 * socket is open, whether or not the supervisor lives: killed, it gives
 * back only what was not parked yet (or could not be: the records are
 * full). A socket is released once: it leaves the table under the mutex
 * before its permits go back, to the pools it took them from (a
 * reserve's member's and another program's are not one share:
 * shim/permits/holders.c), or its record's reference goes. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "supervisor/supervisor.h"

struct counted {
    uint64_t inode;
    struct bh_sock_id id;  /* family 0 until its connect began */
    uint64_t sequence;  /* when it was counted: a scan judges only sockets
                           counted before its dump began */
    int shared;
    struct bh_taken taken;  /* its permits, by the pool they came from */
    bh_share share;         /* their record once parked; 0: held by SEM_UNDO */
    struct sv_process *process;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct counted *counted;
static int counted_count, counted_capacity;
static uint64_t sequence;
static struct sv_process **processes;
static int process_count, process_capacity;
/* Pidfds of processes freed by any thread, for the main thread to close. */
static int *closing;
static int closing_count, closing_capacity;

static int grow(void **list, int *capacity, size_t size)
{
    int more = *capacity ? 2 * *capacity : 16;
    void *grown = realloc(*list, (size_t)more * size);
    if (!grown)
        return -1;
    *list = grown;
    *capacity = more;
    return 0;
}

struct sv_process *sv_process_get(pid_t pid)
{
    struct sv_process *found = NULL;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < process_count && !found; i++)
        if (processes[i]->pid == pid)
            found = processes[i];
    if (!found && (process_count < process_capacity ||
                   grow((void **)&processes, &process_capacity, sizeof *processes) == 0) &&
        (found = calloc(1, sizeof *found)) != NULL) {
        found->pid = pid;
        found->pidfd = -1;
        processes[process_count++] = found;
    }
    if (found)
        found->counted++;  /* held by the caller until sv_process_put */
    pthread_mutex_unlock(&lock);
    return found;
}

/* Under the lock: one reference fewer; freed with the last. */
static void put_locked(struct sv_process *process)
{
    if (--process->counted > 0)
        return;
    for (int i = 0; i < process_count; i++)
        if (processes[i] == process) {
            processes[i] = processes[--process_count];
            break;
        }
    if (process->pidfd >= 0 && (closing_count < closing_capacity ||
                                grow((void **)&closing, &closing_capacity,
                                     sizeof *closing) == 0))
        closing[closing_count++] = process->pidfd;
    free(process);
}

int sv_processes_watch(struct pollfd **fds)
{
    pthread_mutex_lock(&lock);
    for (; closing_count > 0; closing_count--)
        close(closing[closing_count - 1]);
    int count = 0;
    *fds = process_count ? malloc((size_t)process_count * sizeof **fds) : NULL;
    for (int i = 0; *fds && i < process_count; i++) {
        struct sv_process *process = processes[i];
        if (process->pidfd < 0 && !process->exited) {
            process->pidfd = (int)syscall(SYS_pidfd_open, process->pid, 0);
            process->exited = process->pidfd < 0;  /* gone already */
        }
        if (!process->exited)
            (*fds)[count++] = (struct pollfd) { process->pidfd, POLLIN, 0 };
    }
    pthread_mutex_unlock(&lock);
    return count;
}

int sv_processes_exited(const struct pollfd *fds, int count)
{
    int exited = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < count; i++)
        for (int j = 0; fds[i].revents && j < process_count; j++)
            if (processes[j]->pidfd == fds[i].fd && !processes[j]->exited) {
                processes[j]->exited = 1;
                exited++;
            }
    pthread_mutex_unlock(&lock);
    return exited;
}

void sv_process_put(struct sv_process *process)
{
    pthread_mutex_lock(&lock);
    put_locked(process);
    pthread_mutex_unlock(&lock);
}

int sv_socket_count(uint64_t inode, int shared, struct bh_taken taken,
                    struct sv_process *process)
{
    pthread_mutex_lock(&lock);
    if (counted_count == counted_capacity &&
        grow((void **)&counted, &counted_capacity, sizeof *counted) < 0) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    process->counted++;
    counted[counted_count++] = (struct counted) { .inode = inode, .sequence = ++sequence,
                                                  .shared = shared, .taken = taken,
                                                  .process = process };
    /* news for the main thread: a process to watch, or a first socket
     * (the backstop's timer starts) */
    int news = (process->pidfd < 0 && !process->exited) || counted_count == 1;
    pthread_mutex_unlock(&lock);
    return news;
}

int sv_socket_counted(uint64_t inode)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < counted_count && !found; i++)
        found = counted[i].inode == inode;
    pthread_mutex_unlock(&lock);
    return found;
}

/* The id sock_diag finds sock by: its local address (bound once its
 * connect began), the address it connects to. */
int sv_socket_id(int sock, const struct sockaddr *to, struct bh_sock_id *id)
{
    struct sockaddr_storage local;
    socklen_t length = sizeof local;
    memset(id, 0, sizeof *id);
    if (getsockname(sock, (struct sockaddr *)&local, &length) < 0 ||
        local.ss_family != to->sa_family)
        return -1;
    if (to->sa_family == AF_INET) {
        const struct sockaddr_in *l = (const void *)&local, *r = (const void *)to;
        id->local[0] = l->sin_addr.s_addr;
        id->remote[0] = r->sin_addr.s_addr;
        id->local_port = l->sin_port;
        id->remote_port = r->sin_port;
    } else {
        const struct sockaddr_in6 *l = (const void *)&local, *r = (const void *)to;
        memcpy(id->local, &l->sin6_addr, sizeof id->local);
        memcpy(id->remote, &r->sin6_addr, sizeof id->remote);
        id->local_port = l->sin6_port;
        id->remote_port = r->sin6_port;
    }
    id->family = to->sa_family;
    return 0;
}

void sv_socket_connecting(struct sv_state *state, uint64_t inode,
                          const struct bh_sock_id *id)
{
    /* parked under the lock: a release racing it (a disconnect from
     * another thread of the program) sees where the permits are */
    pthread_mutex_lock(&lock);
    for (int i = 0; i < counted_count; i++)
        if (counted[i].inode == inode && !counted[i].share) {
            counted[i].id = *id;
            counted[i].share = bh_socket_park_for_another(&state->ns, inode, id,
                                                          counted[i].shared,
                                                          counted[i].taken, state->pid);
        }
    pthread_mutex_unlock(&lock);
}

int sv_sockets_live(void)
{
    pthread_mutex_lock(&lock);
    int count = counted_count;
    pthread_mutex_unlock(&lock);
    return count;
}

/* Under the lock: entry i leaves the table; its permits go back. */
static void release_locked(struct sv_state *state, int i)
{
    struct counted gone = counted[i];
    counted[i] = counted[--counted_count];
    struct bh_applicant applicant = { .pid = gone.process->pid,
                                      .claimed = gone.process->claimed };
    if (gone.share)
        bh_admission_release_parked(&state->admitter, &applicant, gone.shared, gone.share,
                                    (int)(gone.taken.common + gone.taken.reserved));
    else
        bh_admission_release(&state->admitter, &applicant, gone.shared, gone.taken);
    put_locked(gone.process);
}

void sv_socket_release(struct sv_state *state, uint64_t inode)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < counted_count; i++)
        if (counted[i].inode == inode) {
            release_locked(state, i);
            break;
        }
    pthread_mutex_unlock(&lock);
}

/* ---- the kernel's word ---- */

/* What a scan looks up, copied out so that no lookup holds the lock. */
struct looked {
    uint64_t inode, sequence;
    struct bh_sock_id id;
    int gone;
};

static int copy_out(struct looked **list)
{
    pthread_mutex_lock(&lock);
    int count = 0;
    *list = counted_count ? malloc((size_t)counted_count * sizeof **list) : NULL;
    for (int i = 0; *list && i < counted_count; i++)
        if (counted[i].id.family)
            (*list)[count++] = (struct looked) { counted[i].inode, counted[i].sequence,
                                                 counted[i].id, 0 };
    pthread_mutex_unlock(&lock);
    return count;
}

int sv_sockets_scan(struct sv_state *state, int *released)
{
    struct looked *list;
    int count = copy_out(&list), asked = 1;
    int diag = count ? bh_sock_diag_socket() : -1;
    for (int i = 0; i < count; i++) {
        int open = diag >= 0 ? bh_sock_diag_open_on(diag, &list[i].id, list[i].inode,
                                                    (uint32_t)i + 1) : -1;
        list[i].gone = open == 0;
        asked &= open >= 0;
    }
    if (diag >= 0)
        close(diag);
    pthread_mutex_lock(&lock);
    int gone = 0;
    for (int i = 0; i < count; i++)
        for (int j = 0; list[i].gone && j < counted_count; j++)
            if (counted[j].inode == list[i].inode &&
                counted[j].sequence == list[i].sequence) {
                release_locked(state, j);  /* once: it leaves the table here */
                gone++;
                break;
            }
    int left = counted_count;
    pthread_mutex_unlock(&lock);
    free(list);
    if (released)
        *released = gone;
    return asked ? left : -1;
}

/* Nonzero whenever the kernel answered, even if this scan gave nothing
 * back: another thread's scan may have given back what this one would
 * have, after the caller found the compartment full and before it got
 * the lock. Once this scan is done, every socket closed before it began
 * is given back, whoever did it; the caller tries again. */
int sv_sockets_reap(void *state)
{
    int released = 0;
    return sv_sockets_scan(state, &released) >= 0 ? released + 1 : 0;
}
