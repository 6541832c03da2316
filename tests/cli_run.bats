#!/usr/bin/env bats
# bulkhead run warns, in one line on stderr, when the shim cannot reach the
# program (statically linked, Go, set-ID, or a script run by such an
# interpreter), then runs it anyway: the exit status stays the program's.
# These run with --no-seccomp, which keeps that warning for static and Go
# programs too; without it they are capped through seccomp instead
# (tests/cli_seccomp.bats).
#
# No Go toolchain is needed: the Go-like programs here are small C programs
# that carry what bulkhead looks for, the build info Go's linker writes
# (its "\xff Go buildinf:" magic), once in a section named .go.buildinfo and
# once only in the writable data, as in a Go binary whose section headers
# were stripped. With a Go toolchain installed, a real Go program is
# tested too.

load helpers/common

BULKHEAD="$BH_ROOT/build/bulkhead"
WARNING_TAIL="; its connections will not be limited"

setup() {
    bh_setup
    [[ -x "$BULKHEAD" ]] || fail "missing $BULKHEAD: run make"
    write_rules "$RULES" <<EOF
[global]
namespace = $NS
[c]
limit = 1
match = 127.0.0.1:1
EOF
}
teardown() { bh_teardown; }

# build NAME [CC FLAGS...] <<EOF C source EOF: $T/NAME from C on stdin.
build() {
    local name=$1
    shift
    cat >"$T/$name.c"
    cc "$@" -o "$T/$name" "$T/$name.c" || fail "cc $* $name.c failed"
}

# bulkhead run --no-seccomp under `run`, stdout and stderr apart.
bh_run() {
    run --separate-stderr "$BULKHEAD" run --no-seccomp -c "$RULES" -- "$@"
}

# elf32 FILE [INTERPRETER]: a minimal i386 executable that exits 7 by
# int 0x80; with INTERPRETER it also names one (PT_INTERP), as a dynamic
# program does.
elf32() {
    python3 - "$@" <<'EOF'
import os, struct, sys
interp = sys.argv[2].encode() + b"\0" if len(sys.argv) > 2 else b""
code = bytes.fromhex("b801000000bb07000000cd80")
base, phnum = 0x08048000, 2 if interp else 1
code_at = 52 + 32 * phnum
interp_at = code_at + len(code)
size = interp_at + len(interp)
ehdr = b"\x7fELF\x01\x01\x01" + b"\0" * 9 + struct.pack(
    "<HHIIIIIHHHHHH", 2, 3, 1, base + code_at, 52, 0, 0, 52, 32, phnum, 40, 0, 0)
load = struct.pack("<IIIIIIII", 1, 0, base, base, size, size, 5, 0x1000)
note = struct.pack("<IIIIIIII", 3, interp_at, base + interp_at, base + interp_at,
                   len(interp), len(interp), 4, 1) if interp else b""
with open(sys.argv[1], "wb") as f:
    f.write(ehdr + note + load + code + interp)
os.chmod(sys.argv[1], 0o755)
EOF
}

@test "run: a static binary gets one warning line, runs, and keeps its exit status" {
    build static -static <<'EOF'
#include <stdio.h>
int main(void) { puts("static ran"); return 3; }
EOF
    bh_run "$T/static"
    assert_failure 3
    assert_output "static ran"
    assert_equal "$stderr" "bulkhead: run: warning: $T/static is statically linked: no dynamic loader reads LD_PRELOAD for it$WARNING_TAIL"
}

@test "run: CMD is looked up along PATH as execvp does" {
    build static -static <<'EOF'
int main(void) { return 3; }
EOF
    mkdir -p "$T/first" "$T/second" "$T/third"
    cp "$T/static" "$T/second/prog"
    # not executable: execvp passes over it, and so must the check
    printf '#!/bin/sh\nexit 9\n' >"$T/first/prog"
    PATH="$T/first:$T/second:$PATH" bh_run prog
    assert_failure 3
    assert_equal "$stderr" "bulkhead: run: warning: $T/second/prog is statically linked: no dynamic loader reads LD_PRELOAD for it$WARNING_TAIL"
    # an earlier dynamic program of that name is the one that runs
    printf '#!/bin/sh\nexit 4\n' >"$T/third/prog"
    chmod +x "$T/third/prog"
    PATH="$T/third:$T/second:$PATH" bh_run prog
    assert_failure 4
    assert_equal "$stderr" ""
}

