/* Hooks that end the process at once: _exit and _Exit. Counted connections
 * are closed before their permits go back (see core/exit.c), and a vfork
 * child drops the copies its parent counted it in (core/copies.c); stdio
 * is not flushed, as _exit promises. exit() itself is covered by our destructor:
 * glibc's exit calls its own _exit directly, never through these. */
#include <stdlib.h>
#include <unistd.h>

#include "core/copies.h"
#include "core/exit.h"
#include "hooks/export.h"
#include "libc/libc.h"

static _Noreturn void bh_exit_now(void (*real_exit)(int), int status)
{
    bh_copies_spawned_exit();
    bh_exit_close_connections(0);
    real_exit(status);
    __builtin_unreachable();
}

BH_EXPORT _Noreturn void _exit(int status) { bh_exit_now(libc__exit, status); }
BH_EXPORT _Noreturn void _Exit(int status) { bh_exit_now(libc__Exit, status); }
