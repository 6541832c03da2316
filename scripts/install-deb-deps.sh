#!/usr/bin/env bash
# Installs what `make deb` and `make deb-check` need, and only what is
# missing: the packaging tools, then the Build-Depends of debian/control
# (dpkg-checkbuilddeps first, `apt-get build-dep` of this tree only when it
# finds something missing). Safe to run again and again.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS=(dpkg-dev debhelper lintian pkgconf curl python3 groff-base man-db)

missing=()
for p in "${TOOLS[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
builddeps_met=1
if ((${#missing[@]} > 0)) || ! dpkg-checkbuilddeps 2>/dev/null; then
    builddeps_met=0
fi
((builddeps_met == 0)) || exit 0

if [[ $(id -u) -ne 0 ]]; then
    echo "install-deb-deps: missing: ${missing[*]:-} and/or the Build-Depends of debian/control" >&2
    echo "install-deb-deps: run as root, or: sudo apt-get build-dep ./ && sudo apt-get install ${TOOLS[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-deb-deps: installing ${missing[*]:-} and the Build-Depends" >&2
apt-get update -q
if ((${#missing[@]} > 0)); then
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
apt-get build-dep -y -q --no-install-recommends ./
