/* Counted sockets, by inode, and the processes they were counted for.
 *
 * A socket's permits are given back when no process has it open any
 * more, not at a close(): dup, fork and SCM_RIGHTS share it. The kernel
 * is asked (sock_diag, unprivileged, as `ss` does): a dump of the TCP
 * sockets of our network namespace, in which a socket still open shows
 * its inode and one whose last reference is closed shows none (gone, or
 * an orphan finishing its close). A dump rather than one lookup per
 * socket (shim/permits/socket_records.c does those): a socket still
 * connecting has no peer address to look it up by.
 *
 * Shared by the supervisor's threads under one mutex; what is counted
 * here is held by the supervisor's own process (SEM_UNDO): if it dies,
 * the kernel gives everything back. A socket is released once: it leaves
 * the table under the mutex before its permits go back. */
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "supervisor/supervisor.h"

struct counted {
    uint64_t inode;
    uint64_t sequence;  /* when it was counted: a scan judges only sockets
                           counted before its dump began */
    int shared, weight;
    struct sv_process *process;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct counted *counted;
static int counted_count, counted_capacity;
static uint64_t sequence;
static struct sv_process **processes;
static int process_count, process_capacity;

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
    free(process);
}

void sv_process_put(struct sv_process *process)
{
    pthread_mutex_lock(&lock);
    put_locked(process);
    pthread_mutex_unlock(&lock);
}

void sv_socket_count(uint64_t inode, int shared, int weight, struct sv_process *process)
{
    pthread_mutex_lock(&lock);
    if (counted_count == counted_capacity &&
        grow((void **)&counted, &counted_capacity, sizeof *counted) < 0) {
        pthread_mutex_unlock(&lock);
        abort();  /* cannot happen short of memory for a few bytes */
    }
    process->counted++;
    counted[counted_count++] = (struct counted) { inode, ++sequence, shared, weight,
                                                  process };
    pthread_mutex_unlock(&lock);
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
    bh_admission_release(&state->admitter, &applicant, gone.shared, gone.weight);
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

struct open_inodes {
    uint64_t *list;
    int count, capacity;
};

/* Adds the inodes of one dump's answer; 1 when the dump is complete,
 * 0 for more to read, -1 on error. */
static int take_answer(struct open_inodes *open, const char *buffer, ssize_t length)
{
    for (const struct nlmsghdr *header = (const void *)buffer;
         NLMSG_OK(header, (size_t)length); header = NLMSG_NEXT(header, length)) {
        if (header->nlmsg_type == NLMSG_DONE)
            return 1;
        if (header->nlmsg_type == NLMSG_ERROR)
            return -1;
        const struct inet_diag_msg *message = NLMSG_DATA(header);
        if (!message->idiag_inode)
            continue;  /* no file holds it: as good as gone */
        if (open->count == open->capacity &&
            grow((void **)&open->list, &open->capacity, sizeof *open->list) < 0)
            return -1;
        open->list[open->count++] = message->idiag_inode;
    }
    return 0;
}

/* Every TCP socket of one family in our network namespace. */
static int dump_family(int netlink, int family, struct open_inodes *open)
{
    struct {
        struct nlmsghdr header;
        struct inet_diag_req_v2 request;
    } ask = {
        .header = { .nlmsg_len = sizeof ask, .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                    .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP },
        .request = { .sdiag_family = (uint8_t)family, .sdiag_protocol = IPPROTO_TCP,
                     .idiag_states = ~0u },
    };
    struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
    if (sendto(netlink, &ask, sizeof ask, 0, (struct sockaddr *)&kernel,
               sizeof kernel) != (ssize_t)sizeof ask)
        return -1;
    long buffer[4096];  /* 32 KB: a few hundred sockets per answer */
    for (;;) {
        ssize_t length = recv(netlink, buffer, sizeof buffer, 0);
        if (length <= 0)
            return -1;
        int done = take_answer(open, (const char *)buffer, length);
        if (done)
            return done > 0 ? 0 : -1;
    }
}

static int is_open(const struct open_inodes *open, uint64_t inode)
{
    for (int i = 0; i < open->count; i++)
        if (open->list[i] == inode)
            return 1;
    return 0;
}

int sv_sockets_scan(struct sv_state *state, int *released)
{
    struct open_inodes open = { 0 };
    pthread_mutex_lock(&lock);
    uint64_t before = sequence;
    pthread_mutex_unlock(&lock);
    int netlink = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    int ok = netlink >= 0 && dump_family(netlink, AF_INET, &open) == 0 &&
             dump_family(netlink, AF_INET6, &open) == 0;
    if (netlink >= 0)
        close(netlink);
    pthread_mutex_lock(&lock);
    int before_count = counted_count;
    for (int i = 0; ok && i < counted_count;)
        if (counted[i].sequence > before || is_open(&open, counted[i].inode))
            i++;
        else
            release_locked(state, i);  /* entry i is now another one */
    int left = counted_count;
    pthread_mutex_unlock(&lock);
    if (released)
        *released = before_count - left;
    free(open.list);
    return ok ? left : -1;
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
