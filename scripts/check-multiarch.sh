#!/usr/bin/env bash
# Checks by hand (not in make test or CI: it downloads an i386 cross
# compiler and libc, about 100 MB) that `bulkhead run` gives 32- and 64-bit
# programs each their own shim and that they share one namespace's permits:
#   - in an overlay of / with a tmpfs upper, in private mount and IPC
#     namespaces (nothing reaches the host), it adds the i386 architecture,
#     installs gcc-i686-linux-gnu, unpacks libc6:i386 (its loader; by hand,
#     since its version may trail amd64's security updates, which
#     Multi-Arch: same would refuse) and cross-builds the shim into
#     /usr/lib/i386-linux-gnu/bulkhead/, where libbulkhead:i386 puts it;
#   - installs make deb's amd64 libbulkhead and bulkhead;
#   - checks that the shared state has one layout on both (sizes, offsets);
#   - under /usr/bin/bulkhead run, limit 2 on a loopback server: a 32-bit
#     and a 64-bit holder each map their own shim and both connect; a third
#     (32-bit) and a fourth (64-bit) are refused; the server saw 2.
# Needs root and make deb's packages in build/deb/.
set -euo pipefail
cd "$(dirname "$0")/.."

[[ $(id -u) -eq 0 ]] || { echo "check-multiarch: needs root" >&2; exit 1; }
if [[ "$(dpkg --print-architecture)" != amd64 ]]; then
    echo "check-multiarch: written for amd64 with i386 beside it" >&2
    exit 1
fi
if [[ -z "${BH_MULTIARCH_INSIDE:-}" ]]; then
    export BH_MULTIARCH_INSIDE=1
    exec unshare -m -i --propagation private "$0" "$@"
fi

source scripts/overlay-root.bash
overlay_root size=8g
mkdir -p "$OVERLAY_ROOT/tmp/src"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$OVERLAY_ROOT/tmp/src"
cp build/deb/libbulkhead_*_amd64.deb build/deb/bulkhead_*_amd64.deb "$OVERLAY_ROOT/tmp/"

