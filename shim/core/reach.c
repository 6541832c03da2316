/* Programs the shim cannot reach, told at exec. LD_PRELOAD works only
 * through the dynamic loader and libc: a statically linked program loads
 * no shim, and a Go program (static or not) connects with its own system
 * calls. Under `bulkhead run` its seccomp supervisor caps them; with the
 * shim preloaded by hand nothing does, and this says so.
 *
 * A file is looked at only up to what tells: the ELF header, the program
 * headers' types (no PT_INTERP: static, unless it is the loader itself),
 * and the section names (.go.buildinfo: Go, as `go version` looks first;
 * a Go binary stripped of its section headers is missed here, which only
 * costs the line). A file not read or not understood is let be.
 *
 * Shared state: `said`, this process's, set once by whichever thread
 * warns first; a vfork child shares it with its parent (one line for
 * both). Safe from a signal handler: open, pread, fstat and write. */
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/reach.h"
#include "core/shim.h"
#include "libc/libc.h"
#include "log/log.h"

enum {
    TABLE_MAX = 128,     /* more program or section headers: not a sane file */
    NAMES_MAX = 16384,   /* section names read at most */
    SCRIPT_DEPTH = 4,    /* the kernel's limit on nested #! */
    HEAD = 256,          /* the kernel reads no more of a #! line */
};

static _Atomic int said;

struct image {
    int fd;
    int is_64;
    uint64_t phoff, shoff;
    unsigned phnum, phentsize, shnum, shentsize, shstrndx;
};

static int read_at(int fd, void *into, size_t length, uint64_t offset)
{
    return pread(fd, into, length, (off_t)offset) == (ssize_t)length;
}

#define TABLES(image, h) do {                                                \
        (image)->phoff = (h).e_phoff; (image)->phnum = (h).e_phnum;         \
        (image)->phentsize = (h).e_phentsize; (image)->shoff = (h).e_shoff; \
        (image)->shnum = (h).e_shnum; (image)->shentsize = (h).e_shentsize; \
        (image)->shstrndx = (h).e_shstrndx;                                 \
    } while (0)

/* 0 for an ELF file of this machine's byte order. */
static int image_open(int fd, const unsigned char *head, size_t length,
                      struct image *image)
{
    union { Elf32_Ehdr h32; Elf64_Ehdr h64; } h;
    if (length < sizeof h.h64 || memcmp(head, ELFMAG, SELFMAG) != 0)
        return -1;
    memcpy(&h, head, sizeof h.h64);
    image->fd = fd;
    image->is_64 = h.h32.e_ident[EI_CLASS] == ELFCLASS64;
    if (h.h32.e_ident[EI_DATA] != (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                                       ? ELFDATA2LSB : ELFDATA2MSB))
        return -1;
    if (image->is_64)
        TABLES(image, h.h64);
    else
        TABLES(image, h.h32);
    return image->phnum == 0 || image->phnum > TABLE_MAX || image->phentsize < 4 ? -1 : 0;
}

/* 1 when a program header names an interpreter (p_type leads both sizes). */
static int has_interpreter(const struct image *image)
{
    for (unsigned i = 0; i < image->phnum; i++) {
        uint32_t type;
        if (!read_at(image->fd, &type, sizeof type,
                     image->phoff + (uint64_t)i * image->phentsize))
            return 1;  /* unreadable: let be */
        if (type == PT_INTERP)
            return 1;
    }
    return 0;
}

/* The file is the loader of this process (run by hand, `ld.so PROGRAM`, it
 * loads PROGRAM with LD_PRELOAD like any dynamic program): its name is in
 * our own program headers, in memory. */
static int is_our_loader(int fd)
{
    const ElfW(Phdr) *headers = (const ElfW(Phdr) *)getauxval(AT_PHDR);
    size_t count = getauxval(AT_PHNUM);
    uintptr_t bias = 0;
    int placed = 0;  /* without PT_PHDR the load address is not known here */
    const char *loader = NULL;
    for (size_t i = 0; headers && i < count; i++)
        if (headers[i].p_type == PT_PHDR) {
            bias = (uintptr_t)headers - headers[i].p_vaddr;
            placed = 1;
        }
    for (size_t i = 0; placed && i < count; i++)
        if (headers[i].p_type == PT_INTERP)
            loader = (const char *)(bias + headers[i].p_vaddr);
    struct stat ours, theirs;
    return loader && stat(loader, &ours) == 0 && fstat(fd, &theirs) == 0 &&
           ours.st_dev == theirs.st_dev && ours.st_ino == theirs.st_ino;
}

