#!/usr/bin/env bash
# Installs what building and testing bulkhead needs, and only what is
# missing: dpkg-query first, `apt-get update` only when something has to be
# installed. Safe to run again and again (make deps/test/demo all call it).
set -euo pipefail

PACKAGES=(
    build-essential uthash-dev libinih-dev libhiredis-dev libmicrohttpd-dev
    libcmocka-dev clang libclang-rt-14-dev
    bats bats-support bats-assert
    curl wget python3 python3-requests python3-yaml python3-aiohttp perl nodejs netcat-openbsd haproxy nginx tcpdump redis-tools redis-server redis-sentinel socat golang-go busybox-static prometheus
    strace valgrind util-linux iproute2 procps man-db groff-base
)

missing=()
for p in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
    exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run as root, or: sudo apt-get install ${missing[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}" >&2
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
