#!/usr/bin/env bash
# Installs headless Chromium and its WebDriver from Debian's packages for the browser tier
# (tests/browser). Idempotent: does nothing when both are there.
set -euo pipefail
PKGS=(chromium chromium-driver)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
[ "$(id -u)" -eq 0 ] || { echo "browser install: need root to install ${missing[*]}" >&2; exit 1; }
echo "[browser] installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Another apt run (say tools/k8s/install-debs.sh) may hold the lock: wait for it.
apt-get -o DPkg::Lock::Timeout=600 update -q >&2
apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >&2