@test "run: Go-like programs (build info in its section, or only in the data) get the warning" {
    build go_section <<'EOF'
__attribute__((section(".go.buildinfo"), used))
static const char buildinfo[32] = "\xff Go buildinf:\x08\x02";
int main(void) { return 4; }
EOF
    build go_data <<'EOF'
__attribute__((aligned(16))) char buildinfo[32] = "\xff Go buildinf:\x08\x02";
int main(void) { return buildinfo[1] == ' ' ? 5 : 0; }
EOF
    local go="is a Go program: Go makes its own system calls, which the shim never sees"
    bh_run "$T/go_section"
    assert_failure 4
    assert_equal "$stderr" "bulkhead: run: warning: $T/go_section $go$WARNING_TAIL"
    bh_run "$T/go_data"
    assert_failure 5
    assert_equal "$stderr" "bulkhead: run: warning: $T/go_data $go$WARNING_TAIL"
}

@test "run: a real Go program gets the warning" {
    command -v go >/dev/null || fail "no Go toolchain (make deps installs golang-go)"
    mkdir -p "$T/gomod"
    printf 'package main\nimport "os"\nfunc main() { os.Exit(6) }\n' >"$T/gomod/main.go"
    (cd "$T/gomod" && HOME="$T" GOCACHE="$T/gocache" GOFLAGS=-mod=mod \
        go mod init example.com/x >/dev/null 2>&1 && go build -o "$T/goprog" .) ||
        fail "go build failed"
    bh_run "$T/goprog"
    assert_failure 6
    assert_equal "$stderr" "bulkhead: run: warning: $T/goprog is a Go program: Go makes its own system calls, which the shim never sees$WARNING_TAIL"
}

@test "run: dynamic programs, shell scripts and the loader itself get no warning" {
    bh_run /bin/true
    assert_success
    assert_equal "$stderr" ""
    bh_run true
    assert_success
    assert_equal "$stderr" ""
    printf '#!/bin/sh\necho script ran\nexit 6\n' >"$T/script"
    chmod +x "$T/script"
    bh_run "$T/script"
    assert_failure 6
    assert_output "script ran"
    assert_equal "$stderr" ""
    local loader
    loader=$(readelf -lW /bin/true | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
    [[ -x "$loader" ]] || skip "no loader found for /bin/true"
    bh_run "$loader" /bin/true
    assert_success
    assert_equal "$stderr" ""
}

@test "run: a script whose interpreter is static names both" {
    build static -static <<'EOF'
#include <stdio.h>
int main(int argc, char **argv) { printf("%d %s\n", argc, argv[argc - 1]); return 2; }
EOF
    printf '#!%s\n' "$T/static" >"$T/script"
    chmod +x "$T/script"
    bh_run "$T/script"
    assert_failure 2
    assert_output "2 $T/script"
    assert_equal "$stderr" "bulkhead: run: warning: $T/script is a script for $T/static, which is statically linked: no dynamic loader reads LD_PRELOAD for it$WARNING_TAIL"
}

@test "run: 32-bit ELF: no interpreter warns, an interpreter does not" {
    elf32 "$T/static32"
    elf32 "$T/dynamic32" "$T/no-such-loader"
    bh_run "$T/static32"
    assert_equal "${stderr_lines[0]}" "bulkhead: run: warning: $T/static32 is statically linked: no dynamic loader reads LD_PRELOAD for it$WARNING_TAIL"
    # where the kernel runs i386 programs (run directly, it exits 7), it
    # ran under run with its own status too; a kernel without IA32
    # emulation refuses it (ENOEXEC), and what happens then is execvp's
    local direct=0
    "$T/static32" 2>/dev/null || direct=$?
    ((direct == 7)) || return 0
    assert_equal "$status" 7
    assert_equal "${#stderr_lines[@]}" 1
    # the loader it names does not exist: exec fails, with no warning first
    run -127 --separate-stderr "$BULKHEAD" run -c "$RULES" -- "$T/dynamic32"
    assert_equal "$stderr" "bulkhead: run: $T/dynamic32: No such file or directory"
}

@test "run: a set-user-ID program of another user warns; on a nosuid mount it does not" {
    [[ $(id -u) -eq 0 ]] || skip "needs root to make a file of another user set-user-ID"
    id nobody >/dev/null 2>&1 || skip "no user nobody"
    cp /bin/true "$T/suid"
    chown nobody "$T/suid"
    chmod 4755 "$T/suid"
    bh_run "$T/suid"
    assert_success
    if findmnt -n -o OPTIONS --target "$T" | grep -qw nosuid; then
        assert_equal "$stderr" ""
    else
        assert_equal "$stderr" "bulkhead: run: warning: $T/suid is set-user-ID: the loader ignores LD_PRELOAD for it$WARNING_TAIL"
    fi
}
