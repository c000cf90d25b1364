"""The node's OCI runtime: runc, behind a wrapper that edits a container's config.json on
`create` the way the NVIDIA container toolkit's runtime does (containerd runs this script as
its runc binary, `BinaryName` in its configuration).

For a container that asks for GPUs (NVIDIA_VISIBLE_DEVICES in its environment, as hami-node's
Allocate sets it, or NVIDIA's "volume-mounts" list: NVIDIA_VISIBLE_DEVICES naming the folder
/var/run/nvidia-container-devices, one mount per GPU UUID in it, as hami-node's DRA CDI specs
give it, the toolkit's `accept-nvidia-visible-devices-as-volume-mounts`), the simulated
libcuda.so.1 and libnvidia-ml.so.1 are bind-mounted into /usr/local/nvidia/lib64 and found
by soname (LD_LIBRARY_PATH), as the real ones are mounted by the toolkit; the simulator's
configuration (devices, state folder) is added to its environment and the selected devices
become the simulator's visibility variable.

The project's image is a skeleton root filesystem (marked by a file HOST_USERLAND_MARK at its
root): the host's userland (/usr, the Python that made the project's virtual environment, and
the project checkout with its .venv) is bind-mounted read-only into each of its containers, so
that `python3 -m hami_sim...`, hami-control and hami-node run unchanged. Other images (the
kube-scheduler image, the Debian bullseye image) run as they are.

With HAMI_OCI_HOSTS_FILE set (the installed mode's Service routing, svcproxy.py), its lines
are appended once to the pod's /etc/hosts (kubelet's file): the names cluster DNS would give.

The simulated driver is a library, not a kernel driver: it identifies processes by pid, so
containers stay in the host's PID namespace (a real driver sees host pids too).

Standard library only, run with `python3 -S`: it runs on every runc call.
Configuration (set by the generated wrapper script): HAMI_OCI_RUNC, HAMI_OCI_SIM_LIBS,
HAMI_OCI_HOST_MOUNTS (colon-separated), HAMI_OCI_SIM_ENV (JSON object).
"""
import json
import os
import sys

LIB_DIR = "/usr/local/nvidia/lib64"
LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")
VISIBLE = "NVIDIA_VISIBLE_DEVICES"        # hami_sim.container.RUNTIME_VISIBLE_VAR
SIM_VISIBLE = "HAMI_SIM_VISIBLE_DEVICES"  # hami_sim.container.SIM_VISIBLE_VAR
SANDBOX = ("io.kubernetes.cri.container-type", "sandbox")
HOST_USERLAND_MARK = ".hami-host-userland"     # hami_sim.realcluster.images
HOSTS_MARK = "# hami-k8s services\n"
DEVICE_LIST_DIR = "/var/run/nvidia-container-devices"   # hami_node.dra.claims


def bundle_of(args: list) -> str:
    """The bundle folder of a `runc ... create [--bundle DIR] ID` call (default: cwd)."""
    for i, arg in enumerate(args):
        if arg in ("--bundle", "-b") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--bundle="):
            return arg.split("=", 1)[1]
    return os.getcwd()


def _bind(source: str, target: str, writable: bool = False) -> dict:
    return {"destination": target, "type": "bind", "source": source,
            "options": ["rbind", "rw" if writable else "ro", "nosuid"]}


def _set_env(env: list, name: str, value: str) -> list:
    return [e for e in env if not e.startswith(name + "=")] + [f"{name}={value}"]


def add_hosts(mounts: list, hosts_file: str) -> None:
    """Appends the Service names of hosts_file to the pod's /etc/hosts (once per pod)."""
    try:
        with open(hosts_file) as f:
            lines = f.read()
    except OSError:
        return
    for m in mounts:
        if m.get("destination") == "/etc/hosts" and os.path.isfile(m.get("source", "")):
            with open(m["source"], "r+") as f:
                if HOSTS_MARK not in f.read():
                    f.write(HOSTS_MARK + lines)


def visible_devices(value: str, mounts: list) -> str:
    """The GPUs a container asks for: NVIDIA_VISIBLE_DEVICES, or with the volume-mounts list
    the UUIDs mounted under its folder (in mount order)."""
    if value.rstrip("/") != DEVICE_LIST_DIR:
        return value
    prefix = DEVICE_LIST_DIR + "/"
    return ",".join(m["destination"][len(prefix):] for m in mounts
                    if m.get("destination", "").startswith(prefix))


def edit(spec: dict, sim_libs: str, host_mounts: list, sim_env: dict, rootfs: str = "",
         hosts_file: str = "") -> dict:
    """The container's spec with the host userland (the project's skeleton image), and for a
    GPU container the simulated driver; a pod's sandbox (pause) container is left alone."""
    annotations = spec.get("annotations") or {}
    if annotations.get(SANDBOX[0]) == SANDBOX[1]:
        return spec
    mounts = spec.setdefault("mounts", [])
    if hosts_file:
        add_hosts(mounts, hosts_file)
    if os.path.exists(os.path.join(rootfs, HOST_USERLAND_MARK)):
        mounts.extend(_bind(p, p) for p in host_mounts if os.path.exists(p))
    linux = spec.setdefault("linux", {})
    linux["namespaces"] = [ns for ns in linux.get("namespaces", []) if ns.get("type") != "pid"]
    process = spec.setdefault("process", {})
    env = process.get("env") or []
    values = dict(e.split("=", 1) for e in env if "=" in e)
    visible = visible_devices(values.get(VISIBLE, "").strip(), mounts)
    if visible and visible not in ("void", "none"):
        mounts.extend(_bind(os.path.join(sim_libs, lib), f"{LIB_DIR}/{lib}")
                      for lib in LIBRARIES)
        state = sim_env.get("HAMI_SIM_STATE")
        if state:
            mounts.append(_bind(state, state, writable=True))
        for name, value in sim_env.items():
            env = _set_env(env, name, value)
        env = _set_env(env, SIM_VISIBLE, visible)
        path = values.get("LD_LIBRARY_PATH", "")
        env = _set_env(env, "LD_LIBRARY_PATH", LIB_DIR + (":" + path if path else ""))
    process["env"] = env
    return spec


def main(args: list) -> None:
    """Edits the bundle's config.json on `create`, then becomes runc."""
    runc = os.environ.get("HAMI_OCI_RUNC", "runc")
    if "create" in args or "run" in args:
        bundle = bundle_of(args)
        path = os.path.join(bundle, "config.json")
        with open(path) as f:
            spec = json.load(f)
        rootfs = os.path.join(bundle, (spec.get("root") or {}).get("path", "rootfs"))
        spec = edit(spec, os.environ["HAMI_OCI_SIM_LIBS"],
                    [p for p in os.environ.get("HAMI_OCI_HOST_MOUNTS", "").split(":") if p],
                    json.loads(os.environ.get("HAMI_OCI_SIM_ENV", "{}")), rootfs,
                    os.environ.get("HAMI_OCI_HOSTS_FILE", ""))
        with open(path + ".tmp", "w") as f:
            json.dump(spec, f)
        os.replace(path + ".tmp", path)
    os.execv(runc, [runc] + args)


if __name__ == "__main__":
    main(sys.argv[1:])
