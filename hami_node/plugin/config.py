"""hami-node's configuration: flags > environment > file (with per-node overrides) > defaults.

Every key is declared once in KEYS; the flags, the environment variables, the file keys, the
validation and the reference table in docs/node.md all derive from that one table. A bad value
raises ConfigError naming the key and where the value came from.

File (YAML or JSON), keys in camelCase (matched ignoring case, `-` and `_`, so HAMi's
lowercase `devicesplitcount` works too):

    deviceSplitCount: 10
    nodeConfig:
      - name: gpu-node-7
        deviceMemoryScaling: 1.5
        excludeDevices: ["GPU-0fc3...", "3"]
"""
import os
import re
from dataclasses import dataclass, fields
from typing import Callable, Mapping, Optional

from hami_node.plugin.errors import ConfigError

ENV_PREFIX = "HAMI_NODE_"
CONFIG_ENV = ENV_PREFIX + "CONFIG"
NODE_OVERRIDES_KEY = "nodeConfig"
DEFAULT_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)
_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _at_least(low, high=None) -> Callable:
    def check(value):
        if value < low or (high is not None and value > high):
            return f"must be between {low} and {high}" if high is not None else \
                f"must be at least {low}"
        return None
    return check


def _positive(high) -> Callable:
    def check(value):
        return None if 0 < value <= high else f"must be greater than 0 and at most {high}"
    return check


def _resource_name(value: str):
    if not _RESOURCE.match(value):
        return "must look like vendor.domain/name, e.g. nvidia.com/gpu"
    if value.split("/")[0].endswith("kubernetes.io"):
        return "the kubernetes.io domain is reserved; use a vendor domain such as nvidia.com"
    return None


def _cdi_kind(value: str):
    if value and not _RESOURCE.match(value):
        return "must be a CDI kind vendor.domain/class (e.g. nvidia.com/gpu) or empty"
    return None


def _address(value: str):
    if value == "":
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        return "must be HOST:PORT (e.g. 0.0.0.0:9394, port 0 picks a free one) or empty to disable"
    return None


def _one_of(*choices) -> Callable:
    def check(value):
        return None if value in choices else f"must be one of {', '.join(choices)}"
    return check


def _xids(values):
    bad = [v for v in values if v < 0]
    return f"XIDs are non-negative integers, got {bad}" if bad else None


