#!/usr/bin/env bash
# Installs the container runtime the real tier needs from Debian's packages: containerd, runc
# and the CNI plugins (bridge, host-local, loopback). Idempotent: does nothing when they are
# all there.
set -euo pipefail
had_containerd=$(dpkg-query -W -f='${Status}' containerd 2>/dev/null || true)
bash "$(dirname "$0")/../apt-install-missing.sh" k8s-debs containerd runc containernetworking-plugins
# A containerd just installed keeps its own service off: the cluster starts containerd with its
# own config (one installed before is the machine owner's business).
if [[ "$had_containerd" != *"install ok installed"* ]]; then
  systemctl disable --now containerd >/dev/null 2>&1 || true
fi
