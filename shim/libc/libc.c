/* dlsym plumbing for the real-symbol table declared in libc.h. */
#include "libc/libc.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

struct bh_libc bh_libc;

void *bh_libc_lookup(const char *name)
{
    void *symbol = dlsym(RTLD_NEXT, name);
    if (!symbol) {
        /* Nothing sane to call: the C library lacks a function that the
         * program just called through us. Say so, plainly, and stop. */
        static const char message[] = "bulkhead: the C library lacks a hooked function\n";
        (void)!syscall(SYS_write, 2, message, sizeof message - 1); /* not our hook */
        abort();
    }
    return symbol;
}
