# shellcheck shell=bash
# Sourced by the scripts that install packages into a throwaway copy of /
# (check-deb-installed.sh, check-multiarch.sh), in private mount and IPC
# namespaces they made with unshare.
#
# overlay_root [TMPFS_OPTIONS]: an overlay of / whose changes live in a
# tmpfs, with /proc, /dev and /sys bound in and a tmpfs /tmp; its root in
# $OVERLAY_ROOT. Everything is unmounted when the script exits.
overlay_root() {
    local base
    base=$(mktemp -d)
    # shellcheck disable=SC2064  # base is fixed now
    trap "umount -l -R '$base' 2>/dev/null || true; rmdir '$base'" EXIT
    mount -t tmpfs ${1:+-o "$1"} tmpfs "$base"
    mkdir "$base/upper" "$base/work" "$base/root"
    mount -t overlay overlay -o "lowerdir=/,upperdir=$base/upper,workdir=$base/work" \
        "$base/root"
    local d
    for d in proc dev sys; do
        mount --rbind "/$d" "$base/root/$d"
    done
    mount -t tmpfs tmpfs "$base/root/tmp"
    # shellcheck disable=SC2034  # read by the script that sourced this
    OVERLAY_ROOT=$base/root
}
