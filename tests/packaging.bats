#!/usr/bin/env bats
# What the Debian packages rely on, without building them (make deb-check
# does that): every man page renders with no warning; make install lays
# files out as the packages do and honours DESTDIR, PREFIX, LIBDIR, MANDIR;
# the installed bulkhead run preloads the installed shim through $LIB and
# caps curl; the compile and link lines keep the packager's CPPFLAGS,
# CFLAGS and LDFLAGS beside the project's own flags.

load helpers/common

setup() { bh_setup; }
teardown() { bh_teardown; }

MULTIARCH=$(cc -print-multiarch)

man_pages() {
    ls "$BH_ROOT"/man/*.[1-8]
}

# installed ROOT: the files under ROOT, one path a line, sorted.
installed() {
    (cd "$1" && find . -type f | sed 's|^\.||' | sort)
}

@test "man pages: each renders with no warning (groff -ww, man -l)" {
    local page count=0
    for page in $(man_pages); do
        run bash -c 'groff -man -ww -z "$1" 2>&1' _ "$page"
        assert_success
        assert_output ""
        run bash -c 'MANWIDTH=80 MANPAGER=cat man -l "$1" 2>&1 >/dev/null' _ "$page"
        assert_success
        assert_output ""
        count=$((count + 1))
    done
    ((count >= 3)) || fail "only $count man pages"
}

@test "make install DESTDIR PREFIX=/usr: the packages' layout" {
    run make -s -C "$BH_ROOT" install DESTDIR="$T/root" PREFIX=/usr
    assert_success
    local expected=(
        /etc/bulkhead/rules.ini
        /usr/bin/bulkhead
        /usr/bin/bulkhead-agent
        /usr/lib/systemd/system/bulkhead-agent.service
        "/usr/lib/$MULTIARCH/bulkhead/libbulkhead.so"
    )
    local page
    for page in $(man_pages); do
        expected+=("/usr/share/man/man${page##*.}/${page##*/}")
    done
    expected+=(/usr/share/doc/bulkhead/examples/rules.ini.example)
    local shipped
    for shipped in bulkhead.rules.yml bulkhead.rules.test.yml bulkhead.dashboard.json; do
        expected+=("/usr/share/bulkhead-agent/monitoring/$shipped")
    done
    assert_equal "$(installed "$T/root")" "$(printf '%s\n' "${expected[@]}" | sort)"
    run grep -x 'ExecStart=/usr/bin/bulkhead-agent run .*' \
        "$T/root/usr/lib/systemd/system/bulkhead-agent.service"
    assert_success
    run "$T/root/usr/bin/bulkhead" check "$T/root/etc/bulkhead/rules.ini"
    assert_success
}

@test "make install: LIBDIR, MANDIR, BINDIR honoured; a rules.ini already there is kept" {
    mkdir -p "$T/root/etc/bulkhead"
    echo '; mine' >"$T/root/etc/bulkhead/rules.ini"
    run make -s -C "$BH_ROOT" install DESTDIR="$T/root" PREFIX=/opt/bh \
        LIBDIR=/opt/bh/lib64 MANDIR=/opt/man BINDIR=/opt/sbin
    assert_success
    [[ -f "$T/root/opt/bh/lib64/bulkhead/libbulkhead.so" ]] || fail "LIBDIR not honoured"
    [[ -f "$T/root/opt/man/man8/bulkhead-agent.8" ]] || fail "MANDIR not honoured"
    [[ -x "$T/root/opt/sbin/bulkhead" ]] || fail "BINDIR not honoured"
    assert_equal "$(cat "$T/root/etc/bulkhead/rules.ini")" "; mine"
}

@test "installed bulkhead run: the shim preloaded as PREFIX/\$LIB/bulkhead/, mapped from lib/<triplet>, caps curl" {
    run make -s -C "$BH_ROOT" install DESTDIR="$T/root" PREFIX=/usr/local
    assert_success
    local cmd="$T/root/usr/local/bin/bulkhead"
    start_server web 60000
    write_rules "$RULES" <<RULES
[global]
namespace = $NS
[web]
limit = 2
wait_ms = 0
match = 127.0.0.1:$SERVER_PORT
RULES
    # The loader, not the command, expands $LIB: the maps are its word.
    run "$cmd" run -c "$RULES" -- sh -c 'printf "%s\n" "$LD_PRELOAD"; cat /proc/self/maps'
    assert_success
    assert_line --index 0 "$T/root/usr/local/\$LIB/bulkhead/libbulkhead.so"
    assert_line --partial "$T/root/usr/local/lib/$MULTIARCH/bulkhead/libbulkhead.so"
    local i
    for i in 1 2 3 4; do
        run_rc "$T/curl.$i" "$cmd" run -c "$RULES" -- curl -s -o /dev/null --noproxy '*' \
            --max-time 100 "http://127.0.0.1:$SERVER_PORT/" 3>&- &
        track_pid $!
    done
    wait_for rc_count_is 7 2 "$T/curl"
    assert_equal "$(server_stat web max)" 2
    assert_equal "$(server_stat web total)" 2
}

@test "make: CPPFLAGS, CFLAGS and LDFLAGS reach every compile and link, beside the project's flags" {
    run make -n -B -C "$BH_ROOT" BUILD="$T/b" CC=cc CPPFLAGS=-DPROBE_CPP \
        CFLAGS='-O1 -DPROBE_C' LDFLAGS=-Wl,--probe-ld all
    assert_success
    local compiles links
    compiles=$(grep -E '^cc .* -c ' <<<"$output")
    links=$(grep -E '^cc ' <<<"$output" | grep -v -- ' -c ')
    [[ -n "$compiles" && -n "$links" ]] || fail "no compile or link line in: $output"
    local flag
    for flag in -DPROBE_CPP -DPROBE_C -O1 -fPIC -Werror -fvisibility=hidden; do
        run grep -v -e " $flag " <<<"$compiles"
        assert_output ""
    done
    for flag in -DPROBE_C -Wl,--probe-ld; do
        run grep -v -e " $flag " <<<"$links"
        assert_output ""
    done
    # The three programs are linked: the shim, the command and the agent.
    assert_equal "$(grep -c . <<<"$links")" 3
}
