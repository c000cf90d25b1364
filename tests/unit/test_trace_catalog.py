"""The shipped openb trace, found by short name, and no path outside the repository."""
import re
import subprocess
from pathlib import Path

import pytest

from hami_sim.replay import catalog, cli
from hami_sim.replay.trace import TraceError, load_nodes, load_pods

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_lists_are_the_papers():
    nodes = load_nodes(catalog.nodes_path("openb"))
    assert (len(nodes), sum(n.gpus for n in nodes)) == (1213, 6212)
    assert catalog.pod_lists("openb") == ["default", "gpushare40", "gpuspec10", "multigpu20"]
    assert len(load_pods(catalog.pods_path("openb", "default"))) == 8152
    assert catalog.traces() == ["openb"]
    # the licence, source and published figures travel with the data
    readme = (catalog.TRACES_DIR / "openb" / "README.md").read_text()
    assert "github.com/alibaba/clusterdata" in readme and "| default | 86.30 |" in readme


def test_short_names_and_paths(tmp_path):
    own = tmp_path / "mine.csv"
    own.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,100\n")
    assert catalog.pods_path("openb", str(own)) == str(own)
    assert catalog.pods_path("openb", "gpushare40").endswith("openb_pod_list_gpushare40.csv")
    assert catalog.nodes_path("openb", str(own)) == str(own)
    with pytest.raises(TraceError, match="ships no pod list 'gpushare60'.*give a path"):
        catalog.pods_path("openb", "gpushare60")
    with pytest.raises(TraceError, match="no shipped trace 'philly'"):
        catalog.nodes_path("philly")


def test_cli_takes_short_names(tmp_path, capsys):
    nodes = tmp_path / "n.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,T4\n")
    # the shipped default list against a small node list: only the pods' file is looked up
    assert cli.main(["--nodes", str(nodes), "--pods", "default", "--seeds", "1",
                     "--ratio", "0.1", "--json"]) == 0
    out = capsys.readouterr().out
    assert "openb_pod_list_default.csv" in out.splitlines()[-1]
    assert cli.main(["--trace", "openb", "--pods", "nosuch"]) == 2
    assert "ships no pod list 'nosuch'" in capsys.readouterr().err


def tracked(*suffixes) -> list:
    """The repository's tracked files whose names end with one of `suffixes`."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    return [name for name in files if name and name.endswith(suffixes)]


def test_nothing_tracked_points_outside_the_repository():
    # Built from parts so that this file does not match itself.
    outside = re.compile("|".join([r"\.\./" + "shared/", r"(?<![\w.~-])/" + "work/",
                                   r"/home/" + r"[a-z]"]))
    hits = []
    for name in tracked(".py", ".md", ".c", ".h", ".sh", ".txt", ".yaml", ".yml", ".toml",
                        ".cfg", ".ini", "Makefile"):
        text = (ROOT / name).read_text(errors="replace")
        hits += [f"{name}: {m.group(0)}" for m in outside.finditer(text)]
    assert not hits, "paths outside the repository: " + "; ".join(hits)


def test_no_code_climbs_out_of_the_repository_from_its_own_file():
    # Path(__file__).parents[k] or k .parent steps: the string check above cannot see
    # `parents[2] / "shared"` in bench/, which made `make bench` fail in a fresh clone
    climbs = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?"
                        r"(?:\.parents\[(\d+)\]|((?:\.parent)+))")
    hits = []
    for name in tracked(".py"):
        depth = len(Path(name).parts)       # bench/x.py: 2; parents[1] (2 steps) is the root
        for m in climbs.finditer((ROOT / name).read_text(errors="replace")):
            up = int(m.group(1)) + 1 if m.group(1) else m.group(2).count(".parent")
            if up > depth:                       # above the root
                hits.append(f"{name}: {m.group(0)}")
    assert not hits, "paths above the repository's root: " + "; ".join(hits)
