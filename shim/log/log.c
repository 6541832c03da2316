/* Logging without stdio: the host program owns its FILEs and buffers.
 *
 * Three ways out: stderr, a file, or syslog (log_file = syslog).
 *
 * A file log is opened, appended to and closed for every line. Lines are
 * rare (refusals are rate-limited), and holding a descriptor open would
 * leave us writing into whatever the program later put on that number;
 * only a process that changes its uid holds one (see bh_log_hold_file).
 * It is opened without following a symlink, created 0600, and used only
 * if it is a regular file of our effective uid: a root program must not
 * append to a file an attacker's link points at.
 *
 * stderr: only the one the program started with. A program that closed
 * fd 2 and opened a data file there must not find our lines in its data;
 * fd 2 is compared (device and inode) with what it was at start-up.
 * When it is no longer that one (a daemon pointed fd 2 at its own log or
 * closed it), the line goes to syslog instead: a line nobody reads would
 * leave an operator blaming the downstream for what the bulkhead refused.
 *
 * syslog: one datagram per line to the syslog socket (/dev/log, or
 * syslog_socket), in the form syslogd, rsyslog and journald all read,
 * "<PRI>bulkhead[PID]: text", with no timestamp (the receiver stamps it;
 * formatting local time here would take glibc's time zone lock). A socket
 * made and closed per line, as the file is opened and closed: a held fd
 * would be the program's to close and reuse. Facility daemon; the line's
 * level gives the severity. */
#include "log/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "libc/libc.h"

static enum bh_log_level log_level = BH_LOG_WARN;
static char log_path[512];          /* empty: stderr */
static int to_syslog;               /* log_file = syslog */
static struct sockaddr_un syslog_address = { AF_UNIX, "/dev/log" };
static struct { dev_t dev; ino_t ino; int known; } start_stderr;

struct refusal_window {
    _Atomic int64_t second;         /* CLOCK_MONOTONIC second of the last line */
    _Atomic uint32_t suppressed;    /* refusals not logged since */
    const char *_Atomic name;       /* the compartment's, from the config */
};
static struct refusal_window refusal_windows[BH_MAX_COMPARTMENTS];

void bh_log_configure(enum bh_log_level level, const char *path,
                      const char *syslog_socket)
{
    log_level = level;
    to_syslog = path && strcmp(path, "syslog") == 0;
    snprintf(log_path, sizeof log_path, "%s", path && !to_syslog ? path : "");
    snprintf(syslog_address.sun_path, sizeof syslog_address.sun_path, "%s",
             syslog_socket ? syslog_socket : "/dev/log");
}

int bh_log_enabled(enum bh_log_level level)
{
    return level <= log_level;
}

void bh_log_remember_stderr(void)
{
    struct stat info;
    start_stderr.known = fstat(2, &info) == 0;
    start_stderr.dev = info.st_dev;
    start_stderr.ino = info.st_ino;
}

static int is_start_stderr(void)
{
    struct stat info;
    return start_stderr.known && fstat(2, &info) == 0 &&
           info.st_dev == start_stderr.dev && info.st_ino == start_stderr.ino;
}

static int open_log_file(void)
{
    int fd = libc_open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC |
                       O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0600);
    struct stat info;
    if (fd >= 0 && (fstat(fd, &info) < 0 || !S_ISREG(info.st_mode) ||
                    info.st_uid != geteuid())) {
        libc_close(fd);
        return -1;
    }
    return fd;
}

/* The log file as opened before a uid change (bh_log_hold_file): after
 * dropping root, a worker can no longer open root's 0600 log. Written to
 * only while the number still names that file: the program may have
 * closed it and opened something else there. */
static struct { int fd; dev_t dev; ino_t ino; } held = { -1, 0, 0 };

void bh_log_hold_file(void)
{
    struct stat info;
    if (!log_path[0] || held.fd >= 0)
        return;
    int fd = open_log_file();
    if (fd < 0 || fstat(fd, &info) < 0)
        return;
    held.dev = info.st_dev;
    held.ino = info.st_ino;
    held.fd = fd;
}

static int held_fd(void)
{
    struct stat info;
    return held.fd >= 0 && fstat(held.fd, &info) == 0 && info.st_dev == held.dev &&
           info.st_ino == held.ino ? held.fd : -1;
}

