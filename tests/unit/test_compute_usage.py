"""The compute figures of the shared file as the node agent and hami-smi read them: the share
of the last window, the window in progress when it is overdue, per process and per device."""
import pytest

from hami_node.shim import layout, read_usage
from hami_node.shim.smi import render
from hami_node.shim.usage import WINDOW_NS, share_percent

S = 1_000_000_000


def figures(start, charged, share_ppm=0, share_at=0):
    f = layout.VgpuComputeFigures()
    f.window_start_ns, f.window_charged_ns = start, charged % (1 << 64)
    f.share_ppm, f.share_at_ns, f.launches = share_ppm, share_at, 1
    return f


@pytest.mark.parametrize("f, now, expected", [
    (figures(0, 0), 100 * S, 0.0),
    (figures(10 * S, 200_000_000, 250_000, 10 * S), 10 * S + S // 2, 25.0),
    (figures(10 * S, 500_000_000), 10 * S + S // 2, 100.0),
    (figures(10 * S, 300_000_000, 250_000, 10 * S), 13 * S, 10.0),
    (figures(10 * S, -5, 250_000, 10 * S), 12 * S, 0.0),
], ids=["never-used", "last-window", "first-window-in-progress", "overdue-window-idle",
        "refund-in-a-fresh-window"])
def test_share_percent(f, now, expected):
    assert share_percent(f, now) == pytest.approx(expected)
    assert WINDOW_NS == S


class Alive:
    """Every process is alive, with the start time the file says."""

    def start_time(self, pid):
        return 0


def test_read_usage_and_hami_smi_show_limit_and_share(tmp_path):
    s = layout.VgpuShared()
    s.header.magic, s.header.version = layout.MAGIC, layout.VERSION
    dev = s.devices[0]
    dev.uuid, dev.sm_limit = b"GPU-a", 30
    dev.compute.figures = figures(5 * S, 0, 298_000, 5 * S)
    dev.compute.figures.launches, dev.compute.figures.waits = 1000, 40
    s.procs[3].pid = 77
    s.procs[3].compute = figures(5 * S, 0, 151_000, 5 * S)
    path = tmp_path / "vgpu.cache"
    path.write_bytes(bytes(s))
    snap = read_usage(path, Alive(), clock=lambda: 5 * S + S // 2)
    d, p = snap.devices[0], snap.processes[0]
    assert (d.sm_limit, d.sm_share, d.sm_launches, d.sm_waits) == (30, 29.8, 1000, 40)
    assert (p.pid, p.sm_share) == (77, 15.1)
    text = render(snap)
    assert "  30    29.8  0" in text and "      77    -         0 B    15.1" in text
