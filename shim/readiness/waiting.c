/* The fds of this process whose connect waits for a permit, hidden from
 * the program's readiness calls, with their deferred epoll registrations
 * and their verdicts not read yet.
 *
 * Shared (process-wide, every thread):
 * - slots[]: one per fd that waits or has an unread verdict. A slot is
 *   claimed (its fd field 0 -> fd + 1) only by bh_waiting_hide under
 *   `lock`; freed (-> 0, by compare-and-swap: the winner decrements
 *   bh_waiting_active) by bh_waiting_show (error 0, under the lock), and
 *   by bh_waiting_verdict (consume) and bh_waiting_forget with no lock.
 *   Its state and error are written under the lock and read by anyone;
 *   its registrations are read and written only under the lock.
 * - slot_of[fd]: slot + 1 for fds below WAITING_FDS, 0 for none: written
 *   by whoever claims or frees the slot, read by every readiness call.
 * - bh_waiting_active: the count of slots in use, read by every hook.
 * Signal handlers: bh_waiting_forget and bh_waiting_verdict take no lock
 * and are async-signal-safe (close() and getsockopt may run in one).
 * bh_waiting_hide, bh_waiting_show, epoll_ctl on the slow path and
 * epoll_wait's look for an unread refusal take the lock: one of those
 * from a handler that interrupted another on the same thread would wait
 * for itself (the lock is never held while the thread blocks elsewhere,
 * so only such a handler can). poll and select take no lock.
 * A show racing the forget of the same fd (a close in another thread)
 * puts back registrations only while the slot still names the fd; the
 * close lands between that check and the ADD at worst, which then fails
 * with EBADF, or (the number reused within that instant) adds the new fd.
 * Death mid-operation: the table lives in the process and dies with it;
 * the epoll sets die with it too. A fork in another thread while the lock
 * is held leaves it held in the child: bh_waiting_reset makes a new one.
 * No malloc anywhere: the tables are fixed, bh_waiting_hide says ENOSPC
 * when they are full. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "libc/libc.h"
#include "readiness/deferred.h"
#include "readiness/waiting.h"
#include "readiness/wake.h"

enum { WAITING_FDS = 65536, SLOTS = 512, SETS = 8 };
enum { HIDDEN = 1, REFUSED = 2 };

struct registration {
    int epfd;
    struct epoll_event event;
};

struct slot {
    _Atomic int fd;          /* fd + 1, so that the zeroed table reads free */
    _Atomic int state;       /* HIDDEN or REFUSED */
    _Atomic int error;       /* REFUSED: the errno SO_ERROR gives */
    _Atomic int in_refused;  /* counted in `refused`: whoever clears it uncounts */
    int sets;                /* the registrations: held back while HIDDEN, */
    struct registration registrations[SETS];  /* put back when REFUSED */
};

_Atomic int bh_waiting_active;
static struct slot slots[SLOTS];
static _Atomic unsigned short slot_of[WAITING_FDS];
static _Atomic int refused;  /* slots in state REFUSED */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int slot_fd(struct slot *slot) { return atomic_load(&slot->fd) - 1; }

static struct slot *slot_for(int fd)
{
    if (fd < 0 || fd >= WAITING_FDS)
        return NULL;
    unsigned index = atomic_load(&slot_of[fd]);
    if (!index || slot_fd(&slots[index - 1]) != fd)
        return NULL;
    return &slots[index - 1];
}

/* The one who frees a slot: 1 if that was this caller. The slot first,
 * then slot_of (slot_for checks both), so that a racing hide of the same
 * fd, which claims another slot, keeps its slot_of. */
static int free_slot(struct slot *slot, int fd)
{
    int expected = fd + 1;
    if (!atomic_compare_exchange_strong(&slot->fd, &expected, 0))
        return 0;
    unsigned short index = (unsigned short)(slot - slots + 1);
    atomic_compare_exchange_strong(&slot_of[fd], &index, 0);
    if (atomic_exchange(&slot->in_refused, 0))
        atomic_fetch_sub(&refused, 1);
    atomic_fetch_sub(&bh_waiting_active, 1);
    return 1;
}

static struct slot *claim_slot(int fd)
{
    for (int i = 0; i < SLOTS; i++) {
        int expected = 0;
        if (atomic_compare_exchange_strong(&slots[i].fd, &expected, fd + 1)) {
            slots[i].sets = 0;
            atomic_store(&slots[i].error, 0);
            atomic_store(&slots[i].state, HIDDEN);
            atomic_fetch_add(&bh_waiting_active, 1);
            atomic_store(&slot_of[fd], (unsigned short)(i + 1));
            return &slots[i];
        }
    }
    return NULL;
}

