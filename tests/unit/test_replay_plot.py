"""`hami-sim replay --plot`: the packing curves of the policy and the baselines on the same
seeds in a PNG, with the published figures of a shipped pod list."""
import struct

from hami_sim.replay import catalog
from hami_sim.replay.cli import main
from hami_sim.replay.plot import published


def _head(src: str, dst, lines: int) -> str:
    with open(src) as f:
        dst.write_text("".join(f.readline() for _ in range(lines + 1)))
    return str(dst)


def _png_size(path) -> tuple:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_published_figures_of_a_shipped_list_and_none_for_others(tmp_path):
    shipped = published(catalog.pods_path("openb", "default"))
    assert (shipped["FGD"], shipped["BestFit"], shipped["Random"]) == (95.23, 92.86, 86.30)
    copy = tmp_path / "openb_pod_list_default.csv"        # same name, not the shipped list
    copy.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n")
    assert published(str(copy)) == {}


def test_replay_plot_draws_the_policy_and_the_baselines(tmp_path, capsys):
    nodes = _head(catalog.nodes_path("openb"), tmp_path / "nodes.csv", 40)
    pods = _head(catalog.pods_path("openb", "default"), tmp_path / "pods.csv", 300)
    out = tmp_path / "packing.png"
    assert main(["--nodes", nodes, "--pods", pods, "--seeds", "42", "--workers", "1",
                 "--plot", str(out), "--plot-baselines", "random,fgd"]) == 0
    printed = capsys.readouterr().out
    assert "random: " in printed and "fgd: " in printed and f"wrote {out}" in printed
    assert _png_size(out) == (910, 585)           # 7 x 4.5 in at 130 dpi
    # A line in each of the first three colours of the cycle: fragaware, random, fgd.
    import matplotlib.colors
    import matplotlib.image
    import numpy as np
    pixels = matplotlib.image.imread(out)[..., :3]
    for name in ("C0", "C1", "C2"):
        rgb = np.array(matplotlib.colors.to_rgb(name))
        drawn = int((np.abs(pixels - rgb).max(axis=-1) < 0.05).sum())
        assert drawn > 200, f"no {name} curve in the plot ({drawn} pixels)"


def test_replay_plot_refuses_an_unknown_baseline(tmp_path, capsys):
    assert main(["--seeds", "42", "--plot", str(tmp_path / "x.png"),
                 "--plot-baselines", "fgd,nonesuch"]) == 2
    assert "--plot-baselines: unknown nonesuch" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