@dataclass(frozen=True)
class Key:
    """One configuration key: its file name, kind, default and rules."""

    name: str
    kind: str                  # int, float, bool, str, list, intlist
    default: object
    help: str
    check: Optional[Callable] = None
    env: tuple = ()            # further environment names (read after HAMI_NODE_<KEY>)
    per_node: bool = True      # may appear in a nodeConfig entry

    @property
    def field(self) -> str:
        """The NodeConfig attribute (snake_case)."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.name).lower()

    @property
    def env_name(self) -> str:
        """HAMI_NODE_<KEY>."""
        return ENV_PREFIX + self.field.upper()

    @property
    def flag(self) -> str:
        """--kebab-case."""
        return "--" + self.field.replace("_", "-")


KEYS = (
    Key("nodeName", "str", "", "this node's name (Kubernetes Node object)", env=("NODE_NAME",),
        per_node=False),
    Key("resourceName", "str", "nvidia.com/gpu", "extended resource advertised to kubelet",
        _resource_name),
    Key("deviceSplitCount", "int", 10, "virtual devices per GPU (tasks that may share one GPU)",
        _at_least(1, 1000)),
    Key("deviceMemoryScaling", "float", 1.0, "registered memory = physical x this "
        "(>1 oversubscribes)", _positive(100)),
    Key("deviceCoreScaling", "float", 1.0, "registered cores = 100 x this", _positive(100)),
    Key("defaultMemory", "int", 0, "MiB for an annotation entry with memory 0 (0: the whole GPU)",
        _at_least(0)),
    Key("defaultCores", "int", 0, "SM percent for an annotation entry with cores 0 "
        "(0: unlimited)", _at_least(0, 100)),
    Key("disableCoreLimit", "bool", False, "tell the shim not to limit compute "
        "(GPU_CORE_UTILIZATION_POLICY=disable)"),
    Key("excludeDevices", "list", (), "GPUs not to advertise, by UUID or index"),
    Key("migDevices", "list", (), "GPUs served as MIG instances (by UUID or index, or all): "
        "put in MIG mode, published with their MIG profiles, an instance made per container "
        "at Allocate; the others are shared with the shim"),
    Key("overCapCheckSeconds", "float", 10.0, "how often the driver's per-process memory and "
        "compute share are compared with each container's caps, catching processes that bypass "
        "the shim (0: never)",
        _at_least(0, 3600)),
    Key("evictOverCap", "bool", False, "evict a pod whose container exceeds its GPU memory cap "
        "by the driver's count (off: a Warning Event, a metric and a log line only)"),
    Key("overShareTolerance", "float", 10.0, "percentage points a container's share of a GPU's "
        "time, by the driver's count over each overCapCheckSeconds, may exceed its gpucores "
        "before it is reported (processes that bypass the shim's limiter)", _at_least(0, 100)),
    Key("evictOverShare", "bool", False, "evict a pod whose container exceeds its compute share "
        "by the driver's count (off: a Warning Event, a metric and a log line only)"),
    Key("cdiKind", "str", "", "CDI kind of the node's NVIDIA CDI spec (e.g. nvidia.com/gpu, as "
        "nvidia-ctk cdi generate names it): Allocate then names each GPU as a CDI device "
        "instead of listing device nodes; empty: no CDI", _cdi_kind),
    Key("numaTopology", "bool", False, "tell kubelet each GPU's NUMA node (off: with the "
        "topology manager's single-numa-node or restricted policy kubelet would refuse pods "
        "whose CPUs and GPU slices sit on different NUMA nodes, which a slice does not need)"),
    Key("passDeviceSpecs", "bool", True, "give kubelet the /dev/nvidia* device nodes in "
        "Allocate's answer; false leaves them to the NVIDIA container toolkit, which injects "
        "them (a node without them, e.g. simulated GPUs, needs false: containerd refuses a "
        "container whose device node is missing)"),
    Key("devicePluginDir", "str", "/var/lib/kubelet/device-plugins",
        "kubelet's device plugin directory"),
    Key("kubeletPlugin", "str", "devicePlugin", "how kubelet gets the GPUs: devicePlugin "
        "(nvidia.com/gpu slices placed by hami-scheduler) or dra (ResourceSlices whose GPUs "
        "kube-scheduler allocates to ResourceClaims; Kubernetes 1.34+)",
        _one_of("devicePlugin", "dra")),
    Key("kubeletRootDir", "str", "/var/lib/kubelet", "kubelet's --root-dir (dra: the plugin's "
        "sockets and checkpoint live under it)"),
    Key("cdiSpecDir", "str", "/var/run/cdi", "dra: where the claims' CDI specs are written (a "
        "CDI folder of the container runtime)"),
    Key("draConsumableCapacity", "bool", True, "dra: publish each GPU as shareable, its memory "
        "and cores consumed per claim (needs the DRAConsumableCapacity gate; without it the API "
        "server drops the fields and whole GPUs are published, with a log line)"),
    Key("kubeconfig", "str", "", "kubeconfig file; empty: in-cluster service account",
        env=("KUBECONFIG",), per_node=False),
    Key("shimHostDir", "str", "/usr/local/vgpu", "host directory of libvgpu.so, ld.so.preload "
        "and the per-container shared files"),
    Key("metricsAddress", "str", "0.0.0.0:9394", "HOST:PORT of /metrics; empty disables",
        _address),
    Key("annotationInterval", "float", 30.0, "seconds between node annotation refreshes",
        _positive(3600)),
    Key("healthRecoverySeconds", "float", 60.0, "quiet seconds after a critical XID before a "
        "GPU that answers NVML is healthy again", _at_least(0, 86400)),
    Key("ignoredXids", "intlist", DEFAULT_IGNORED_XIDS, "XIDs that do not make a GPU unhealthy",
        _xids),
)
KEYS_BY_FIELD = {k.field: k for k in KEYS}


@dataclass(frozen=True)
class NodeConfig:
    """The effective configuration of one node agent."""

    node_name: str = ""
    resource_name: str = "nvidia.com/gpu"
    device_split_count: int = 10
    device_memory_scaling: float = 1.0
    device_core_scaling: float = 1.0
    default_memory: int = 0
    default_cores: int = 0
    disable_core_limit: bool = False
    exclude_devices: tuple = ()
    mig_devices: tuple = ()
    numa_topology: bool = False
    cdi_kind: str = ""
    over_cap_check_seconds: float = 10.0
    evict_over_cap: bool = False
    over_share_tolerance: float = 10.0
    evict_over_share: bool = False
    pass_device_specs: bool = True
    device_plugin_dir: str = "/var/lib/kubelet/device-plugins"
    kubelet_plugin: str = "devicePlugin"
    kubelet_root_dir: str = "/var/lib/kubelet"
    cdi_spec_dir: str = "/var/run/cdi"
    dra_consumable_capacity: bool = True
    kubeconfig: str = ""
    shim_host_dir: str = "/usr/local/vgpu"
    metrics_address: str = "0.0.0.0:9394"
    annotation_interval: float = 30.0
    health_recovery_seconds: float = 60.0
    ignored_xids: tuple = DEFAULT_IGNORED_XIDS


assert {f.name for f in fields(NodeConfig)} == set(KEYS_BY_FIELD), "KEYS and NodeConfig differ"


def _normal(name: str) -> str:
    return name.replace("-", "").replace("_", "").lower()


_BY_NORMAL = {_normal(k.name): k for k in KEYS}


def _known(name: str, where: str) -> Key:
    key = _BY_NORMAL.get(_normal(str(name)))
    if key is None:
        raise ConfigError(str(name), "unknown key; known keys: " +
                          ", ".join(k.name for k in KEYS) + f", {NODE_OVERRIDES_KEY}", where)
    return key


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _from_text(key: Key, text: str):
    """A value given as text (flag, environment, or a string in the file)."""
    text = text.strip()
    if key.kind == "int":
        return int(text)
    if key.kind == "float":
        return float(text)
    if key.kind == "bool":
        if text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise ValueError(f"{text!r} is not true or false")
    if key.kind in ("list", "intlist"):
        items = [s.strip() for s in text.split(",") if s.strip()]
        return tuple(int(s) for s in items) if key.kind == "intlist" else tuple(items)
    return text


def _from_file(key: Key, value):
    """A value as YAML/JSON decoded it: native types, or text converted like a flag."""
    if isinstance(value, str):
        return _from_text(key, value)
    if key.kind == "bool" and isinstance(value, bool):
        return value
    if key.kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if key.kind == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if key.kind in ("list", "intlist") and isinstance(value, (list, tuple)):
        return _from_text(key, ",".join(str(v) for v in value))
    if key.kind in ("list", "intlist") and isinstance(value, int) and not isinstance(value, bool):
        return _from_text(key, str(value))
    raise ValueError(f"expected {_KIND_WORDS[key.kind]}, got {type(value).__name__} {value!r}")


_KIND_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false",
               "str": "a string", "list": "a list (or comma-separated text)",
               "intlist": "a list of integers (or comma-separated text)"}


def _convert(key: Key, raw, source: str, from_file: bool):
    try:
        value = _from_file(key, raw) if from_file else _from_text(key, raw)
    except ValueError as e:
        raise ConfigError(key.name, f"expected {_KIND_WORDS[key.kind]}: {e}", source) from e
    problem = key.check(value) if key.check else None
    if problem:
        raise ConfigError(key.name, f"{problem}, got {raw!r}", source)
    return value


def read_config_file(path: str) -> dict:
    """The file's top-level mapping (YAML or JSON); ConfigError if unreadable or malformed."""
    import yaml  # only the daemon reads files; tests/gpu and the shim never import this
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError("config", f"cannot read {path}: {e.strerror}", "--config") from e
    except yaml.YAMLError as e:
        detail = " ".join(str(e).split())   # PyYAML's message spans lines; keep one
        raise ConfigError("config", f"{path} is not valid YAML/JSON: {detail}",
                          "--config") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("config", f"{path} must hold a mapping of keys, got "
                          f"{type(data).__name__}", "--config")
    return data


