/* Permits across exec.
 *
 * SEM_UNDO records belong to the process and survive exec, so the permits
 * stay held; only our fd table is lost with the old image. The exec hooks
 * add BULKHEAD_HANDOFF to the new environment, naming:
 *   - each connection whose every fd is close-on-exec ("r<compartment>"):
 *     the kernel closes them during exec, so the new image gives those
 *     permits back first thing;
 *   - each fd that survives exec ("<fd>:<connection>:<compartment>"): the
 *     new image tracks it again, fds of one connection sharing one count.
 * Nothing is released before exec: if exec fails, nothing has changed.
 * If the new image does not load the shim, the permits go back when the
 * process exits (SEM_UNDO) - late, but never lost and never twice.
 *
 * Format: BULKHEAD_HANDOFF=<pid>/<semid>/<item>,<item>,...  The pid and
 * semaphore id guard against a variable that leaked to another process or
 * names a namespace this image does not use. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libc/libc.h"
#include "core/log.h"
#include "core/shim.h"
#include "fdtable/fd_table.h"

enum { MAX_HANDOFF_FDS = 1024 };

struct tracked_fd {
    int fd;
    uint32_t connection;
    int compartment;
    int survives_exec;
};

struct tracked_fds {
    struct tracked_fd items[MAX_HANDOFF_FDS];
    int count;
};

static void collect(int fd, uint32_t connection, int compartment, void *ctx)
{
    struct tracked_fds *tracked = ctx;
    if (tracked->count == MAX_HANDOFF_FDS)
        return;  /* left out: held until the process exits */
    int flags = libc_fcntl(fd, F_GETFD, NULL);
    if (flags < 0)
        return;  /* closed behind our back: nothing to hand off */
    tracked->items[tracked->count++] = (struct tracked_fd){
        fd, connection, compartment, !(flags & FD_CLOEXEC) };
}

static int connection_survives(const struct tracked_fds *tracked, uint32_t connection)
{
    for (int i = 0; i < tracked->count; i++)
        if (tracked->items[i].connection == connection && tracked->items[i].survives_exec)
            return 1;
    return 0;
}

static int first_of_connection(const struct tracked_fds *tracked, int at)
{
    for (int i = 0; i < at; i++)
        if (tracked->items[i].connection == tracked->items[at].connection)
            return 0;
    return 1;
}

static int append_item(char *buf, unsigned long buflen, unsigned long *used,
                       const struct tracked_fds *tracked, int i)
{
    const struct tracked_fd *item = &tracked->items[i];
    int written;
    if (item->survives_exec)
        written = snprintf(buf + *used, buflen - *used, "%s%d:%u:%d",
                           buf[*used - 1] == '/' ? "" : ",", item->fd,
                           item->connection, item->compartment);
    else if (!connection_survives(tracked, item->connection) &&
             first_of_connection(tracked, i))
        written = snprintf(buf + *used, buflen - *used, "%sr%d",
                           buf[*used - 1] == '/' ? "" : ",", item->compartment);
    else
        return 0;
    if (written < 0 || (unsigned long)written >= buflen - *used)
        return -1;
    *used += written;
    return 1;
}

int bh_handoff_encode(char *buf, unsigned long buflen)
{
    if (atomic_load(&bh_shim.status) != BH_SHIM_ACTIVE)
        return 0;
    struct tracked_fds tracked;
    tracked.count = 0;
    bh_fd_for_each(collect, &tracked);
    int written = snprintf(buf, buflen, "%s=%d/%d/", BH_HANDOFF_VARIABLE,
                           (int)getpid(), bh_shim.ns.semid);
    if (tracked.count == 0 || written < 0 || (unsigned long)written >= buflen)
        return 0;
    unsigned long used = written;
    int items = 0;
    for (int i = 0; i < tracked.count; i++) {
        int appended = append_item(buf, buflen, &used, &tracked, i);
        if (appended < 0)
            break;  /* no room: the rest are held until the process exits */
        items += appended;
    }
    return items > 0;
}

/* fds of one old connection become one new connection again. */
struct adopted {
    uint32_t old_connection;
    int fd;
};

static void adopt_fd(int fd, uint32_t old_connection, int compartment,
                     struct adopted *adopted, int *adopted_count)
{
    if (libc_fcntl(fd, F_GETFD, NULL) < 0)
        return;
    for (int i = 0; i < *adopted_count; i++) {
        if (adopted[i].old_connection == old_connection) {
            bh_give_back(bh_fd_duplicated(adopted[i].fd, fd));
            return;
        }
    }
    if (*adopted_count < MAX_HANDOFF_FDS && bh_fd_attach(fd, compartment) == 0)
        adopted[(*adopted_count)++] = (struct adopted){ old_connection, fd };
}

static int valid_compartment(int compartment)
{
    return compartment >= 0 &&
           compartment < (int)atomic_load(&bh_shim.ns.state->compartment_count);
}

static void adopt_items(char *items)
{
    static struct adopted adopted[MAX_HANDOFF_FDS];
    int adopted_count = 0;
    char *saveptr = NULL;
    for (char *item = strtok_r(items, ",", &saveptr); item;
         item = strtok_r(NULL, ",", &saveptr)) {
        int fd, compartment;
        unsigned connection;
        if (sscanf(item, "r%d", &compartment) == 1 && valid_compartment(compartment))
            bh_permit_release(&bh_shim.ns, compartment);
        else if (sscanf(item, "%d:%u:%d", &fd, &connection, &compartment) == 3 &&
                 valid_compartment(compartment))
            adopt_fd(fd, connection, compartment, adopted, &adopted_count);
    }
}

void bh_handoff_adopt(void)
{
    const char *value = getenv(BH_HANDOFF_VARIABLE);
    int pid, semid, offset = 0;
    if (!value || sscanf(value, "%d/%d/%n", &pid, &semid, &offset) != 2 || !offset)
        return;
    if (!bh_shim.ns.state)
        return;  /* no namespace of ours to hand anything back to */
    if (pid != getpid() || semid != bh_shim.ns.semid) {
        bh_log(BH_LOG_DEBUG, "ignoring a hand-off for another process or "
               "namespace; its permits go back when that process exits");
        return;
    }
    bh_permits_rejoin_after_exec(&bh_shim.ns);
    char *items = strdup(value + offset);
    if (items)
        adopt_items(items);
    free(items);
}
