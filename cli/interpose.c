/* Whether `bulkhead run` can reach a program at all: LD_PRELOAD works only
 * through the dynamic loader, on calls that go through libc. The ELF headers
 * are read here with <elf.h> (32- and 64-bit, this machine's byte order);
 * a file we cannot read or do not understand gets the benefit of the doubt,
 * since a wrong warning is worse than none. */
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli.h"

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NATIVE_DATA ELFDATA2LSB
#else
#define NATIVE_DATA ELFDATA2MSB
#endif

enum {
    TABLE_MAX = 4096,          /* more headers than this: not a sane file */
    GO_SCAN_BYTES = 64 << 10,  /* what Go's debug/buildinfo searches too */
    SCRIPT_DEPTH = 4,          /* the kernel's limit on nested #! */
};

/* Go's linker starts the build info with this; `go version FILE` finds it. */
static const char go_magic[] = "\xff Go buildinf:";

struct elf {
    int fd;
    int is_64;
    uint64_t phoff, shoff;
    unsigned phnum, phentsize, shnum, shentsize, shstrndx;
};

struct segment { uint32_t type, flags; uint64_t offset, filesz; };
struct section { uint32_t name; uint64_t offset, size; };

static int read_at(int fd, void *buffer, size_t length, uint64_t offset)
{
    return pread(fd, buffer, length, (off_t)offset) == (ssize_t)length;
}

#define COPY_HEADER(elf, h) do {                                          \
        (elf)->phoff = (h).e_phoff; (elf)->phnum = (h).e_phnum;           \
        (elf)->phentsize = (h).e_phentsize; (elf)->shoff = (h).e_shoff;   \
        (elf)->shnum = (h).e_shnum; (elf)->shentsize = (h).e_shentsize;   \
        (elf)->shstrndx = (h).e_shstrndx;                                 \
    } while (0)

/* 0 for an ELF file of our byte order whose tables look sane. */
static int elf_open(int fd, struct elf *elf)
{
    unsigned char ident[EI_NIDENT];
    if (!read_at(fd, ident, sizeof ident, 0) || memcmp(ident, ELFMAG, SELFMAG) ||
        ident[EI_DATA] != NATIVE_DATA)
        return -1;
    elf->fd = fd;
    elf->is_64 = ident[EI_CLASS] == ELFCLASS64;
    if (elf->is_64) {
        Elf64_Ehdr h;
        if (!read_at(fd, &h, sizeof h, 0))
            return -1;
        COPY_HEADER(elf, h);
    } else if (ident[EI_CLASS] == ELFCLASS32) {
        Elf32_Ehdr h;
        if (!read_at(fd, &h, sizeof h, 0))
            return -1;
        COPY_HEADER(elf, h);
    } else {
        return -1;
    }
    size_t phsize = elf->is_64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr);
    size_t shsize = elf->is_64 ? sizeof(Elf64_Shdr) : sizeof(Elf32_Shdr);
    if (elf->phnum == 0 || elf->phnum > TABLE_MAX || elf->phentsize < phsize)
        return -1;
    if (elf->shnum > TABLE_MAX || (elf->shnum && elf->shentsize < shsize))
        elf->shnum = 0;  /* sections are optional: only the Go check uses them */
    return 0;
}

static int elf_segment(const struct elf *elf, unsigned i, struct segment *s)
{
    uint64_t at = elf->phoff + (uint64_t)i * elf->phentsize;
    if (elf->is_64) {
        Elf64_Phdr p;
        if (!read_at(elf->fd, &p, sizeof p, at))
            return -1;
        *s = (struct segment) { p.p_type, p.p_flags, p.p_offset, p.p_filesz };
    } else {
        Elf32_Phdr p;
        if (!read_at(elf->fd, &p, sizeof p, at))
            return -1;
        *s = (struct segment) { p.p_type, p.p_flags, p.p_offset, p.p_filesz };
    }
    return 0;
}

static int elf_section(const struct elf *elf, unsigned i, struct section *s)
{
    uint64_t at = elf->shoff + (uint64_t)i * elf->shentsize;
    if (elf->is_64) {
        Elf64_Shdr h;
        if (!read_at(elf->fd, &h, sizeof h, at))
            return -1;
        *s = (struct section) { h.sh_name, h.sh_offset, h.sh_size };
    } else {
        Elf32_Shdr h;
        if (!read_at(elf->fd, &h, sizeof h, at))
            return -1;
        *s = (struct section) { h.sh_name, h.sh_offset, h.sh_size };
    }
    return 0;
}

