/* Programs the shim cannot reach (reach.c): said at exec, once. */
#ifndef BH_REACH_H
#define BH_REACH_H

/* Before an exec of path (name looked up along PATH as execvp does when
 * search is set; fd, when path is NULL, as fexecve): when the new image is
 * a statically linked or Go program, or a script run by one, and no seccomp
 * supervisor of `bulkhead run` caps it, one warning line says so, naming
 * `bulkhead run`. At most once per process; never fails the exec. No
 * malloc, little stack: the exec hooks may run in a vfork child or a
 * signal handler. */
void bh_reach_before_exec(const char *path, int search, int fd);

#endif