def _file_layers(data: dict, path: str, node_name: Optional[str]) -> tuple:
    """(base values, this node's override values), each {field: (raw, source)}."""
    base, override = {}, {}
    for name, raw in data.items():
        if _normal(str(name)) == _normal(NODE_OVERRIDES_KEY):
            continue
        base[_known(name, path).field] = (raw, f"{path}")
    overrides = next((v for k, v in data.items()
                      if _normal(str(k)) == _normal(NODE_OVERRIDES_KEY)), None) or []
    if not isinstance(overrides, list):
        raise ConfigError(NODE_OVERRIDES_KEY, "must be a list of {name: NODE, key: value...}",
                          path)
    for i, entry in enumerate(overrides):
        where = f"{path} {NODE_OVERRIDES_KEY}[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ConfigError(NODE_OVERRIDES_KEY, "each entry needs a string `name` (the node)",
                              where)
        for name, raw in entry.items():
            if name == "name":
                continue
            key = _known(name, where)
            if not key.per_node:
                raise ConfigError(key.name, "cannot be set per node", where)
            if entry["name"] == node_name:
                override[key.field] = (raw, where)
    return base, override


def _env_value(key: Key, environ: Mapping) -> Optional[tuple]:
    for name in (key.env_name,) + key.env:
        if environ.get(name, "") != "":
            return environ[name], f"environment {name}"
    return None


