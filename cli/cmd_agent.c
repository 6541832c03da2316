/* bulkhead agent: runs bulkhead-agent (agent/), the fleet's per-host agent,
 * installed beside this command. It is a program of its own so that only
 * it links hiredis and libmicrohttpd; `set --fleet` and `check` use it
 * too (cli_agent_exec, cli_agent_run). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

/* bulkhead-agent beside /proc/self/exe: 0, or -1 once reported. */
static int agent_path(char *path, size_t pathlen)
{
    char self[PATH_MAX - 32];
    ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
    if (length < 0) {
        cli_error("agent: cannot find where this command is: %s", strerror(errno));
        return -1;
    }
    self[length] = '\0';
    char *slash = strrchr(self, '/');
    *slash = '\0';
    snprintf(path, pathlen, "%s/bulkhead-agent", self);
    if (access(path, X_OK) < 0) {
        cli_error("agent: %s: %s (make builds it beside bulkhead)", path, strerror(errno));
        return -1;
    }
    return 0;
}

int cli_agent_exec(char **argv)
{
    char path[PATH_MAX];
    if (agent_path(path, sizeof path) < 0)
        return CLI_FAILED;
    argv[0] = path;
    execv(path, argv);
    cli_error("agent: %s: %s", path, strerror(errno));
    return CLI_CANNOT_EXEC;
}

int cli_agent_run(char **argv)
{
    char path[PATH_MAX];
    if (agent_path(path, sizeof path) < 0)
        return CLI_FAILED;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        argv[0] = path;
        execv(path, argv);
        _exit(CLI_CANNOT_EXEC);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) < 0)
        return CLI_FAILED;
    return WIFEXITED(status) ? WEXITSTATUS(status) : CLI_FAILED;
}

const char *cli_fleet_state_name(enum bh_fleet_state state)
{
    switch (state) {
    case BH_FLEET_LEASED: return "leased";
    case BH_FLEET_LEARNING: return "learning";
    case BH_FLEET_KEPT: return "kept";
    case BH_FLEET_FALLBACK: return "fallback";
    case BH_FLEET_LAPSED: return "lapsed";
    }
    return "unknown";
}

static int agent_command(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            cli_print_help(&cli_agent_command);
            return CLI_OK;
        }
    return cli_agent_exec(argv);
}

const struct cli_command cli_agent_command = {
    .name = "agent",
    .synopsis = "bulkhead agent [-c rules.ini] [--metrics HOST:PORT] [-v]",
    .help =
        "Runs this host's fleet agent in the foreground (one per host; see\n"
        "agent/bulkhead-agent.service): every fleet_refresh_ms it leases this\n"
        "host's share of each compartment with fleet_limit from the Redis named\n"
        "by fleet = in [global] (with redis-sentinel://, the master its sentinels\n"
        "name, asked again after a failover), and makes it the host's live limit.\n"
        "Connects never wait on Redis: they take local permits as always. With\n"
        "--metrics and no fleet (or no fleet_limit compartment), it only serves\n"
        "the namespace's metrics and leases nothing. It refuses to start with a\n"
        "fleet_password_file others may read, in the line check gives.\n"
        "\n"
        "  -c FILE              the rules file (default: as the shim finds it)\n"
        "  --metrics HOST:PORT  serve Prometheus metrics at http://HOST:PORT/metrics\n"
        "                       (at most 1,024 connections; each must send its\n"
        "                       request header within 5 s; near the limit the oldest\n"
        "                       without one is closed)\n"
        "  -v                   log every limit it sets\n",
    .run = agent_command,
};
