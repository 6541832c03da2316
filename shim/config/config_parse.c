/* Reads rules.ini with inih into a struct bh_config, reporting every problem
 * as one "PATH:LINE: ..." line.
 *
 * Debian's inih gives the handler no line number, and says nothing about a
 * section until it has a key. So inih reads through our own line reader,
 * which counts lines, notes each section header with its line, and notices
 * lines inih rejected: inih calls the handler for a key = value line before
 * it asks for the next line, so a key line that got no call was refused. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <ini.h>

#include "config/parser.h"
#include "libc/libc.h"

/* ---- inih's callbacks ---- */

static const struct key_spec *find_key(struct parser *p, const char *key)
{
    static const struct {
        const struct key_spec *keys;
        const size_t *count;
    } tables[] = {
        { bh_global_keys, &bh_global_keys_count },
        { bh_compartment_keys, &bh_compartment_keys_count },
        { bh_policy_keys, &bh_policy_keys_count },
        { bh_match_keys, &bh_match_keys_count },
    };
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
        for (size_t i = 0; i < *tables[t].count; i++)
            if (tables[t].keys[i].section == p->section.kind
                && strcmp(tables[t].keys[i].name, key) == 0)
                return &tables[t].keys[i];
    if (p->section.kind == SECTION_NONE)
        report(p, p->line, "%s: appears before any [section]", key);
    else
        report(p, p->line, "unknown key \"%s\" in [%s]", key, p->section.name);
    return NULL;
}

/* Keys a compartment may give more than once, each line adding one. */
static bool is_repeatable(enum key_id id)
{
    return id == KEY_MATCH || id == KEY_RESERVE || id == KEY_BYPASS;
}

/* Keys that mean nothing any more: taken any number of times, with any
 * value or none, so that no rules file is refused for them. */
static bool is_retired(enum key_id id)
{
    return id == KEY_WAIT_NONBLOCKING || id == KEY_NONBLOCKING_WAIT_MS;
}

/* Checks and stores one key; nonzero when it was fine, as inih expects. */
static int handle_key(void *user, const char *section_name, const char *key,
                      const char *value)
{
    struct parser *p = user;
    const struct key_spec *spec;
    int *first_line;

    (void)section_name;  /* the reader tracks sections, with their lines */
    p->key_handled = true;
    spec = find_key(p, key);
    if (!spec)
        return 0;
    if (is_retired(spec->id))
        return spec->apply(p, key, value) == 0;
    first_line = &p->section.key_lines[spec->id];
    if (*first_line && !is_repeatable(spec->id)) {
        report(p, p->line, "%s: already set at line %d", key, *first_line);
        return 0;
    }
    if (!*first_line)
        *first_line = p->line;
    if (p->section.kind == SECTION_GLOBAL && !p->global_key_lines[spec->id])
        p->global_key_lines[spec->id] = p->line;
    if (value[0] != '\0' && spec->apply(p, key, value) == 0)
        return 1;
    if (value[0] == '\0')
        report(p, p->line, "%s: missing value", key);
    p->section.key_bad[spec->id] = true;
    if (p->section.kind == SECTION_GLOBAL)
        p->global_key_bad[spec->id] = true;
    return 0;
}

/* Runs before the next line is read, so inih is done with this one (and
 * raw_line still holds it). */
static void finish_line(struct parser *p)
{
    if (p->expects_key && !p->key_handled) {
        const char *text = skip_space(p->raw_line);
        int length = (int)strcspn(text, "\r\n");
        report(p, p->line, "\"%.*s%s\" is not a key = value line, a [section] "
               "header or a comment", length > 40 ? 40 : length, text,
               length > 40 ? "..." : "");
    }
    p->expects_key = false;
    p->key_handled = false;
}

/* inih would split a long line and parse the rest as a line of its own, and
 * would stop reading a line at a NUL byte. */
static bool fits_inih(struct parser *p, ssize_t length, int size)
{
    if (length >= size) {
        report(p, p->line, "line too long (the limit is %d characters)",
               size - 2);
        return false;
    }
    if (strlen(p->raw_line) != (size_t)length) {
        report(p, p->line, "line contains a NUL byte");
        return false;
    }
    return true;
}

