"""hami-node's configuration as a user meets it: the real command with flags, environment and
files; a broken configuration exits 2 with one line naming the key and where it came from."""
import json
import subprocess
import sys

import pytest

BASE_ENV = {"PATH": "/usr/bin:/bin", "NODE_NAME": "node-x"}


def hami_node(*args, env=None, timeout=30):
    return subprocess.run([sys.executable, "-m", "hami_node.plugin.cli", *args],
                          env=dict(BASE_ENV, **(env or {})), capture_output=True, text=True,
                          timeout=timeout)


def effective(*args, env=None) -> dict:
    done = hami_node("show-config", *args, env=env)
    assert done.returncode == 0, done.stderr
    return dict(line.split(": ", 1) for line in done.stdout.splitlines())


def test_precedence_flags_over_env_over_node_override_over_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("deviceSplitCount: 3\ndevicememoryscaling: 1.25\nannotationInterval: 7\n"
                    "defaultCores: 5\n"
                    "nodeConfig:\n  - name: node-x\n    deviceSplitCount: 4\n"
                    "    defaultCores: 6\n  - name: other\n    deviceSplitCount: 9\n")
    got = effective("--config", str(path), "--annotation-interval", "2",
                    env={"HAMI_NODE_DEVICE_SPLIT_COUNT": "5", "HAMI_NODE_ANNOTATION_INTERVAL": "3"})
    assert got["nodeName"] == "node-x"
    assert got["deviceSplitCount"] == "5"           # env beats the node override and the file
    assert got["annotationInterval"] == "2.0"       # the flag beats env and file
    assert got["defaultCores"] == "6"               # the node override beats the file
    assert got["deviceMemoryScaling"] == "1.25"     # file keys match ignoring case
    assert got["resourceName"] == "nvidia.com/gpu"  # default
    assert got["ignoredXids"] == "13,31,43,45,68,109"


def test_json_file_and_lists(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"excludeDevices": ["GPU-a", 3], "ignoredXids": [79],
                                "disableCoreLimit": True}))
    got = effective("--config", str(path), env={"HAMI_NODE_CONFIG": "/nonexistent"})
    assert got["excludeDevices"] == "GPU-a,3"
    assert got["ignoredXids"] == "79"
    assert got["disableCoreLimit"] == "True"


CASES = [
    ("flag", ["--device-split-count", "0"], {}, None, "deviceSplitCount (from flag "
     "--device-split-count): must be between 1 and 1000"),
    ("env", [], {"HAMI_NODE_DEVICE_MEMORY_SCALING": "lots"}, None,
     "deviceMemoryScaling (from environment HAMI_NODE_DEVICE_MEMORY_SCALING): expected a number"),
    ("bool", [], {"HAMI_NODE_DISABLE_CORE_LIMIT": "maybe"}, None,
     "disableCoreLimit (from environment HAMI_NODE_DISABLE_CORE_LIMIT): expected true or false"),
    ("tolerance", ["--over-share-tolerance", "150"], {}, None, "overShareTolerance (from flag "
     "--over-share-tolerance): must be between 0 and 100"),
    ("tolerance-env", [], {"HAMI_NODE_OVER_SHARE_TOLERANCE": "10%"}, None, "overShareTolerance "
     "(from environment HAMI_NODE_OVER_SHARE_TOLERANCE): expected a number"),
    ("evict-share", [], {"HAMI_NODE_EVICT_OVER_SHARE": "sometimes"}, None, "evictOverShare "
     "(from environment HAMI_NODE_EVICT_OVER_SHARE): expected true or false"),
    ("resource", ["--resource-name", "gpu"], {}, None, "resourceName (from flag --resource-name):"
     " must look like vendor.domain/name"),
    ("metrics", ["--metrics-address", "9394"], {}, None, "metricsAddress (from flag "
     "--metrics-address): must be HOST:PORT"),
    ("unknown-key", [], {}, "deviceSplitCont: 3\n", "deviceSplitCont (from {path}): unknown key"),
    ("file-type", [], {}, "deviceSplitCount: [1, 2]\n", "deviceSplitCount (from {path}): "
     "expected an integer"),
    ("override-key", [], {}, "nodeConfig:\n  - name: node-x\n    kubeconfig: /x\n",
     "kubeconfig (from {path} nodeConfig[0]): cannot be set per node"),
    ("override-shape", [], {}, "nodeConfig: {name: node-x}\n",
     "nodeConfig (from {path}): must be a list"),
    ("not-yaml", [], {}, "deviceSplitCount: [\n", "config (from --config): {path} is not valid"),
    ("no-node", [], {"NODE_NAME": ""}, None, "nodeName: not set; give --node-name or set "
     "NODE_NAME"),
]


@pytest.mark.parametrize("args,env,text,expect", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_configuration_exits_2_naming_the_key(tmp_path, args, env, text, expect):
    path = tmp_path / "config.yaml"
    if text is not None:
        path.write_text(text)
        args = [*args, "--config", str(path)]
    done = hami_node(*args, env=env)
    assert done.returncode == 2, done.stderr
    assert expect.format(path=path) in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, "one clear line"


def test_missing_config_file(tmp_path):
    done = hami_node("--config", str(tmp_path / "absent.yaml"))
    assert done.returncode == 2
    assert "cannot read" in done.stderr and "absent.yaml" in done.stderr


def test_unknown_command_and_help():
    assert hami_node("frobnicate").returncode == 2
    done = hami_node("--help")
    assert done.returncode == 0 and "install-shim" in done.stdout
    done = hami_node("serve", "--help")
    assert "--device-split-count" in done.stdout and "HAMI_NODE_DEVICE_SPLIT_COUNT" in done.stdout


def test_no_gpu_driver_is_a_clear_start_failure(tmp_path):
    # No simulated or real libnvidia-ml on the library path: NVML cannot initialise.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:9"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "users": [{"name": "u", "user": {}}]}))
    done = hami_node("--kubeconfig", str(kubeconfig), "--shim-host-dir", str(tmp_path / "v"),
                     "--device-plugin-dir", str(tmp_path / "dp"), "--metrics-address", "",
                     env={"LD_LIBRARY_PATH": str(tmp_path)})
    assert done.returncode == 1
    assert "NVML cannot be initialised" in done.stderr
