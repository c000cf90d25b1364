#!/usr/bin/env bash
# usage: apt-install-missing.sh LABEL PACKAGE...
# Installs those of Debian's PACKAGEs that are not installed yet (nothing when all are), for
# the set-up scripts of the test tiers. Needs root only when something is missing. Another apt
# run (another tier's set-up) may hold the lock: it waits for it.
set -euo pipefail
label=$1
shift
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
[ "$(id -u)" -eq 0 ] || { echo "$label: need root to install ${missing[*]}" >&2; exit 1; }
echo "[$label] installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -q >&2
apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >&2