/* text: the line without its "bulkhead: " and newline. */
static void send_syslog(enum bh_log_level level, const char *text, int length)
{
    static const int severity[] = {
        [BH_LOG_ERROR] = 3, [BH_LOG_WARN] = 4, [BH_LOG_INFO] = 6, [BH_LOG_DEBUG] = 7,
    };
    char datagram[1100];
    int size = snprintf(datagram, sizeof datagram, "<%d>bulkhead[%d]: %.*s",
                        (3 << 3) | severity[level], (int)getpid(), length, text);
    if (size > (int)sizeof datagram - 1)
        size = (int)sizeof datagram - 1;
    int fd = libc_socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    (void)!libc_sendto(fd, datagram, (size_t)size, MSG_DONTWAIT | MSG_NOSIGNAL,
                       (const struct sockaddr *)&syslog_address, sizeof syslog_address);
    libc_close(fd);
}

static void write_line(enum bh_log_level level, const char *line, size_t length)
{
    if (!log_path[0]) {
        size_t prefix = sizeof "bulkhead: " - 1;
        if (!to_syslog && is_start_stderr())
            (void)!libc_write(2, line, length);
        else
            send_syslog(level, line + prefix, (int)(length - prefix - 1));
        return;
    }
    int fd = open_log_file();
    if (fd < 0) {
        fd = held_fd();
        if (fd >= 0)
            (void)!libc_write(fd, line, length);
        return;
    }
    (void)!libc_write(fd, line, length);
    libc_close(fd);
}

static void log_formatted(enum bh_log_level level, const char *format, va_list args)
{
    int saved_errno = errno;
    char line[1024];
    int length = snprintf(line, sizeof line, "bulkhead: ");
    length += vsnprintf(line + length, sizeof line - length, format, args);
    if (length > (int)sizeof line - 2)
        length = sizeof line - 2;
    line[length++] = '\n';
    write_line(level, line, length);
    errno = saved_errno;
}

void bh_log(enum bh_log_level level, const char *format, ...)
{
    if (!bh_log_enabled(level))
        return;
    va_list args;
    va_start(args, format);
    log_formatted(level, format, args);
    va_end(args);
}

static void log_once_per_tree(const char *variable, enum bh_log_level level,
                              const char *format, va_list args)
{
    char text[1024], said[16];
    if (!bh_log_enabled(level))
        return;
    vsnprintf(text, sizeof text, format, args);
    uint32_t hash = 2166136261u;                  /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        hash = (hash ^ *p) * 16777619u;
    snprintf(said, sizeof said, "%08x", hash);
    const char *already = getenv(variable);
    if (already && strcmp(already, said) == 0)
        return;
    bh_log(level, "%s", text);
    setenv(variable, said, 1);
}

void bh_log_once_per_tree(const char *variable, enum bh_log_level level,
                          const char *format, ...)
{
    va_list args;
    va_start(args, format);
    log_once_per_tree(variable, level, format, args);
    va_end(args);
}

void bh_log_startup_problem(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    log_once_per_tree("BULKHEAD_SAID", BH_LOG_ERROR, format, args);
    va_end(args);
}

static int64_t monotonic_second(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec;
}

void bh_log_refusal(int compartment, const char *compartment_name,
                    const char *destination, const char *why,
                    const char *program, int pid)
{
    if (!bh_log_enabled(BH_LOG_WARN))
        return;
    struct refusal_window *window = &refusal_windows[compartment];
    atomic_store_explicit(&window->name, compartment_name, memory_order_relaxed);
    int64_t now = monotonic_second();
    int64_t last = atomic_load(&window->second);
    if (last == now || !atomic_compare_exchange_strong(&window->second, &last, now)) {
        atomic_fetch_add(&window->suppressed, 1);
        return;
    }
    uint32_t suppressed = atomic_exchange(&window->suppressed, 0);
    char more[64] = "";
    if (suppressed)
        snprintf(more, sizeof more, " (%u more refused since the last line)", suppressed);
    bh_log(BH_LOG_WARN, "refused %s to [%s] %s for %s[%d]%s", destination,
           compartment_name, why, program, pid, more);
}

void bh_log_forget_after_fork(void)
{
    for (int i = 0; i < BH_MAX_COMPARTMENTS; i++)
        atomic_store(&refusal_windows[i].suppressed, 0);
}

void bh_log_refusals_left_out(void)
{
    for (int i = 0; i < BH_MAX_COMPARTMENTS; i++) {
        uint32_t suppressed = atomic_exchange(&refusal_windows[i].suppressed, 0);
        if (suppressed)
            bh_log(BH_LOG_WARN, "%s[%d] exits: %u more refused to [%s] since "
                   "the last line", program_invocation_short_name, (int)getpid(),
                   suppressed, atomic_load(&refusal_windows[i].name));
    }
}