/* 1 when the file names an ELF interpreter (the dynamic loader), which is
 * what reads LD_PRELOAD; its path goes into interp. 0 when it has none. */
static int elf_interpreter(const struct elf *elf, char interp[PATH_MAX])
{
    struct segment s;
    interp[0] = '\0';
    for (unsigned i = 0; i < elf->phnum; i++) {
        if (elf_segment(elf, i, &s) < 0)
            return -1;
        if (s.type != PT_INTERP)
            continue;
        size_t length = s.filesz < PATH_MAX ? (size_t)s.filesz : PATH_MAX - 1;
        if (!read_at(elf->fd, interp, length, s.offset))
            return -1;
        interp[length] = '\0';
        return 1;
    }
    return 0;
}

/* Go is told by its build info, which the runtime itself needs (version,
 * runtime/debug.ReadBuildInfo), so every Go linker since 1.13 writes it,
 * static, cgo or PIE, stripped (-s -w) or not. Not the runtime.main symbol
 * (gone with -s) nor the .note.go.buildid note (gone with -buildid=, as in
 * reproducible builds).
 *
 * Here: a section named .go.buildinfo, as `go version` looks first. */
static int has_go_section(const struct elf *elf)
{
    struct section names, s;
    char name[sizeof ".go.buildinfo"];
    if (elf->shnum == 0 || elf->shstrndx >= elf->shnum ||
        elf_section(elf, elf->shstrndx, &names) < 0)
        return 0;
    for (unsigned i = 0; i < elf->shnum; i++) {
        if (elf_section(elf, i, &s) < 0 || s.name >= names.size ||
            !read_at(elf->fd, name, sizeof name, names.offset + s.name))
            continue;
        if (memcmp(name, ".go.buildinfo", sizeof name) == 0)
            return 1;
    }
    return 0;
}

/* The build info's magic near the start of the first writable segment,
 * where Go's linker puts it: found even when the section headers were
 * stripped, as Go's own debug/buildinfo does. */
static int has_go_magic(const struct elf *elf)
{
    struct segment s;
    for (unsigned i = 0; i < elf->phnum; i++) {
        if (elf_segment(elf, i, &s) < 0)
            return 0;
        if (s.type != PT_LOAD || (s.flags & (PF_W | PF_X)) != PF_W)
            continue;
        size_t length = s.filesz < GO_SCAN_BYTES ? (size_t)s.filesz : GO_SCAN_BYTES;
        char *data = malloc(length ? length : 1);
        int found = data && read_at(elf->fd, data, length, s.offset) &&
                    memmem(data, length, go_magic, sizeof go_magic - 1);
        free(data);
        return found;
    }
    return 0;
}

int cli_is_go_image(int fd)
{
    struct elf elf;
    return elf_open(fd, &elf) == 0 && (has_go_section(&elf) || has_go_magic(&elf));
}

/* The same file as our own loader: running it by hand (ld.so PROGRAM)
 * loads PROGRAM with LD_PRELOAD like any dynamic program. */
static int is_our_loader(const char *path)
{
    char interp[PATH_MAX];
    struct elf self;
    struct stat ours, theirs;
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    int found = fd >= 0 && elf_open(fd, &self) == 0 &&
                elf_interpreter(&self, interp) == 1;
    if (fd >= 0)
        close(fd);
    return found && stat(interp, &ours) == 0 && stat(path, &theirs) == 0 &&
           ours.st_dev == theirs.st_dev && ours.st_ino == theirs.st_ino;
}

/* A set-user-ID or set-group-ID file that changes our ids runs in secure
 * mode, where the loader drops LD_PRELOAD entries that name a path. */
static const char *setuid_problem(int fd)
{
    struct stat st;
    struct statvfs fs;
    if (fstat(fd, &st) < 0 || (fstatvfs(fd, &fs) == 0 && (fs.f_flag & ST_NOSUID)))
        return NULL;
    if ((st.st_mode & S_ISUID) && st.st_uid != geteuid())
        return "is set-user-ID: the loader ignores LD_PRELOAD for it";
    if ((st.st_mode & S_ISGID) && st.st_gid != getegid())
        return "is set-group-ID: the loader ignores LD_PRELOAD for it";
    return NULL;
}