chroot "$OVERLAY_ROOT" /bin/bash -euo pipefail -c '
fail() { echo "check-multiarch: $*" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
cd /tmp/src
dpkg --add-architecture i386
# An index that fails (a mirror mid-sync) is reported; what is there is used.
apt-get update -q >/tmp/update.log 2>&1 || grep "^[EW]:" /tmp/update.log || true
apt-get install -y -q --no-install-recommends gcc-i686-linux-gnu \
    libc6-dev-i386-cross linux-libc-dev-i386-cross >/tmp/install.log 2>&1 ||
    { tail -20 /tmp/install.log; fail "cannot install the i386 cross compiler"; }
(cd /tmp && apt-get download -q libc6:i386 libinih-dev:i386) >/tmp/download.log 2>&1 ||
    { tail /tmp/download.log; fail "cannot download libc6:i386, libinih-dev:i386"; }
dpkg-deb --fsys-tarfile /tmp/libc6_*_i386.deb | tar -x -C / --keep-directory-symlink
dpkg-deb -x /tmp/libinih-dev_*_i386.deb /tmp/inih32
make -s CC=i686-linux-gnu-gcc MULTIARCH=i386-linux-gnu BUILD=/tmp/b32 \
    LDFLAGS=-L/tmp/inih32/usr/lib/i386-linux-gnu /tmp/b32/libbulkhead.so 2>/tmp/b32.log ||
    { cat /tmp/b32.log; fail "the i386 shim does not build"; }
install -D -m 0644 /tmp/b32/libbulkhead.so /usr/lib/i386-linux-gnu/bulkhead/libbulkhead.so
dpkg -i /tmp/libbulkhead_*_amd64.deb /tmp/bulkhead_*_amd64.deb >/tmp/dpkg.log 2>&1 ||
    { cat /tmp/dpkg.log; fail "dpkg -i failed"; }

cat >/tmp/layout.c <<C
#include <stddef.h>
#include <stdio.h>
#include "permits/permits.h"
#include "permits/layout.h"  /* the layout itself, as the permits unit tests read it */
int main(void)
{
    printf("state %zu, compartment %zu, holder %zu, holders at %zu, sockets at %zu, windows at %zu\n",
           sizeof(struct bh_shared_state), sizeof(struct bh_shared_compartment),
           sizeof(struct bh_holder), offsetof(struct bh_shared_state, holders),
           offsetof(struct bh_shared_state, sockets), offsetof(struct bh_shared_state, windows));
    return 0;
}
C
cc32() { i686-linux-gnu-gcc -Wl,--dynamic-linker=/lib/ld-linux.so.2 "$@"; }
flags=(-std=gnu11 -D_GNU_SOURCE -Ishim -O2)
cc "${flags[@]}" -o /tmp/layout64 /tmp/layout.c
cc32 "${flags[@]}" -o /tmp/layout32 /tmp/layout.c 2>/dev/null
l64=$(/tmp/layout64) l32=$(/tmp/layout32)
[[ "$l32" == "$l64" ]] || fail "shared layout differs: amd64 $l64; i386 $l32"
echo "ok - one shared layout on amd64 and i386: $l64"

cc "${flags[@]}" -o /tmp/hold64 tests/clients/connect_hold.c
cc32 "${flags[@]}" -o /tmp/hold32 tests/clients/connect_hold.c
python3 tests/server/holdserver.py --host 127.0.0.1 --port 0 --hold-ms -1 \
    --ready /tmp/ready --stats /tmp/stats >/tmp/server.log 2>&1 &
server=$!
for _ in $(seq 200); do [[ -s /tmp/ready ]] && break; sleep 0.05; done
port=$(sed -n 1p /tmp/ready) control=$(sed -n 2p /tmp/ready)
printf "[global]\nnamespace = multiarch\n[web]\nlimit = 2\nwait_ms = 0\nmatch = 127.0.0.1:%s\n" \
    "$port" >/tmp/rules.ini
run() { /usr/bin/bulkhead run -c /tmp/rules.ini -- "$@"; }
# Not through run(): $! must be the process that execs the holder.
/usr/bin/bulkhead run -c /tmp/rules.ini -- /tmp/hold32 127.0.0.1 "$port" 60000 \
    >/tmp/h32.out 2>&1 &
h32=$!
/usr/bin/bulkhead run -c /tmp/rules.ini -- /tmp/hold64 127.0.0.1 "$port" 60000 \
    >/tmp/h64.out 2>&1 &
h64=$!
for _ in $(seq 200); do [[ -s /tmp/h32.out && -s /tmp/h64.out ]] && break; sleep 0.05; done
for bits in 32 64; do
    pid=h$bits; pid=${!pid}
    [[ $(head -n 1 /tmp/h$bits.out) == ok ]] || fail "the $bits-bit holder: $(cat /tmp/h$bits.out)"
    triplet=$([[ $bits == 32 ]] && echo i386-linux-gnu || echo x86_64-linux-gnu)
    grep -q "/usr/lib/$triplet/bulkhead/libbulkhead.so" /proc/$pid/maps ||
        fail "the $bits-bit holder has not mapped /usr/lib/$triplet/bulkhead/libbulkhead.so"
    echo "ok - $bits-bit holder connected, with /usr/lib/$triplet/bulkhead/libbulkhead.so"
done
rc32=0 rc64=0
run /tmp/hold32 127.0.0.1 "$port" 0 >/tmp/r32.out 2>&1 || rc32=$?
run /tmp/hold64 127.0.0.1 "$port" 0 >/tmp/r64.out 2>&1 || rc64=$?
grep -qx ECONNREFUSED /tmp/r32.out && ((rc32 == 1)) || fail "32-bit third: $(cat /tmp/r32.out)"
grep -qx ECONNREFUSED /tmp/r64.out && ((rc64 == 1)) || fail "64-bit fourth: $(cat /tmp/r64.out)"
exec {fd}<>"/dev/tcp/127.0.0.1/$control"
read -r -t 10 stats <&"$fd"
exec {fd}<&-
kill "$h32" "$h64" "$server"
wait || true
/usr/bin/bulkhead reset --force -n multiarch >/dev/null 2>&1 || true
[[ "$stats" == "max=2 total=2 open=2" ]] || fail "the server saw $stats"
echo "ok - a 32-bit and a 64-bit third connect refused; the server saw $stats"
'
