# shellcheck shell=bash
# The cli layer for tests/cli.bats, on top of common.bash (load that first):
# python clients under the shim that report what they got and then hold,
# stat's columns, and a strict Prometheus format check. Setup, teardown,
# servers, polling and keys are common.bash's.

# cli_setup: bh_setup, then the client program.
cli_setup() {
    bh_setup
    write_client
}

# rules.ini with one compartment "c" on 127.0.0.1:$SERVER_PORT (tests that
# start no server set it to a port nothing listens on).
# c_rules FILE LIMIT [WAIT_MS]
c_rules() {
    write_rules "$1" <<EOF
[global]
namespace = $NS

[c]
limit = $2
wait_ms = ${3:-0}
match = 127.0.0.1:$SERVER_PORT
EOF
}

# The client: a python program under the shim. Modes:
#   hold N   opens N connections one after another, keeping those that get
#            through; writes "ok=K refused=R ERRNO..." to OUT; then holds.
#   retry    connects until one gets through, rewriting "refused=R" to OUT
#            after each refusal, then "ok=1 refused=R"; then holds.
write_client() {
    CLIENT="$T/client.py"
    cat >"$CLIENT" <<'EOF'
import errno, os, socket, sys, time

port, out, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]

def report(text):
    with open(out + ".tmp", "w") as f:
        f.write(text + "\n")
    os.rename(out + ".tmp", out)

held, refused = [], []
def attempt():
    try:
        held.append(socket.create_connection(("127.0.0.1", port)))
        return True
    except OSError as e:
        refused.append(errno.errorcode.get(e.errno, str(e.errno)))
        return False

if mode == "hold":
    for _ in range(int(sys.argv[4])):
        attempt()
    report("ok=%d refused=%d %s" % (len(held), len(refused), " ".join(refused)))
else:
    while not attempt():
        report("refused=%d" % len(refused))
        time.sleep(0.02)
    report("ok=1 refused=%d" % len(refused))
time.sleep(600)
EOF
}

# start_client NAME MODE [N] [RULES_FILE]: the client under the shim, in the
# background; its report goes to $T/NAME.out, its pid to $T/NAME.pid.
start_client() {
    local name=$1 mode=$2 count=${3:-1} rules=${4:-$RULES}
    rm -f "$T/$name.out"
    LD_PRELOAD="$SHIM" BULKHEAD_CONFIG="$rules" \
        python3 "$CLIENT" "$SERVER_PORT" "$T/$name.out" "$mode" "$count" \
        >"$T/$name.log" 2>&1 3>&- &
    echo $! >"$T/$name.pid"
    track_pid $!
}

# Waits for client NAME's final report and prints it.
client_report() {
    wait_for grep -qs '^ok=' "$T/$1.out"
    cat "$T/$1.out"
}

# Kills client NAME and waits until it is gone, so that the kernel gave its
# permits back (SEM_UNDO) and closed its connections.
stop_client() {
    local pid
    pid="$(cat "$T/$1.pid")"
    kill -TERM "$pid"
    wait_for pid_done "$pid" || fail "client $1 ($pid) did not exit on SIGTERM"
    wait "$pid" 2>/dev/null || true
}

# One column of `stat`'s table for compartment NAME.
# stat_column NAME COLUMN [stat options]
stat_column() {
    local name=$1 column=$2
    shift 2
    # The permits table only: it ends at the first empty line.
    "$BULKHEAD" stat "$@" | awk -v name="$name" -v column="$column" '
        NR > 1 && NF == 0 { exit }
        NR == 2 { for (i = 1; i <= NF; i++) index_of[$i] = i }
        NR > 2 && $1 == name { print $(index_of[column]) }'
}

# True when stat's COLUMN for compartment NAME is VALUE; for wait_for.
# stat_column_is NAME COLUMN VALUE [stat options]
stat_column_is() {
    local name=$1 column=$2 value=$3
    shift 3
    [ "$(stat_column "$name" "$column" "$@")" = "$value" ]
}