/* ---- the process's epoll sets, through /proc (the rare path) ---------- */

static int is_epoll_fd(int dir, const char *name)
{
    static const char eventpoll[] = "anon_inode:[eventpoll]";
    char target[sizeof eventpoll];
    ssize_t length = readlinkat(dir, name, target, sizeof target);
    return length == (ssize_t)sizeof eventpoll - 1 &&
           memcmp(target, eventpoll, sizeof eventpoll - 1) == 0;
}

/* One line of /proc/self/fdinfo/EPFD: "tfd: N events: HEX data: HEX ...";
 * 1 when it is fd's registration and there is no room left for it. */
static int take_line(struct slot *slot, int epfd, int fd, const char *line)
{
    char *end;
    if (strncmp(line, "tfd:", 4) != 0 || strtol(line + 4, &end, 10) != fd)
        return 0;
    const char *events = strstr(end, "events:");
    const char *data = strstr(end, "data:");
    if (!events || !data)
        return 0;
    if (slot->sets == SETS)
        return 1;
    struct registration *taken = &slot->registrations[slot->sets];
    taken->epfd = epfd;
    taken->event.events = (uint32_t)strtoul(events + 7, NULL, 16);
    taken->event.data.u64 = strtoull(data + 5, NULL, 16);
    if (libc_epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL) == 0)
        slot->sets++;
    return 0;
}

/* Takes fd out of epfd's set, remembering the registration; 1 when
 * there was no room to remember it (it stays in the set). */
static int take_from(struct slot *slot, int epfd, int fd)
{
    char path[40], buffer[4096];
    size_t held = 0;
    int unfit = 0;
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", epfd);
    int info = libc_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (info < 0)
        return 0;
    for (;;) {
        ssize_t got = libc_read(info, buffer + held, sizeof buffer - 1 - held);
        if (got <= 0)
            break;
        held += (size_t)got;
        buffer[held] = '\0';
        char *line = buffer, *newline;
        while ((newline = strchr(line, '\n'))) {
            *newline = '\0';
            unfit |= take_line(slot, epfd, fd, line);
            line = newline + 1;
        }
        held = strlen(line);
        memmove(buffer, line, held);
        if (held == sizeof buffer - 1)
            held = 0;  /* no line is this long: not ours */
    }
    libc_close(info);
    return unfit;
}

/* Every epoll set of the process: the number of fd's registrations that
 * found no room (0: fd is in no set any more). */
static int take_from_every_set(struct slot *slot, int fd)
{
    struct entry { uint64_t inode; int64_t offset; unsigned short length;
                   unsigned char type; char name[]; };
    char buffer[4096] __attribute__((aligned(8)));
    int unfit = 0;
    int dir = libc_open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (dir < 0)
        return 0;
    long got;
    while ((got = syscall(SYS_getdents64, dir, buffer, sizeof buffer)) > 0) {
        for (long at = 0; at < got;) {
            struct entry *entry = (struct entry *)(buffer + at);
            at += entry->length;
            int epfd = atoi(entry->name);
            if (entry->name[0] != '.' && epfd != dir && epfd != fd &&
                is_epoll_fd(dir, entry->name))
                unfit += take_from(slot, epfd, fd);
        }
    }
    libc_close(dir);
    return unfit;
}

static void put_back(struct slot *slot, int fd)
{
    for (int i = 0; i < slot->sets && slot_fd(slot) == fd; i++)
        (void)libc_epoll_ctl(slot->registrations[i].epfd, EPOLL_CTL_ADD, fd,
                             &slot->registrations[i].event);
}

/* ---- the interface ----------------------------------------------------- */

int bh_waiting_hide(int fd)
{
    if (fd < 0 || fd >= WAITING_FDS) {
        errno = fd < 0 ? EBADF : ENOSPC;
        return -1;
    }
    pthread_mutex_lock(&lock);
    struct slot *slot = slot_for(fd);
    if (slot && atomic_load(&slot->state) == REFUSED)
        free_slot(slot, fd);  /* an old unread verdict: this wait replaces it */
    else if (slot) {
        pthread_mutex_unlock(&lock);  /* hidden already */
        return 0;
    }
    slot = claim_slot(fd);
    if (slot && take_from_every_set(slot, fd)) {
        put_back(slot, fd);  /* in more sets than a slot holds */
        free_slot(slot, fd);
        slot = NULL;
    }
    pthread_mutex_unlock(&lock);
    if (!slot) {
        errno = ENOSPC;
        return -1;
    }
    return 0;
}