static char *read_line(char *buffer, int size, void *stream)
{
    struct parser *p = stream;
    const char *start;
    ssize_t length;

    finish_line(p);
    length = getline(&p->raw_line, &p->raw_capacity, p->file);
    if (length < 0) {
        p->read_errno = ferror(p->file) ? errno : 0;
        return NULL;
    }
    p->bytes_read += length;
    if (p->bytes_read > RULES_MAX_BYTES) {
        report(p, 0, "grew past %d MiB while being read", RULES_MAX_BYTES >> 20);
        return NULL;
    }
    p->line++;
    start = p->raw_line;
    if (p->line == 1 && strncmp(start, "\xEF\xBB\xBF", 3) == 0)
        start += 3;  /* a UTF-8 byte order mark, which inih skips too */
    start = skip_space(start);
    if (*start == '[')
        open_section(p, start);
    if (!fits_inih(p, length, size)) {
        strcpy(buffer, "\n");  /* already reported; inih sees a blank */
        return buffer;
    }
    p->expects_key = *start != '\0' && !strchr("[;#", *start);
    memcpy(buffer, p->raw_line, (size_t)length + 1);
    return buffer;
}

/* ---- the API ---- */

static void inherit_global(struct bh_config *config)
{
    for (int i = 0; i < config->compartment_count; i++) {
        if (config->compartments[i].hold_wait_ms < 0)
            config->compartments[i].hold_wait_ms = config->hold_wait_ms;
        if (config->compartments[i].mode < 0)
            config->compartments[i].mode = config->mode;
    }
}

static void parse_file(struct parser *p)
{
    int inih_error_line;

    /* inih's settings are globals, hidden inside our object: set them
     * every time rather than trust a default. */
    ini_allow_multiline = false;  /* an indented stray line is an error */
    ini_stop_on_first_error = false;
    ini_allow_no_value = false;
    ini_max_line = LINE_BUFFER_SIZE;
    inih_error_line = ini_parse_stream(read_line, p, handle_key, p);
    finish_line(p);
    close_section(p);
    check_fleet(p);
    inherit_global(p->config);
    if (p->read_errno)
        report(p, 0, "cannot read: %s", strerror(p->read_errno));
    /* Only if the reader's idea of a line ever differs from inih's. */
    if (inih_error_line > 0 && !was_reported(p, inih_error_line))
        report(p, inih_error_line, "syntax error");
}

static const char *file_kind(mode_t mode)
{
    return S_ISFIFO(mode) ? "a FIFO" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket"
         : S_ISDIR(mode) ? "a directory" : "not a regular file";
}

/* The rules must be a regular file of at most RULES_MAX_BYTES, opened
 * without blocking: a FIFO would stop every program before main, and a
 * device such as /dev/zero never ends. */
static FILE *open_rules(struct parser *p, const char *path)
{
    int fd = libc_open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0);
    if (fd < 0) {
        report(p, 0, "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct stat info;
    FILE *file = NULL;
    if (fstat(fd, &info) < 0)
        report(p, 0, "cannot stat: %s", strerror(errno));
    else if (!S_ISREG(info.st_mode))
        report(p, 0, "is %s, not a regular file", file_kind(info.st_mode));
    else if (info.st_size > RULES_MAX_BYTES)
        report(p, 0, "is %lld bytes; a rules file may be at most %d MiB",
               (long long)info.st_size, RULES_MAX_BYTES >> 20);
    else if (!(file = fdopen(fd, "r")))
        report(p, 0, "cannot read: %s", strerror(errno));
    if (!file)
        libc_close(fd);
    return file;
}

static void set_defaults(struct bh_config *config)
{
    memset(config, 0, sizeof *config);
    config->log_level = BH_LOG_WARN;
    snprintf(config->namespace_name, BH_NAME_MAX, "%s", "default");
    config->fleet_refresh_ms = DEFAULT_FLEET_REFRESH_MS;
    config->fleet_lease_ms = DEFAULT_FLEET_LEASE_MS;
    config->fleet_fallback = -1;
    config->fleet_fallback_ms = DEFAULT_FLEET_FALLBACK_MS;
}

int bh_config_load(const char *path, struct bh_config *config,
                   bh_config_error_fn on_error, void *ctx)
{
    struct parser p = {
        .path = path, .config = config, .on_error = on_error, .ctx = ctx,
    };

    set_defaults(config);
    config->path = strdup(path);
    if (!config->path) {
        report_out_of_memory(&p);
        return p.error_count;
    }
    p.file = open_rules(&p, path);
    if (!p.file)
        return p.error_count;
    parse_file(&p);
    libc_fclose(p.file);
    free(p.raw_line);
    free(p.error_lines);
    return p.error_count;
}

void bh_config_free(struct bh_config *config)
{
    for (int i = 0; i < config->rule_count; i++) {
        free(config->rules[i].hostname);
        free(config->rules[i].text);
    }
    free(config->rules);
    free(config->compartments);
    free(config->log_file);
    free(config->syslog_socket);
    free(config->fleet_url);
    free(config->fleet_password_file);
    free(config->fleet_sentinel_password_file);
    free(config->retired);
    free(config->path);
    memset(config, 0, sizeof *config);
}
