/* Permits across exec.
 *
 * SEM_UNDO records belong to the process and survive exec, so the permits
 * stay held; only our fd table is lost with the old image. The exec hooks
 * add BULKHEAD_HANDOFF to the new environment, naming:
 *   - each connection whose every fd is close-on-exec
 *     ("r<compartment>:<weight>"): the kernel closes them during exec, so
 *     the new image gives those permits back first thing; for a connection
 *     whose socket record holds its permits (core/copies.c), "s<share>":
 *     the new image drops the record's reference instead;
 *   - each fd that survives exec
 *     ("<fd>:<connection>:<compartment>:<weight>:<share>", share 0: none):
 *     the new image tracks it again, fds of one connection sharing one
 *     count, and a shared one names its record again.
 * Only connections counted in the namespace the process counts in now are
 * named, by their index there: those of namespaces it left at a uid change
 * (core/joined.c) are held until the process exits.
 * Nothing is released before exec: if exec fails, nothing has changed.
 * If the new image does not load the shim, the permits go back when the
 * process exits (SEM_UNDO) - late, but never lost and never twice.
 *
 * Format: BULKHEAD_HANDOFF=<pid>/<semid>/<item>,<item>,...  The pid and
 * semaphore id guard against a variable that leaked to another process or
 * names a namespace this image does not use.
 *
 * Encoding runs in the exec hook, possibly in a signal handler on a small
 * alternate stack, and uses no malloc and little stack: the items, a
 * bitmap by connection id, the text and the new environment all live in
 * one anonymous mapping sized for the fds really tracked, whatever their
 * number. A vfork child owns no table (see fd_table.c) and hands off
 * nothing, so it never maps anything into its parent.
 *
 * Adopting trusts nothing it cannot check: under AT_SECURE (setuid) the
 * variable is ignored, and otherwise no compartment gets more permits
 * given back or adopted than this process's holder records say it holds,
 * and a shared fd is adopted only when its record names its socket. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/handoff.h"
#include "core/outcome.h"
#include "core/state.h"
#include "fdtable/fd_table.h"
#include "log/log.h"
#include "libc/libc.h"

enum { ITEM_TEXT_MAX = 64 };  /* ",<fd>:<connection>:<compartment>:<weight>:<share>" */

struct tracked_fd {
    int fd;
    uint32_t connection;
    int compartment;
    int weight;
    uint32_t share;
    int survives_exec;
};

struct collection {
    struct tracked_fd *items;
    int capacity;
    int count;
    uint32_t max_connection;
};

static void count_tracked(int fd, uint32_t connection, int compartment, void *ctx)
{
    (void)fd;
    (void)compartment;
    struct collection *collection = ctx;
    collection->count++;
    if (connection > collection->max_connection)
        collection->max_connection = connection;
}

static void collect(int fd, uint32_t connection, int place, void *ctx)
{
    struct collection *collection = ctx;
    if (collection->count == collection->capacity)
        return;  /* tracked since we counted: held until the process exits */
    int flags = libc_fcntl(fd, F_GETFD, NULL);
    if (flags < 0 || connection > collection->max_connection)
        return;  /* closed behind our back, or new since we counted */
    struct bh_fd_state state = bh_fd_lookup(fd);
    if (state.watch & BH_WATCH_WAITING)
        return;  /* holds nothing; its waiter dies with the image */
    if (bh_joined_of(place) != bh_joined_now())
        return;  /* a namespace left at a uid change: held until exit */
    collection->items[collection->count++] = (struct tracked_fd){
        fd, connection, bh_index_of(place), state.weight, state.share, !(flags & FD_CLOEXEC) };
}

static int test_and_set(unsigned char *bits, uint32_t n)
{
    int was = bits[n / 8] & (1u << (n % 8));
    bits[n / 8] |= (unsigned char)(1u << (n % 8));
    return was != 0;
}

/* Appends every item: each surviving fd, and one "r" per connection none
 * of whose fds survives. `marked`, a bitmap by connection, first marks the
 * connections that survive, then those already given an "r". */