def resolve(flags: Mapping, environ: Optional[Mapping] = None,
            reader: Callable = read_config_file) -> NodeConfig:
    """The effective configuration. `flags` maps NodeConfig field names (and `config`) to the
    text given on the command line, or None where a flag was not given."""
    environ = os.environ if environ is None else environ
    path = flags.get("config") or environ.get(CONFIG_ENV) or ""
    data = reader(path) if path else {}
    chosen = {}  # field -> (raw, source, from_file)
    flag_name = (flags.get("node_name"), "flag --node-name") if flags.get("node_name") else None
    name_text = flag_name or _env_value(KEYS_BY_FIELD["node_name"], environ)
    file_name = next((v for k, v in data.items() if _normal(str(k)) == "nodename"), None)
    node_name = name_text[0] if name_text else file_name
    base, override = _file_layers(data, path, node_name)
    for key in KEYS:
        layers = [(base.get(key.field), True), (override.get(key.field), True)]
        env = _env_value(key, environ)
        layers.append(((env[0], env[1]) if env else None, False))
        flag = flags.get(key.field)
        layers.append(((flag, f"flag {key.flag}") if flag is not None else None, False))
        for layer, from_file in layers:
            if layer is not None:
                chosen[key.field] = (layer[0], layer[1], from_file)
    values = {f: _convert(KEYS_BY_FIELD[f], raw, src, ff) for f, (raw, src, ff) in chosen.items()}
    config = NodeConfig(**values)
    if not config.node_name:
        raise ConfigError("nodeName", "not set; give --node-name or set NODE_NAME (in a "
                          "DaemonSet, from the downward API: spec.nodeName)")
    return config


def describe_keys() -> list:
    """(file key, flag, environment variables, default, help) per key, for docs and --help."""
    return [(k.name, k.flag, ", ".join((k.env_name,) + k.env), k.default, k.help) for k in KEYS]