# A strict check of the Prometheus text exposition format (0.0.4), on FILE.
# Prints every violation; fails when there is one.
check_prometheus() {
    python3 - "$1" <<'EOF'
import re, sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(r"^(%s)(?:\{((?:%s)(?:,%s)*)?,?\})? (\S+)(?: -?\d+)?$"
                    % (NAME, LABEL, LABEL))
VALUE = re.compile(r"^(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]Inf|NaN)$")
TYPES = {"counter", "gauge", "summary", "histogram", "untyped"}
SUFFIXES = {"summary": ("_sum", "_count"), "histogram": ("_bucket", "_sum", "_count")}

problems, helps, types, done, series = [], {}, {}, set(), set()
current = None

def family_of(name):
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)]
        if name.endswith(suffix) and suffix in SUFFIXES.get(types.get(base), ()):
            return base
    return name

# Histograms: per series, le ascending and counts cumulative up to +Inf,
# which equals _count.
buckets, counts = {}, {}
def note_histogram(n, name, labels, value):
    le = re.search(r'(?:^|,)le="([^"]*)"', labels or "")
    key = re.sub(r'(?:^|,)le="[^"]*"', "", labels or "")
    if name.endswith("_bucket"):
        if not le:
            problems.append("line %d: bucket without le" % n)
            return
        bound = float("inf") if le.group(1) == "+Inf" else float(le.group(1))
        seen = buckets.setdefault((name, key), [])
        if seen and (bound <= seen[-1][0] or float(value) < seen[-1][1]):
            problems.append("line %d: buckets not ascending and cumulative" % n)
        seen.append((bound, float(value)))
    elif name.endswith("_count"):
        counts[(name[: -len("_count")] + "_bucket", key)] = (n, float(value))

def start(family, n):
    global current
    if family != current:
        if family in done:
            problems.append("line %d: %s is not grouped in one block" % (n, family))
        if current:
            done.add(current)
        current = family

for n, line in enumerate(open(sys.argv[1]).read().split("\n")[:-1], 1):
    if line.startswith("# HELP ") or line.startswith("# TYPE "):
        words = line.split(" ", 3)
        if len(words) != 4 or not re.fullmatch(NAME, words[2]) or not words[3]:
            problems.append("line %d: malformed: %r" % (n, line))
            continue
        kind, name, text = words[1], words[2], words[3]
        table = helps if kind == "HELP" else types
        if name in table:
            problems.append("line %d: second %s for %s" % (n, kind, name))
        if kind == "TYPE" and text not in TYPES:
            problems.append("line %d: TYPE %r" % (n, text))
        if kind == "TYPE" and name.endswith("_total") and text != "counter":
            problems.append("line %d: %s ends in _total but is a %s" % (n, name, text))
        table[name] = text
        start(name, n)
        continue
    match = SAMPLE.match(line)
    if not match:
        problems.append("line %d: not a sample: %r" % (n, line))
        continue
    name, labels, value = match.groups()
    family = family_of(name)
    start(family, n)
    if family not in helps or family not in types:
        problems.append("line %d: %s has no HELP and TYPE before it" % (n, name))
    if not VALUE.match(value):
        problems.append("line %d: value %r is not a number" % (n, value))
    elif types.get(family) == "counter" and float(value) < 0:
        problems.append("line %d: counter %s is negative" % (n, name))
    names = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', labels or "")
    if len(names) != len(set(names)):
        problems.append("line %d: a label twice" % n)
    if (name, labels) in series:
        problems.append("line %d: series %s{%s} twice" % (n, name, labels))
    series.add((name, labels))
    if types.get(family) == "histogram" and VALUE.match(value):
        note_histogram(n, name, labels, value)
for (name, key), (n, value) in counts.items():
    seen = buckets.get((name, key), [])
    if not seen or seen[-1][0] != float("inf") or seen[-1][1] != value:
        problems.append("line %d: _count is not the +Inf bucket" % n)
for name in set(helps) ^ set(types):
    problems.append("%s has only one of HELP and TYPE" % name)
print("\n".join(problems))
sys.exit(1 if problems else 0)
EOF
}
