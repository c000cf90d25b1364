#!/usr/bin/env bash
# A minimal Debian root filesystem of a given release with Python 3, made with debootstrap from
# Debian's packages and cached outside the repository; the tests use it as an "older image"
# (bullseye: glibc 2.31, older than the 2.33/2.34 symbols a default build of our libraries needs).
#
#   tools/rootfs/build.sh [SUITE]     default bullseye
#
# Progress goes to stderr; the last line of stdout is the root filesystem's absolute path.
# A second run costs nothing. Needs root (debootstrap and chroot do).
set -euo pipefail
suite=${1:-bullseye}
case "$suite" in *[!a-z]*|"") echo "build.sh: SUITE must be a Debian code name such as bullseye, not '$suite'" >&2; exit 2;; esac
cache=${HAMI_ROOTFS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-py/rootfs}
packages=python3
dest=$cache/$suite-$packages
if [ -f "$dest/.complete" ]; then
    echo "$dest"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "build.sh: debootstrap needs root to make $dest" >&2
    exit 1
fi
if ! command -v debootstrap >/dev/null; then
    echo "build.sh: installing debootstrap from Debian's packages" >&2
    (apt-get install -y -q debootstrap >&2 || { apt-get update -q >&2 && apt-get install -y -q debootstrap >&2; })
fi
mkdir -p "$cache"
# Built beside its final place and renamed when complete, so an interrupted run leaves no
# half-made root filesystem behind that a later run would take for a whole one.
work=$(mktemp -d "$cache/.$suite.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$SECONDS
echo "build.sh: debootstrap --variant=minbase --include=$packages $suite (a minute or two)" >&2
debootstrap --variant=minbase --include="$packages" "$suite" "$work/root" >&2
touch "$work/root/.complete"
rm -rf "$dest"
mv "$work/root" "$dest"
echo "build.sh: $suite ready in $((SECONDS - start)) s at $dest" >&2
echo "$dest"
