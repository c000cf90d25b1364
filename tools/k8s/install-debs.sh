#!/usr/bin/env bash
# Installs the container runtime the real tier needs from Debian's packages: containerd, runc,
# the CNI plugins (bridge, host-local, loopback) and debootstrap. Idempotent: does nothing
# when they are all there.
set -euo pipefail
PKGS=(containerd runc containernetworking-plugins)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
[ "$(id -u)" -eq 0 ] || { echo "install-debs: need root to install ${missing[*]}" >&2; exit 1; }
echo "[k8s-debs] installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
# The packages' own services stay off: the cluster starts containerd with its own config.
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
systemctl disable --now containerd >/dev/null 2>&1 || true