static const char go_problem[] = "is a Go program: Go makes its own system calls, "
                                 "which the shim never sees";
static const char foreign_go_problem[] = "is a Go program: Go makes its own system "
                                         "calls, which the shim never sees";
static const char static_problem[] = "is statically linked: no dynamic loader reads "
                                     "LD_PRELOAD for it";
/* The same words for programs of the other word size (i386 on x86_64),
 * which the seccomp filter lets through: it knows only this build's
 * system calls. */
static const char foreign_static_problem[] = "is statically linked: no dynamic loader "
                                             "reads LD_PRELOAD for it";

/* Why an ELF file cannot be interposed, or NULL. Set-ID first (nothing
 * is preloaded at all), then Go: a Go program may well be dynamic (cgo
 * links libc), yet its net package connects with raw system calls, never
 * through libc's connect(). */
static const char *elf_problem(int fd, const char *path)
{
    struct elf elf;
    char interp[PATH_MAX];
    if (elf_open(fd, &elf) < 0)
        return NULL;
    const char *setuid = setuid_problem(fd);
    if (setuid)
        return setuid;
    int native = elf.is_64 == (sizeof(void *) == 8);
    if (has_go_section(&elf) || has_go_magic(&elf))
        return native ? go_problem : foreign_go_problem;
    if (elf_interpreter(&elf, interp) == 0 && !is_our_loader(path))
        return native ? static_problem : foreign_static_problem;
    return NULL;
}

/* Why the file at path cannot be interposed, or NULL; culprit gets the
 * file that has the problem: path itself, or the interpreter of a script
 * (Linux ignores set-ID bits on scripts, and runs their interpreter). */
static const char *file_problem(const char *path, int depth,
                                char culprit[PATH_MAX])
{
    char head[256];  /* the kernel reads no more of a #! line */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    ssize_t length = pread(fd, head, sizeof head - 1, 0);
    const char *problem = elf_problem(fd, path);
    close(fd);
    if (problem) {
        snprintf(culprit, PATH_MAX, "%s", path);
        return problem;
    }
    if (length < 3 || head[0] != '#' || head[1] != '!' || depth >= SCRIPT_DEPTH)
        return NULL;
    head[length] = '\0';
    char *interp = head + 2 + strspn(head + 2, " \t");
    interp[strcspn(interp, " \t\r\n")] = '\0';
    return *interp ? file_problem(interp, depth + 1, culprit) : NULL;
}

/* The file execvp will run: command itself when it holds a slash, else the
 * first regular file along $PATH that we may execute (execvp skips the
 * others), with execvp's own default when PATH is unset. */
static int find_command(const char *command, char path[PATH_MAX])
{
    char fallback[PATH_MAX];
    const char *search = getenv("PATH");
    if (strchr(command, '/')) {
        snprintf(path, PATH_MAX, "%s", command);
        return 0;
    }
    if (!search && confstr(_CS_PATH, fallback, sizeof fallback) > 0)
        search = fallback;
    for (const char *entry = search ? search : ""; *command;) {
        const char *end = strchrnul(entry, ':');
        struct stat st;
        int length = (int)(end - entry);
        snprintf(path, PATH_MAX, "%.*s%s%s", length, entry, length ? "/" : "",
                 command);  /* an empty entry is the current directory */
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && eaccess(path, X_OK) == 0)
            return 0;
        if (!*end)
            break;
        entry = end + 1;
    }
    return -1;
}

enum cli_reach cli_interpose_warning(const char *command, char *text,
                                     size_t textlen)
{
    char path[PATH_MAX], culprit[PATH_MAX];
    const char *problem = find_command(command, path) == 0
        ? file_problem(path, 0, culprit) : NULL;
    if (!problem)
        return CLI_REACHED;
    if (strcmp(culprit, path) == 0)
        snprintf(text, textlen, "%s %s", path, problem);
    else
        snprintf(text, textlen, "%s is a script for %s, which %s", path,
                 culprit, problem);
    if (problem == go_problem || problem == static_problem)
        return CLI_RAW_CALLS;
    return problem == foreign_go_problem || problem == foreign_static_problem
        ? CLI_FOREIGN : CLI_SET_ID;
}