void bh_waiting_show(int fd, int error)
{
    int saved = errno;
    pthread_mutex_lock(&lock);
    struct slot *slot = slot_for(fd);
    if (slot && atomic_load(&slot->state) == HIDDEN) {
        if (error > 0) {
            atomic_store(&slot->error, error);
            atomic_store(&slot->state, REFUSED);
            atomic_store(&slot->in_refused, 1);  /* first: see in_refused */
            atomic_fetch_add(&refused, 1);
        }
        put_back(slot, fd);
        if (error <= 0)
            free_slot(slot, fd);
    }
    pthread_mutex_unlock(&lock);
    bh_wake_all();
    errno = saved;
}

void bh_waiting_forget(int fd)
{
    struct slot *slot = slot_for(fd);
    if (slot)
        free_slot(slot, fd);
}

int bh_waiting_verdict(int fd, int consume)
{
    struct slot *slot = slot_for(fd);
    if (!slot)
        return BH_WAITING_NONE;
    if (atomic_load(&slot->state) == HIDDEN)
        return BH_WAITING_HIDDEN;
    int error = atomic_load(&slot->error);
    if (consume && !free_slot(slot, fd))
        return BH_WAITING_NONE;  /* a close or another reader took it first */
    return error;
}

void bh_waiting_reset(void)
{
    pthread_mutex_init(&lock, NULL);
    for (int i = 0; i < SLOTS; i++) {
        int fd = slot_fd(&slots[i]);
        if (fd >= 0)
            atomic_store(&slot_of[fd], 0);
        atomic_store(&slots[i].fd, 0);
        atomic_store(&slots[i].in_refused, 0);
    }
    atomic_store(&bh_waiting_active, 0);
    atomic_store(&refused, 0);
    bh_wake_reset();
}

/* ---- epoll ------------------------------------------------------------- */

static struct registration *registration_in(struct slot *slot, int epfd)
{
    for (int i = 0; i < slot->sets; i++)
        if (slot->registrations[i].epfd == epfd)
            return &slot->registrations[i];
    return NULL;
}

/* The kernel's checks of epfd, made without registering anything: a DEL
 * of an fd that is in no set says ENOENT exactly when epfd is an epoll
 * fd that could hold it (and takes out a stray registration otherwise). */
static int epfd_error(int epfd, int fd)
{
    if (libc_epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL) == 0 || errno == ENOENT)
        return 0;
    return errno;
}

static int remembered_ctl(struct slot *slot, int epfd, int op, int fd,
                          const struct epoll_event *event)
{
    int error = epfd_error(epfd, fd);
    struct registration *known = registration_in(slot, epfd);
    if (error)
        return error;
    if (op != EPOLL_CTL_DEL && !event)
        return EFAULT;
    switch (op) {
    case EPOLL_CTL_ADD:
        if (known)
            return EEXIST;
        if (slot->sets == SETS)
            return ENOSPC;
        slot->registrations[slot->sets++] = (struct registration){epfd, *event};
        return 0;
    case EPOLL_CTL_MOD:
        if (!known)
            return ENOENT;
        known->event = *event;
        return 0;
    case EPOLL_CTL_DEL:
        if (!known)
            return ENOENT;
        *known = slot->registrations[--slot->sets];
        return 0;
    default:
        return EINVAL;
    }
}

int bh_waiting_epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
    pthread_mutex_lock(&lock);
    struct slot *slot = slot_for(fd);
    int rc;
    if (slot && atomic_load(&slot->state) == HIDDEN) {
        int error = remembered_ctl(slot, epfd, op, fd, event);
        rc = error ? -1 : 0;
        pthread_mutex_unlock(&lock);
        if (error)
            errno = error;
        return rc;
    }
    rc = libc_epoll_ctl(epfd, op, fd, event);
    int error = errno;
    pthread_mutex_unlock(&lock);
    errno = error;
    return rc;
}

uint32_t bh_waiting_epoll_error(int epfd, uint64_t data)
{
    uint32_t mark = 0;
    if (!atomic_load(&refused))
        return 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < SLOTS && !mark; i++) {
        if (slot_fd(&slots[i]) < 0 || atomic_load(&slots[i].state) != REFUSED)
            continue;
        for (int j = 0; j < slots[i].sets; j++)
            if (slots[i].registrations[j].epfd == epfd &&
                slots[i].registrations[j].event.data.u64 == data)
                mark = EPOLLERR;
    }
    pthread_mutex_unlock(&lock);
    return mark;
}
