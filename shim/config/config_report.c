/* The parser's ground floor: reporting a problem as one "PATH:LINE: ..."
 * line, and reading names and whole numbers. Every key file calls these;
 * they call nothing of the parser's. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/parser.h"

static void remember_error_line(struct parser *p, int line)
{
    if (p->error_line_count == p->error_line_capacity) {
        int capacity = p->error_line_capacity ? 2 * p->error_line_capacity : 16;
        int *grown = realloc(p->error_lines, capacity * sizeof *grown);
        if (!grown)
            return;  /* costs at most a second report for one line */
        p->error_lines = grown;
        p->error_line_capacity = capacity;
    }
    p->error_lines[p->error_line_count++] = line;
}

bool was_reported(const struct parser *p, int line)
{
    for (int i = 0; i < p->error_line_count; i++)
        if (p->error_lines[i] == line)
            return true;
    return false;
}

/* One error: "PATH:LINE: message", or "PATH: message" when line is 0. */
__attribute__((format(printf, 3, 4)))
void report(struct parser *p, int line, const char *format, ...)
{
    char message[MESSAGE_SIZE];
    int used = line > 0
        ? snprintf(message, sizeof message, "%s:%d: ", p->path, line)
        : snprintf(message, sizeof message, "%s: ", p->path);
    va_list args;

    va_start(args, format);
    if (used >= 0 && (size_t)used < sizeof message)
        vsnprintf(message + used, sizeof message - used, format, args);
    va_end(args);
    p->error_count++;
    if (line > 0)
        remember_error_line(p, line);
    if (p->on_error)
        p->on_error(p->ctx, message);
}

void report_out_of_memory(struct parser *p)
{
    report(p, p->line, "out of memory");
}

/* ASCII only: the shim runs under whatever locale the host program set. */
bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
        || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

char to_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* The same characters inih strips (isspace in the C locale). */
const char *skip_space(const char *text)
{
    while (*text && strchr(" \t\n\v\f\r", *text))
        text++;
    return text;
}

/* Compartment and namespace names. */
bool is_valid_name(const char *name, size_t length)
{
    if (length == 0 || length >= BH_NAME_MAX)
        return false;
    for (size_t i = 0; i < length; i++)
        if (!is_name_char(name[i]))
            return false;
    return true;
}


/* Plain decimal digits only: strtol alone would also take " +5" or "5x". */
enum number_status parse_whole(const char *text, long max, long *number)
{
    char *end;

    if (!is_digit(text[0]))
        return NUMBER_NOT_WHOLE;
    errno = 0;
    *number = strtol(text, &end, 10);
    if (*end != '\0')
        return NUMBER_NOT_WHOLE;
    return errno == ERANGE || *number > max ? NUMBER_TOO_BIG : NUMBER_OK;
}

int set_number(struct parser *p, const char *key, const char *value,
                      int min, int max, int *field)
{
    long number;
    enum number_status status = parse_whole(value, max, &number);

    if (status == NUMBER_OK && number >= min) {
        *field = (int)number;
        return 0;
    }
    if (status == NUMBER_NOT_WHOLE)
        report(p, p->line, "%s: \"%s\" is not a whole number", key, value);
    else
        report(p, p->line, "%s: %s is out of range (%d to %d)", key, value,
               min, max);
    return -1;
}

int set_yes_no(struct parser *p, const char *key, const char *value, int *out)
{
    if (strcmp(value, "yes") == 0 || strcmp(value, "no") == 0) {
        *out = strcmp(value, "yes") == 0;
        return 0;
    }
    report(p, p->line, "%s: \"%s\" is not one of yes, no", key, value);
    return -1;
}
