/* Exits close before they give back.
 *
 * A process that exits with connections open gives their permits back in
 * the kernel's exit_sem (SEM_UNDO), a moment before exit_files closes its
 * sockets: for that moment a waiter could connect while the dead holder's
 * connection is still open on the wire. So on a normal exit we close every
 * counted connection first and give its permit back after, ourselves:
 *   - exit() and a return from main: our destructor, which runs after the
 *     program's atexit handlers and destructors (_dl_fini runs last, and a
 *     preloaded library's destructor after the program's);
 *   - _exit() and _Exit() called by the program: their hooks.
 * Deaths by signal still go through SEM_UNDO; see the README for how wide
 * that window is.
 *
 * Buffered output of an fdopen()ed socket is flushed first, or it would be
 * lost: glibc flushes stdio only after every destructor. We walk glibc's
 * list of streams (_IO_list_all, part of its ABI since 2.2.5) and flush
 * those on a counted socket that have output pending. A stream another
 * thread holds locked is left alone: waiting for it could hang the exit,
 * and losing its data is worse than the old order, so its fd is not
 * closed either (its permit goes back through SEM_UNDO as before).
 *
 * Runs in the exiting thread only; the fd table's owner check makes it do
 * nothing in a vfork child that calls _exit(). */
#include <stdio.h>
#include <stdio_ext.h>

#include "core/exit.h"
#include "core/outcome.h"
#include "core/state.h"
#include "fdtable/fd_table.h"
#include "log/log.h"
#include "libc/libc.h"

extern FILE *_IO_list_all;
void _IO_list_lock(void);
void _IO_list_unlock(void);

static int has_pending_output(FILE *stream)
{
    return stream->_IO_write_ptr > stream->_IO_write_base;
}

/* Flushes pending output of streams on counted sockets. Returns -1 when
 * a stream with pending output on `fd` could not be flushed. */
static int flush_streams_of(int fd)
{
    int rc = 0;
    _IO_list_lock();
    for (FILE *stream = _IO_list_all; stream; stream = stream->_chain) {
        if (stream->_fileno != fd || !has_pending_output(stream))
            continue;
        if (ftrylockfile(stream) != 0) {
            rc = -1;
            continue;
        }
        if (fflush_unlocked(stream) != 0)
            rc = -1;
        funlockfile(stream);
    }
    _IO_list_unlock();
    return rc;
}

static void close_first(int fd, uint32_t connection, int compartment, void *ctx)
{
    (void)connection;
    (void)compartment;
    if (*(int *)ctx && flush_streams_of(fd) < 0)
        return;  /* unflushed data: leave it to the kernel, as before */
    uint32_t detached = bh_fd_detach(fd);
    libc_close(fd);
    bh_give_back(bh_fd_release(detached));
}

void bh_exit_close_connections(int flush_streams)
{
    if (atomic_load(&bh_shim.status) != BH_SHIM_ACTIVE || !bh_fd_table_owned_here())
        return;  /* off, or a vfork child: nothing here is ours */
    bh_fd_for_each(close_first, &flush_streams);
    bh_joined_each(bh_permits_leave);
    bh_log_refusals_left_out();
}

__attribute__((destructor)) static void close_at_exit(void)
{
    bh_exit_close_connections(1);
}
