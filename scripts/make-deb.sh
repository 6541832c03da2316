#!/usr/bin/env bash
# make deb: builds the Debian packages (debian/) with dpkg-buildpackage
# from a clean copy of this checkout, so that nothing in build/ (objects
# made with other flags) gets into them: the tracked files and the new
# ones git does not ignore, as they are in the work tree now.
#
# The copy is build/deb/bulkhead-VERSION/; dpkg-buildpackage writes the
# source package, the .deb files and the .changes beside it, in build/deb/.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deb-deps.sh

version=$(dpkg-parsechangelog -S Version)
out=build/deb
src=$out/bulkhead-$version
rm -rf "$out"
mkdir -p "$src"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Files deleted in the work tree but still in the index are left out.
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do
            [[ -e "$f" ]] && printf '%s\0' "$f"
        done | tar --null -T - -cf - | tar -xf - -C "$src"
else
    tar --exclude=./build -cf - . | tar -xf - -C "$src"
fi

start=$SECONDS
(cd "$src" && dpkg-buildpackage -us -uc)
echo "make deb: built in $((SECONDS - start)) s:"
ls -1 "$out"/*.deb