/* The section names hold ".go.buildinfo". */
static int is_go(const struct image *image)
{
    static const char name[] = ".go.buildinfo";
    union { Elf32_Shdr s32; Elf64_Shdr s64; } names;
    size_t size = image->is_64 ? sizeof names.s64 : sizeof names.s32;
    if (image->shstrndx >= image->shnum || image->shnum > TABLE_MAX ||
        image->shentsize < size ||
        !read_at(image->fd, &names, size,
                 image->shoff + (uint64_t)image->shstrndx * image->shentsize))
        return 0;
    uint64_t at = image->is_64 ? names.s64.sh_offset : names.s32.sh_offset;
    uint64_t left = image->is_64 ? names.s64.sh_size : names.s32.sh_size;
    char chunk[256];
    for (left = left < NAMES_MAX ? left : NAMES_MAX; left >= sizeof name;) {
        size_t length = left < sizeof chunk ? (size_t)left : sizeof chunk;
        if (!read_at(image->fd, chunk, length, at))
            return 0;
        if (memmem(chunk, length, name, sizeof name))
            return 1;
        size_t step = length == left ? length : length - (sizeof name - 1);
        at += step;
        left -= step;
    }
    return 0;
}

/* What keeps the shim from the file open at fd, or NULL; for a script,
 * the interpreter's path goes into next. */
static const char *problem(int fd, char next[HEAD])
{
    unsigned char head[HEAD];
    struct image image;
    ssize_t length = pread(fd, head, sizeof head - 1, 0);
    next[0] = '\0';
    if (length <= 0)
        return NULL;
    if (image_open(fd, head, (size_t)length, &image) == 0) {
        if (is_go(&image))
            return "a Go program";
        return has_interpreter(&image) || is_our_loader(fd)
            ? NULL : "a statically linked program";
    }
    if (length < 3 || head[0] != '#' || head[1] != '!')
        return NULL;
    head[length] = '\0';
    char *interp = (char *)head + 2 + strspn((char *)head + 2, " \t");
    interp[strcspn(interp, " \t\r\n")] = '\0';
    snprintf(next, HEAD, "%s", interp);
    return NULL;
}

/* The file execvp runs for name: the first executable regular file along
 * PATH. -1 when none (the exec will fail anyway) or the name is too long. */
static int open_along_path(const char *name, char path[HEAD * 2])
{
    const char *entry = getenv("PATH");
    for (entry = entry ? entry : "/bin:/usr/bin";; entry++) {
        size_t length = strcspn(entry, ":");
        int written = snprintf(path, HEAD * 2, "%.*s%s%s", (int)length, entry,
                               length ? "/" : "", name);
        struct stat st;
        int fd = written < HEAD * 2 && faccessat(AT_FDCWD, path, X_OK, AT_EACCESS) == 0
            ? libc_open(path, O_RDONLY | O_CLOEXEC, 0) : -1;
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
            return fd;
        if (fd >= 0)
            libc_close(fd);
        entry += length;
        if (!*entry)
            return -1;
    }
}

/* The file to look at: path's, or fd itself (not to be closed here). */
static int open_image(const char *path, int search, int fd, char shown[HEAD * 2])
{
    if (!path) {
        snprintf(shown, HEAD * 2, "fd %d", fd);
        return fd;
    }
    snprintf(shown, HEAD * 2, "%s", path);
    if (search && !strchr(path, '/'))
        return open_along_path(path, shown);
    return libc_open(path, O_RDONLY | O_CLOEXEC, 0);
}

void bh_reach_before_exec(const char *path, int search, int fd)
{
    char shown[HEAD * 2], interp[HEAD], culprit[HEAD] = "";
    if (atomic_load_explicit(&said, memory_order_relaxed) || !bh_shim_active() ||
        bh_shim.supervised)
        return;
    int file = open_image(path, search, fd, shown), owned = path != NULL;
    const char *why = NULL;
    for (int depth = 0; file >= 0 && depth <= SCRIPT_DEPTH; depth++) {
        why = problem(file, interp);
        if (owned)
            libc_close(file);
        if (why || !interp[0])
            break;
        snprintf(culprit, sizeof culprit, "%s", interp);
        file = libc_open(culprit, O_RDONLY | O_CLOEXEC, 0);
        owned = 1;
    }
    if (!why || atomic_exchange(&said, 1))
        return;
    bh_log(BH_LOG_WARN, "exec %s: %s%s%s%s, which LD_PRELOAD cannot reach: its "
           "connections are not limited; `bulkhead run` caps them through seccomp",
           shown, culprit[0] ? "a script for " : "", culprit, culprit[0] ? ", " : "",
           why);
}
