/* Counted connections whose fds other processes hold: fork, SCM_RIGHTS
 * and exec. The permit follows the socket, not the process that
 * connected: see copies.c. */
#ifndef BH_COPIES_H
#define BH_COPIES_H

#include <spawn.h>
#include <sys/socket.h>
#include <sys/types.h>

/* pthread_atfork handlers: before fork, every counted connection gets a
 * record counting the child in; in the child, those are kept. */
void bh_copies_before_fork(void);
void bh_copies_after_fork_child(void);

/* Children that run on this process's memory until they exec (vfork,
 * posix_spawn): before they start, every counted connection gets a record
 * and a reference for the child, kept by the calling thread. The child
 * drops those whose fds do not survive its exec, and all of them if it
 * exits instead; an fd that reaches the exec'd program keeps its
 * reference, settled by the kernel's word (the reaper) once every copy is
 * closed. */
/* Before the real vfork: returns the address to jump to. */
void *bh_copies_before_vfork(void);
/* In a vfork child, before exec and before _exit. */
void bh_copies_spawned_exec(void);
void bh_copies_spawned_exit(void);
/* posix_spawn and posix_spawnp, which run no hook in their child: the
 * parent keeps the child's references for the connections that have an
 * fd without close-on-exec, the copies the program starts with. */
int bh_copies_spawn(int (*spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                                 const posix_spawnattr_t *, char *const[], char *const[]),
                    pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
                    const posix_spawnattr_t *attributes, char *const argv[],
                    char *const envp[]);

/* sendmsg with a control buffer: counted fds passed with SCM_RIGHTS get a
 * record counting the copy in flight before `send` runs; a failed send
 * takes it back. */
ssize_t bh_copies_sendmsg(int fd, const struct msghdr *msg, int flags,
                          ssize_t (*send)(int, const struct msghdr *, int));
/* An fd just received with SCM_RIGHTS: if it is a counted socket, this
 * process holds the copy that was in flight; `peeked` (MSG_PEEK), a copy of
 * its own, the message and its copy in flight staying queued. */
void bh_copies_received(int fd, int peeked);

#endif
