#!/usr/bin/env bash
# make deb-check: checks the packages that make deb left in build/deb/.
#   - lintian: no error and no warning (overrides say why in debian/);
#   - dpkg -x of each holds its files where the packages promise them,
#     with the Multi-Arch fields, the conffile and the unit as promised;
#   - the unpacked binaries carry the hardening flags (RELRO, BIND_NOW,
#     stack protector, fortified calls);
#   - the unpacked bulkhead checks rules.ini.example and the shipped rules;
#   - the unpacked bulkhead run preloads the unpacked shim through $LIB,
#     and it caps curl (debian/tests/caps-curl, the autopkgtest);
#   - every man page renders with no warning (groff -ww, man -l);
#   - as root: installed with dpkg -i into an overlay of / in private
#     namespaces (scripts/check-deb-installed.sh), the postinst's user, the
#     disabled unit, the agent as that user, the autopkgtest, purge.
# Ends with "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."

out=build/deb
changes=$(ls "$out"/bulkhead_*.changes 2>/dev/null | tail -n 1 || true)
if [[ -z "$changes" ]]; then
    echo "check-deb: no $out/bulkhead_*.changes: run make deb first" >&2
    exit 1
fi
scripts/install-deb-deps.sh

triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
version=$(sed -n 's/^Version: //p' "$changes")
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0

# check NAME CMD...: one line per check; its output only when it fails.
check() {
    local name=$1
    shift
    if "$@" >"$work/out" 2>&1; then
        echo "ok - $name"
        passed=$((passed + 1))
    else
        echo "not ok - $name"
        sed 's/^/#   /' "$work/out"
        failed=$((failed + 1))
    fi
}

deb() { echo "$out/${1}_${version}_${arch}.deb"; }

lintian_clean() {
    # --fail-on makes warnings fail too; the tags are printed either way.
    lintian --fail-on error,warning --display-info --tag-display-limit 0 "$changes"
}

# has_files PACKAGE PATH...: dpkg -x of PACKAGE alone holds each PATH.
has_files() {
    local package=$1 root="$work/only-$1" path
    shift
    rm -rf "$root"
    dpkg-deb -x "$(deb "$package")" "$root"
    for path in "$@"; do
        [[ -e "$root/$path" ]] || { echo "$package: no /$path"; return 1; }
    done
}

field_is() {
    local value
    value=$(dpkg-deb -f "$(deb "$1")" "$2")
    [[ "$value" == "$3" ]] || { echo "$1: $2 is '$value', not '$3'"; return 1; }
}

agent_unit_and_user() {
    local control="$work/agent-control" unit
    dpkg-deb -e "$(deb bulkhead-agent)" "$control"
    grep -qx /etc/bulkhead/rules.ini "$control/conffiles" ||
        { echo "rules.ini is not a conffile"; return 1; }
    grep -q 'adduser --system' "$control/postinst" ||
        { echo "postinst creates no system user"; return 1; }
    # Installed, not enabled: dh_installsystemd --no-enable guards its
    # enable with debian-installed (only a unit the admin had enabled is
    # enabled again on upgrade); the default snippet enables new installs.
    grep -q "deb-systemd-helper debian-installed 'bulkhead-agent.service'" \
        "$control/postinst" || { echo "postinst enables the unit"; return 1; }
    ! grep -q "deb-systemd-invoke start" "$control/postinst" ||
        { echo "postinst starts the unit"; return 1; }
    unit=$(find "$work/all" -name bulkhead-agent.service)
    grep -qx 'User=bulkhead' "$unit" || { echo "$unit: not User=bulkhead"; return 1; }
    grep -q '^ExecStart=/usr/bin/bulkhead-agent ' "$unit" ||
        { echo "$unit: ExecStart is not /usr/bin/bulkhead-agent"; return 1; }
}

# hardened FILE: RELRO, BIND_NOW, the stack protector and fortified calls.
hardened() {
    local file="$work/all/$1" headers dynamic symbols
    # Whole outputs first: grep -q stopping early would make readelf die of
    # SIGPIPE, which pipefail counts as a failure.
    headers=$(readelf -lW "$file") dynamic=$(readelf -dW "$file")
    symbols=$(readelf -W --dyn-syms "$file")
    grep -q GNU_RELRO <<<"$headers" || { echo "$1: no RELRO"; return 1; }
    grep -Eq 'BIND_NOW|FLAGS.*NOW' <<<"$dynamic" || { echo "$1: no BIND_NOW"; return 1; }
    grep -q ' UND __stack_chk_fail' <<<"$symbols" || { echo "$1: no stack protector"; return 1; }
    grep -Eq ' UND __[a-z_]+_chk' <<<"$symbols" || { echo "$1: no fortified call"; return 1; }
}

