#!/usr/bin/env bash
# Checks what the docs promise: every relative link in the given Markdown
# files resolves (the file, and its #anchor as a heading there), and every
# fenced block marked runnable (```sh runnable) runs as written, from the
# checkout's top, with build/ first on PATH. One line per failure, naming
# FILE:LINE; exit 1 if any.
#
#   scripts/check-docs.sh                 README.md and docs/*.md
#   scripts/check-docs.sh FILE.md...      those files
#
# A runnable block runs under bash with -euo pipefail, with HOME and
# XDG_CONFIG_HOME in a scratch directory (no user's rules are found by
# default); one that starts programs under the shim names a rules file with
# a namespace of its own and cleans up after itself.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

shopt -s nullglob
if (($# == 0)); then
    set -- README.md docs/*.md
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0
fail() {
    echo "check-docs: $1" >&2
    failures=$((failures + 1))
}

# GitHub's anchor for a heading: lower case, punctuation but - and _ gone,
# spaces to -.
anchors_of() {
    sed -n 's/^#\{1,6\} \(.*\)$/\1/p' "$1" |
        tr '[:upper:]' '[:lower:]' | sed 's/[^a-z0-9 _-]//g; s/ /-/g'
}

check_links() {
    local file=$1 line text target path anchor
    while IFS=: read -r line text; do
        while [[ $text =~ \]\(([^\)[:space:]]+)\) ]]; do
            target=${BASH_REMATCH[1]}
            text=${text#*"${BASH_REMATCH[0]}"}
            case $target in http://* | https://* | mailto:*) continue ;; esac
            path=${target%%#*}
            anchor=
            [[ $target == *'#'* ]] && anchor=${target#*#}
            if [[ -z $path ]]; then
                path=$file
            else
                path=$(dirname "$file")/$path
            fi
            if [[ ! -e $path ]]; then
                fail "$file:$line: link to $target: no such file"
            elif [[ -n $anchor ]] && ! anchors_of "$path" | grep -qxF -- "$anchor"; then
                fail "$file:$line: link to $target: no heading #$anchor in $path"
            fi
        done
    done < <(grep -n '](' "$file")
}

# Runs each ```sh runnable block of the file; a block's first line number
# names it.
run_blocks() {
    local file=$1 start=0 block= number=0 inside=0 text output
    while IFS= read -r text; do
        number=$((number + 1))
        if ((inside)); then
            if [[ $text == '```' ]]; then
                inside=0
                if ! output=$(PATH="$top/build:$PATH" HOME="$scratch" \
                    XDG_CONFIG_HOME="$scratch" bash -euo pipefail -c "$block" 2>&1); then
                    output=$(tail -n 3 <<<"$output")  # where it failed
                    fail "$file:$start: runnable block failed: ${output//$'\n'/ | }"
                fi
            else
                block+=$text$'\n'
            fi
        elif [[ $text =~ ^\`\`\`[a-z]*\ runnable$ ]]; then
            inside=1 start=$number block=
        fi
    done < "$file"
    ((inside == 0)) || fail "$file:$start: runnable block never closed"
}

# Every reference a man page of this tree makes to one of bulkhead's own
# pages (.BR name (N)) names a page that is here, in that section.
check_man_references() {
    local page line name section
    for page in man/*.[1-8]; do
        while read -r line name section; do
            [[ -e man/$name.$section ]] ||
                fail "$page:$line: refers to $name($section), which is not in man/"
        done < <(awk '/^\.BR (lib)?bulkhead[^ ]* \([0-9]\)/ {
                name = $2; gsub(/\\/, "", name); print NR, name, substr($3, 2, 1) }' "$page")
    done
}

check_man_references
for file in "$@"; do
    if [[ ! -r $file ]]; then
        fail "$file: cannot read"
        continue
    fi
    check_links "$file"
    run_blocks "$file"
done
((failures == 0))
