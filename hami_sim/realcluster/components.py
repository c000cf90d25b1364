"""The real components' binaries: built (first time) and found by tools/k8s/build.sh, the
container runtime installed from Debian's packages by tools/k8s/install-debs.sh."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools" / "k8s"
COMPONENTS = ("kubectl", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
              "kubelet", "etcd")
RUNTIME = ("containerd", "containerd-shim-runc-v2", "runc", "ctr")
# Built from containerd's Go module (tools/k8s/build.sh) where CDI is needed: Debian 12's
# containerd is 1.6, and CDI reaches containers from 1.7.2 on.
BUILT_RUNTIME = ("containerd", "containerd-shim-runc-v2")


class ComponentError(RuntimeError):
    """A component could not be built or installed."""


def versions() -> dict:
    """tools/k8s/versions.env as a dict (K8S_VERSION, ETCD_VERSION)."""
    pairs = (line.split("=", 1) for line in (TOOLS / "versions.env").read_text().splitlines()
             if "=" in line and not line.lstrip().startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def ensure_components(names=COMPONENTS, built_runtime: bool = False) -> dict:
    """name -> absolute path of each binary, building what is not cached (the first build
    takes a while; its progress goes to stderr) and installing the runtime packages;
    `built_runtime`: containerd and its shim built from their module, not Debian's."""
    done = subprocess.run(["bash", str(TOOLS / "install-debs.sh")])
    if done.returncode != 0:
        raise ComponentError("tools/k8s/install-debs.sh failed (see above)")
    paths = {}
    for name in tuple(names) + (BUILT_RUNTIME if built_runtime else ()):
        done = subprocess.run(["bash", str(TOOLS / "build.sh"), name], stdout=subprocess.PIPE,
                              text=True)
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines or not Path(lines[-1]).is_file():
            raise ComponentError(f"tools/k8s/build.sh {name} failed (see above)")
        paths[name] = lines[-1]
    for name in RUNTIME:
        if name in paths:
            continue
        found = shutil.which(name)
        if found is None:
            raise ComponentError(f"{name} is not on PATH after tools/k8s/install-debs.sh")
        paths[name] = found
    return paths
