#!/usr/bin/env bash
# bulkhead.ini(5) is the reference for every key of the rules file: checks
# that each key the parser's tables (shim/config/*.c) hold has an entry
# there (a .TP item whose first word is the key), and that the real parser
# (build/bulkhead check) accepts each key with an entry, in [global] or in
# a compartment.
# Entries are read from .SH GLOBAL KEYS to the next section but
# COMPARTMENT KEYS.
# One line per key that is off; exit 1 if any.
#
#   scripts/check-keys.sh              man/bulkhead.ini.5
#   scripts/check-keys.sh PAGE         another page, for the tests
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
page=${1:-$top/man/bulkhead.ini.5}
bulkhead=$top/build/bulkhead
[[ -x $bulkhead ]] || { echo "check-keys: missing $bulkhead: run make" >&2; exit 1; }

parsed=$(sed -n 's/^ *{ "\([a-z_]*\)", KEY_.*/\1/p' "$top"/shim/config/*.c | sort -u)
documented=$(awk '
    /^\.SH / { keys = ($0 == ".SH GLOBAL KEYS" || $0 == ".SH COMPARTMENT KEYS") }
    keys && prev == ".TP" && /^\.B[IR]? / { gsub(/"/, "", $2); print $2 }
    { prev = $0 }' "$page" | sort -u)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0

for key in $(comm -23 <(echo "$parsed") <(echo "$documented")); do
    echo "check-keys: $page: no entry for the key \"$key\"" >&2
    failures=$((failures + 1))
done
# A key is accepted where it belongs: a value error there is fine, only
# "unknown key" in both places means the parser does not know it.
for key in $documented; do
    printf '[global]\n%s = x\n[c]\nlimit = 1\nmatch = 127.0.0.1:1\n%s = x\n' \
        "$key" "$key" >"$scratch/rules.ini"
    unknown=$("$bulkhead" check "$scratch/rules.ini" 2>&1 | grep -c "unknown key \"$key\"")
    if ((unknown == 2)); then
        echo "check-keys: $page: \"$key\" has an entry, but the parser does not know it" >&2
        failures=$((failures + 1))
    fi
done
((failures == 0))
