/* vfork_hold HOST PORT COUNT MODE GO_FILE
 *
 * Holds COUNT connections, then starts a child that shares its memory and
 * touches the inherited fds the way real spawners do, waits for it, and
 * holds on until GO_FILE exists; then closes its connections and holds on
 * (a test kills it). The child, a vfork or posix_spawn child, took none of
 * the permits, so nothing it does may give one back.
 *
 * MODE (what the child does with the parent's connections):
 *   close        vfork; close() each, then _exit
 *   close_range  vfork; close_range(3, ~0U, 0), then exec /bin/true
 *   closefrom    vfork; closefrom(3), then _exit
 *   dup2         vfork; dup2() /dev/null over each, then _exit
 *   exec         vfork; exec sh, which writes GO_FILE.child and execs cat on a
 *                pipe: a child that still runs (under the shim, adopting
 *                whatever was handed off) while the test looks
 *   open         vfork; close_range by raw syscall (behind the shim's
 *                back), open() /dev/null onto the freed numbers, _exit
 *   posix_spawn  posix_spawn /bin/true with a close action for each
 *   system       system("true")
 *
 * Output, line buffered: "held=N", "child=done", "closed".
 * Exit: 2 on usage or setup errors; otherwise it never exits by itself. */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client_util.h"

enum { MAX_HELD = 64 };

static int held[MAX_HELD];
static int held_count;
static const char *go_file;

static void vfork_child(const char *mode)
{
    if (strcmp(mode, "close") == 0) {
        for (int i = 0; i < held_count; i++)
            close(held[i]);
    } else if (strcmp(mode, "close_range") == 0) {
        close_range(3, ~0U, 0);
        execl("/bin/true", "true", (char *)NULL);
    } else if (strcmp(mode, "closefrom") == 0) {
        closefrom(3);
    } else if (strcmp(mode, "dup2") == 0) {
        int null = open("/dev/null", O_RDONLY);
        for (int i = 0; i < held_count; i++)
            dup2(null, held[i]);
    } else if (strcmp(mode, "exec") == 0) {
        execl("/bin/sh", "sh", "-c", "echo started >\"$0.child\"; exec cat",
              go_file, (char *)NULL);
    } else if (strcmp(mode, "open") == 0) {
        syscall(SYS_close_range, 3, ~0U, 0);
        for (int i = 0; i < held_count; i++)
            open("/dev/null", O_RDONLY);
    }
    _exit(0);
}

static int run_child(const char *mode)
{
    if (strcmp(mode, "system") == 0)
        return system("true") == 0 ? 0 : -1;
    pid_t pid;
    if (strcmp(mode, "posix_spawn") == 0) {
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        for (int i = 0; i < held_count; i++)
            posix_spawn_file_actions_addclose(&actions, held[i]);
        char *argv[] = { "true", NULL };
        int rc = posix_spawn(&pid, "/bin/true", &actions, NULL, argv, NULL);
        posix_spawn_file_actions_destroy(&actions);
        if (rc != 0)
            return -1;
    } else if (strcmp(mode, "exec") == 0) {
        /* cat reads a pipe whose write end only we hold (close-on-exec):
         * it ends when we are killed. */
        int pipe_fds[2];
        if (pipe2(pipe_fds, O_CLOEXEC) < 0)
            return -1;
        pid = vfork();
        if (pid == 0) {
            dup2(pipe_fds[0], 0);
            vfork_child(mode);
        }
        char started[4096];
        snprintf(started, sizeof started, "%s.child", go_file);
        while (pid > 0 && access(started, F_OK) != 0)
            sleep_ms(10);
        return pid < 0 ? -1 : 0;
    } else {
        pid = vfork();
        if (pid == 0)
            vfork_child(mode);
        if (pid < 0)
            return -1;
    }
    int status;
    return waitpid(pid, &status, 0) == pid ? 0 : -1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 6) {
        fprintf(stderr, "usage: vfork_hold HOST PORT COUNT MODE GO_FILE\n");
        return 2;
    }
    struct sockaddr_storage to;
    socklen_t length;
    int count = atoi(argv[3]);
    if (parse_address(argv[1], atoi(argv[2]), &to, &length) < 0 ||
        count < 1 || count > MAX_HELD) {
        fprintf(stderr, "vfork_hold: bad address or count\n");
        return 2;
    }
    for (held_count = 0; held_count < count; held_count++) {
        int fd = socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&to, length) < 0) {
            printf("%s\n", errno_text(errno));
            return 1;
        }
        held[held_count] = fd;
    }
    printf("held=%d\n", held_count);
    go_file = argv[5];
    if (run_child(argv[4]) < 0) {
        fprintf(stderr, "vfork_hold: the child failed: %s\n", strerror(errno));
        return 2;
    }
    printf("child=done\n");
    while (access(argv[5], F_OK) != 0)
        sleep_ms(10);
    for (int i = 0; i < held_count; i++)
        close(held[i]);
    printf("closed\n");
    for (;;)
        pause();
}