static char *encode_items(char *text, const struct collection *collection,
                          unsigned char *marked)
{
    for (int i = 0; i < collection->count; i++)
        if (collection->items[i].survives_exec)
            test_and_set(marked, collection->items[i].connection);
    const char *comma = "";
    for (int i = 0; i < collection->count; i++) {
        const struct tracked_fd *item = &collection->items[i];
        if (item->survives_exec)
            text += sprintf(text, "%s%d:%u:%d:%d:%u", comma, item->fd, item->connection,
                            item->compartment, item->weight, item->share);
        else if (test_and_set(marked, item->connection))
            continue;
        else if (item->share)
            text += sprintf(text, "%ss%u", comma, item->share);
        else
            text += sprintf(text, "%sr%d:%d", comma, item->compartment, item->weight);
        comma = ",";
    }
    return text;
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

void bh_handoff_release(struct bh_handoff *handoff)
{
    if (handoff->mapping)
        munmap(handoff->mapping, handoff->mapped);
    handoff->mapping = NULL;
}

/* Lays out, in one mapping: items, bitmap, text, environment. */
int bh_handoff_encode(struct bh_handoff *handoff, char *const envp[])
{
    handoff->mapping = NULL;
    if (atomic_load(&bh_shim.status) != BH_SHIM_ACTIVE || !envp)
        return 0;
    struct collection collection = { NULL, 0, 0, 0 };
    bh_fd_for_each(count_tracked, &collection);
    if (collection.count == 0)
        return 0;
    size_t env_count = 0;
    while (envp[env_count])
        env_count++;
    size_t items_size = round_up(collection.count * sizeof(struct tracked_fd), 16);
    size_t bitmap_size = round_up(collection.max_connection / 8 + 1, 16);
    size_t text_size = round_up(64 + (size_t)collection.count * ITEM_TEXT_MAX, 16);
    size_t env_size = (env_count + 2) * sizeof(char *);
    handoff->mapped = items_size + bitmap_size + text_size + env_size;
    char *base = mmap(NULL, handoff->mapped, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return 0;  /* nothing handed off: the permits go back at exit */
    handoff->mapping = base;
    collection.items = (struct tracked_fd *)base;
    collection.capacity = collection.count;
    collection.count = 0;
    bh_fd_for_each(collect, &collection);
    unsigned char *marked = (unsigned char *)base + items_size;
    char *text = base + items_size + bitmap_size;
    char *end = text + sprintf(text, "%s=%d/%d/", BH_HANDOFF_VARIABLE,
                               (int)getpid(), bh_joined_now()->ns.semid);
    if (encode_items(end, &collection, marked) == end) {
        bh_handoff_release(handoff);
        return 0;
    }
    char **env = (char **)(text + text_size);
    size_t kept = 0, prefix = strlen(BH_HANDOFF_VARIABLE "=");
    for (size_t i = 0; i < env_count; i++)
        if (strncmp(envp[i], BH_HANDOFF_VARIABLE "=", prefix) != 0)
            env[kept++] = envp[i];
    env[kept++] = text;
    env[kept] = NULL;
    handoff->envp = env;
    return 1;
}

/* fds of one old connection become one new connection again. */
struct adopted {
    uint32_t old_connection;
    int fd;
};

struct adoption {
    struct adopted *adopted;
    int count;
    int capacity;
    uint32_t budget[BH_MAX_COMPARTMENTS];  /* permits this process holds */
};

/* A shared fd is tracked again only if its record names its socket. */
static int attach_shared(struct bh_joined *joined, int fd, int compartment, int weight,
                         uint32_t share)
{
    struct stat socket_stat;
    int index, record_weight;
    return fstat(fd, &socket_stat) == 0 &&
           bh_socket_find(&joined->ns, socket_stat.st_ino, &index, &record_weight) == share &&
           index == compartment && record_weight == weight &&
           bh_fd_attach_shared(fd, bh_place(joined, compartment), weight, share) == 0;
}

static void adopt_fd(struct adoption *adoption, int fd, uint32_t old_connection,
                     int compartment, int weight, uint32_t share)
{
    if (libc_fcntl(fd, F_GETFD, NULL) < 0)
        return;
    for (int i = 0; i < adoption->count; i++) {
        if (adoption->adopted[i].old_connection == old_connection) {
            bh_give_back(bh_fd_duplicated(adoption->adopted[i].fd, fd));
            return;
        }
    }
    if (adoption->count == adoption->capacity)
        return;
    struct bh_joined *joined = bh_joined_now();
    if (share ? attach_shared(joined, fd, compartment, weight, share)
              : adoption->budget[compartment] >= (uint32_t)weight &&
                bh_fd_attach(fd, bh_place(joined, compartment), weight, 0, 0) == 0) {
        if (!share)
            adoption->budget[compartment] -= (uint32_t)weight;
        adoption->adopted[adoption->count++] = (struct adopted){ old_connection, fd };
    }
}

static int valid_compartment(int compartment)
{
    return compartment >= 0 &&
           compartment < (int)bh_compartment_count(&bh_joined_now()->ns);
}

static void adopt_items(char *items, struct adoption *adoption)
{
    char *saveptr = NULL;
    for (char *item = strtok_r(items, ",", &saveptr); item;
         item = strtok_r(NULL, ",", &saveptr)) {
        int fd, compartment, weight;
        unsigned connection, share;
        if (sscanf(item, "s%u", &share) == 1) {
            bh_socket_unref(&bh_joined_now()->ns, share);
        } else if (sscanf(item, "r%d:%d", &compartment, &weight) == 2 &&
            valid_compartment(compartment) && weight > 0) {
            if (adoption->budget[compartment] >= (uint32_t)weight) {
                adoption->budget[compartment] -= (uint32_t)weight;
                bh_permit_release(&bh_joined_now()->ns, compartment, weight);
            }
        } else if (sscanf(item, "%d:%u:%d:%d:%u", &fd, &connection, &compartment,
                          &weight, &share) == 5 &&
                   valid_compartment(compartment) && weight > 0) {
            adopt_fd(adoption, fd, connection, compartment, weight, share);
        }
    }
}

void bh_handoff_adopt(void)
{
    const char *value = getenv(BH_HANDOFF_VARIABLE);
    struct bh_namespace *ns = &bh_joined_now()->ns;
    int pid, semid, offset = 0;
    if (!value || !ns->state || getauxval(AT_SECURE))
        return;  /* none, no namespace of ours, or a caller we must not trust */
    if (sscanf(value, "%d/%d/%n", &pid, &semid, &offset) != 2 || !offset)
        return;
    if (pid != getpid() || semid != ns->semid) {
        bh_log(BH_LOG_DEBUG, "ignoring a hand-off for another process or "
               "namespace; its permits go back when that process exits");
        return;
    }
    struct adoption adoption = { .count = 0 };
    /* No holder record: nothing of ours to give back or adopt (budget 0),
     * but shared connections are their records' (a forked child's). */
    bh_permits_rejoin_after_exec(ns, adoption.budget);
    char *items = strdup(value + offset);
    adoption.capacity = items ? (int)strlen(items) / 4 + 1 : 0;
    adoption.adopted = items ? calloc(adoption.capacity, sizeof *adoption.adopted) : NULL;
    if (adoption.adopted)
        adopt_items(items, &adoption);
    free(adoption.adopted);
    free(items);
}
