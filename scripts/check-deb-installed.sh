#!/usr/bin/env bash
# Part of make deb-check (scripts/check-deb.sh runs it as
#   unshare -m -i --propagation private scripts/check-deb-installed.sh DEB...):
# installs the packages with dpkg -i into an overlay of / whose changes
# live in a tmpfs, in private mount and IPC namespaces, so that nothing of
# it reaches the host: its files, its dpkg database, its new user, its
# SysV objects all go when this process ends. Then, as a real install:
#   - postinst made the system user bulkhead; rules.ini is a conffile; the
#     unit is disabled;
#   - the agent runs as bulkhead (not root) and serves /metrics;
#   - the autopkgtest (debian/tests/caps-curl) passes against /usr/bin/bulkhead;
#   - purge removes /etc/bulkhead.
# Needs root. Prints what it saw; exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/overlay-root.bash
overlay_root
mkdir "$OVERLAY_ROOT/tmp/debs" "$OVERLAY_ROOT/tmp/src"
cp "$@" "$OVERLAY_ROOT/tmp/debs/"
cp -a debian tests "$OVERLAY_ROOT/tmp/src/"

chroot "$OVERLAY_ROOT" /bin/bash -euo pipefail -c '
fail() { echo "installed: $*" >&2; exit 1; }
dpkg -i /tmp/debs/*.deb >/tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; fail "dpkg -i failed"; }

user=$(getent passwd bulkhead) || fail "no user bulkhead after postinst"
[[ $(id -u bulkhead) -ne 0 ]] || fail "bulkhead is root"
echo "user: $user"
dpkg-query -W -f="\${Conffiles}\n" bulkhead-agent | grep -q "^ /etc/bulkhead/rules.ini " ||
    fail "/etc/bulkhead/rules.ini is not a conffile"
state=$(systemctl is-enabled bulkhead-agent 2>/dev/null || true)
[[ "$state" == disabled ]] || fail "the unit is \"$state\", not disabled"
echo "unit: $state; conffile: /etc/bulkhead/rules.ini"

# The agent as the unit runs it (User=bulkhead), serving metrics only.
port=$(python3 -c "import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])")
setpriv --reuid=bulkhead --regid=bulkhead --clear-groups \
    /usr/bin/bulkhead-agent run -c /etc/bulkhead/rules.ini --metrics 127.0.0.1:$port \
    2>/tmp/agent.log &
agent=$!
for _ in $(seq 200); do
    curl -sf -o /tmp/metrics "http://127.0.0.1:$port/metrics" && break
    sleep 0.05
done
kill "$agent"; wait "$agent" || true
grep -q "^# TYPE bulkhead_permits_limit gauge" /tmp/metrics ||
    { cat /tmp/agent.log; fail "the agent served no metrics"; }
echo "agent: served /metrics as user bulkhead"

cd /tmp/src && debian/tests/caps-curl

dpkg --purge bulkhead-agent bulkhead libbulkhead >/tmp/purge.log 2>&1 ||
    { cat /tmp/purge.log; fail "purge failed"; }
[[ ! -e /etc/bulkhead ]] || fail "/etc/bulkhead left after purge"
echo "purge: /etc/bulkhead gone"
'
