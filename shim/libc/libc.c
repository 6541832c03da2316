/* dlsym plumbing for the real-symbol table declared in libc.h. */
#include "libc/libc.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>


void *bh_libc_lookup(const char *name)
{
    void *symbol = dlsym(RTLD_NEXT, name);
    if (!symbol) {
        /* Nothing sane to call: the C library lacks a function that the
         * program just called through us. Say so, plainly, and stop. */
        static const char message[] = "bulkhead: the C library lacks a hooked function\n";
        (void)!syscall(SYS_write, 2, message, sizeof message - 1); /* glibc's, through our hook */
        abort();
    }
    return symbol;
}

void *bh_libc_vfork(void)
{
    static void *real;  /* read and written with __atomic builtins */
    void *found = __atomic_load_n(&real, __ATOMIC_RELAXED);
    if (!found) {
        found = bh_libc_lookup("vfork");
        __atomic_store_n(&real, found, __ATOMIC_RELAXED);
    }
    return found;
}

/* The first call of each: look the symbol up, keep it, call it. */
#define BH_LIBC_FIRST(type, name, params, args)                                 \
    __attribute__((noinline, cold)) type bh_libc_first_##name params          \
    {                                                                          \
        type (*real) params = (type (*) params)bh_libc_lookup(#name);          \
        __atomic_store_n(&bh_libc.name, real, __ATOMIC_RELAXED);               \
        return real args;                                                      \
    }
BH_LIBC_FUNCTIONS(BH_LIBC_FIRST)
#undef BH_LIBC_FIRST

#define BH_LIBC_VOID_FIRST(name, params, args)                                  \
    __attribute__((noinline, cold)) void bh_libc_first_##name params          \
    {                                                                          \
        void (*real) params = (void (*) params)bh_libc_lookup(#name);          \
        __atomic_store_n(&bh_libc.name, real, __ATOMIC_RELAXED);               \
        real args;                                                             \
    }
BH_LIBC_VOID_FUNCTIONS(BH_LIBC_VOID_FIRST)
#undef BH_LIBC_VOID_FIRST

/* Every slot starts at its first-call function. */
#define BH_LIBC_START(type, name, params, args) .name = bh_libc_first_##name,
#define BH_LIBC_VOID_START(name, params, args) .name = bh_libc_first_##name,
struct bh_libc bh_libc = {
    BH_LIBC_FUNCTIONS(BH_LIBC_START)
    BH_LIBC_VOID_FUNCTIONS(BH_LIBC_VOID_START)
};
#undef BH_LIBC_START
#undef BH_LIBC_VOID_START

static int marked_connect(int fd, const struct sockaddr *to, socklen_t len)
{
    return (int)libc_syscall(SYS_connect, fd, (long)to, len, (long)BH_SUPERVISED_MARK, 0, 0);
}

static int marked_close(int fd)
{
    return (int)libc_syscall(SYS_close, fd, 0, 0, (long)BH_SUPERVISED_MARK, 0, 0);
}

/* The slots are replaced, not tested on each call: the hooks' cost is
 * the same supervised or not. */
void bh_libc_mark_for_supervisor(void)
{
    __atomic_store_n(&bh_libc.connect, marked_connect, __ATOMIC_RELAXED);
    __atomic_store_n(&bh_libc.close, marked_close, __ATOMIC_RELAXED);
}