rules_valid() {
    "$work/all/usr/bin/bulkhead" check "$work/all/$1"
}

# The unpacked command preloads PREFIX/$LIB/bulkhead/libbulkhead.so with
# the token left in; the loader maps the unpacked shim for it.
preloads_through_lib() {
    local seen
    seen=$("$work/all/usr/bin/bulkhead" run -c "$work/all/etc/bulkhead/rules.ini" -- \
        sh -c 'printf "%s\n" "$LD_PRELOAD"; cat /proc/self/maps')
    grep -qxF "$work/all/usr/\$LIB/bulkhead/libbulkhead.so" <<<"$seen" ||
        { echo "LD_PRELOAD: ${seen%%$'\n'*}"; return 1; }
    grep -qF "$work/all/usr/lib/$triplet/bulkhead/libbulkhead.so" <<<"$seen" ||
        { echo "the unpacked shim is not mapped"; return 1; }
}

man_pages_render() {
    local page status=0
    for page in $(find "$work/all/usr/share/man" -name '*.gz' | sort); do
        if [[ -n "$(zcat "$page" | groff -ww -z -man 2>&1)" ]]; then
            echo "$page: groff -ww:"; zcat "$page" | groff -ww -z -man 2>&1; status=1
        fi
        if [[ -n "$(MANWIDTH=80 MANPAGER=cat man -l "$page" 2>&1 >/dev/null)" ]]; then
            echo "$page: man -l:"; MANWIDTH=80 MANPAGER=cat man -l "$page" 2>&1 >/dev/null; status=1
        fi
    done
    [[ -n "${page:-}" ]] || { echo "no man page"; return 1; }
    return $status
}

mkdir -p "$work/all"
for p in libbulkhead bulkhead bulkhead-agent; do
    dpkg-deb -x "$(deb "$p")" "$work/all"
done

check "lintian: no error, no warning" lintian_clean
check "libbulkhead: the shim in /usr/lib/$triplet/bulkhead/, libbulkhead(7)" \
    has_files libbulkhead "usr/lib/$triplet/bulkhead/libbulkhead.so" \
    usr/share/man/man7/libbulkhead.7.gz
check "libbulkhead: Multi-Arch: same" field_is libbulkhead Multi-Arch same
check "bulkhead: the command, bulkhead(1), bulkhead.ini(5), rules.ini.example" \
    has_files bulkhead usr/bin/bulkhead usr/share/man/man1/bulkhead.1.gz \
    usr/share/man/man5/bulkhead.ini.5.gz \
    usr/share/doc/bulkhead/examples/rules.ini.example
check "bulkhead: Multi-Arch: foreign" field_is bulkhead Multi-Arch foreign
check "bulkhead-agent: the agent, bulkhead-agent(8), rules.ini, the alerting rules and dashboard" \
    has_files bulkhead-agent usr/bin/bulkhead-agent usr/share/man/man8/bulkhead-agent.8.gz \
    etc/bulkhead/rules.ini usr/share/bulkhead-agent/monitoring/bulkhead.rules.yml \
    usr/share/bulkhead-agent/monitoring/bulkhead.rules.test.yml \
    usr/share/bulkhead-agent/monitoring/bulkhead.dashboard.json
check "bulkhead-agent: conffile, system user, unit installed as User=bulkhead, not enabled" \
    agent_unit_and_user
for f in "usr/lib/$triplet/bulkhead/libbulkhead.so" usr/bin/bulkhead usr/bin/bulkhead-agent; do
    check "hardened: /$f" hardened "$f"
done
check "unpacked bulkhead checks rules.ini.example" \
    rules_valid usr/share/doc/bulkhead/examples/rules.ini.example
check "unpacked bulkhead checks /etc/bulkhead/rules.ini" rules_valid etc/bulkhead/rules.ini
check "unpacked bulkhead run preloads the unpacked shim through \$LIB" preloads_through_lib
check "unpacked shim caps curl (debian/tests/caps-curl)" \
    env BULKHEAD="$work/all/usr/bin/bulkhead" debian/tests/caps-curl
check "man pages render with no warning" man_pages_render
if [[ $(id -u) -eq 0 ]]; then
    check "installed in an overlay: user, conffile, disabled unit, agent, autopkgtest, purge" \
        unshare -m -i --propagation private scripts/check-deb-installed.sh \
        "$(deb libbulkhead)" "$(deb bulkhead)" "$(deb bulkhead-agent)"
else
    echo "ok - installed in an overlay # skip: needs root"
fi

echo "${passed} passed, ${failed} failed"
((failed == 0))
