"""The dashboard at the openb cluster's size (1,213 nodes, 6,212 GPUs from the shipped trace,
a few thousand pods on them): the real snapshot builder, server and page, fed a synthetic
view instead of a simulated cluster of that size. First paint within 2 s, only the rows in
view drawn, scrolling to the end and the search still work."""
from __future__ import annotations

import time

import pytest

from hami_common.pod_devices import ContainerDevice
from hami_common.request import RequestDefaults
from hami_control.config import DashboardConfig
from hami_control.dashboard import Dashboard
from hami_control.placement.view import Reservation
from hami_control.state import make_state
from hami_sim.replay import catalog
from hami_sim.replay.trace import load_nodes

PAINT_BUDGET_MS = 2000
PODS_PER_GPU = 2            # on about 60 % of the GPUs (_openb_state)


def _openb_state():
    state = make_state()
    nodes = load_nodes(catalog.nodes_path("openb"))
    pods = 0
    with state.lock:
        for node in nodes:
            state.view.upsert_node(node.name, node.devices(), node.cpu_milli, node.memory_mib)
        for node in state.view.nodes:
            for dev in node.devices[: len(node.devices) // 2 + 1]:     # about 60 % in use
                for _ in range(PODS_PER_GPU):
                    pods += 1
                    share = ContainerDevice(uuid=dev.uuid, usedmem=dev.devmem // 4, usedcores=25)
                    state.view.reserve(Reservation(pod=f"team-{pods % 40}/job-{pods}",
                                                   node=node.name, devices=((share,),)))
    return state, nodes, pods


@pytest.fixture(scope="module")
def openb_dashboard():
    state, nodes, pods = _openb_state()
    dash = Dashboard(DashboardConfig(port=0), state, RequestDefaults())
    dash.record.on_pod({"metadata": {"name": "too-big", "namespace": "team-1"},
                        "spec": {"containers": [{"name": "main", "resources": {"limits": {
                            "nvidia.com/gpu": "1", "nvidia.com/gpumem": "900000"}}}]},
                        "status": {"phase": "Pending"}}, False)
    dash.start()
    # As for a hami-control that has run a moment: its first snapshot is built (at this size
    # 0.3-0.4 s on an idle 2-core machine); the budget is the page's, from navigation on.
    dash.cache.get()
    try:
        yield dash, nodes, pods
    finally:
        dash.stop()


def test_openb_size_first_paint_within_budget(openb_dashboard, browser):
    dash, nodes, pods = openb_dashboard
    assert len(nodes) == 1213 and sum(n.gpus for n in nodes) == 6212
    browser.get("about:blank")
    started = time.monotonic()
    browser.get(dash.url + "/")
    paint_ms = browser.wait_js("return window.hamiDash.firstPaint", timeout=30, poll=0.02)
    wall = time.monotonic() - started
    assert paint_ms < PAINT_BUDGET_MS, f"first paint {paint_ms:.0f} ms (wall {wall:.2f} s)"
    overview = browser.js("return window.hamiDash.snap.overview")
    assert (overview["gpus"], overview["nodes"], overview["pods"], overview["pending"]) == \
        (6212, 1213, pods + 1, 1)
    timings = browser.js("return performance.getEntriesByType('resource').map(r => "
                         "`${r.name.split('/').pop()} ${Math.round(r.startTime)}-"
                         "${Math.round(r.responseEnd)}`).join(', ')")
    print(f"openb-size first paint {paint_ms:.0f} ms (budget {PAINT_BUDGET_MS}; {timings})")
    drawn = browser.js("return document.querySelectorAll('#spacer .row').length")
    assert 0 < drawn < 100, f"{drawn} rows in the DOM: the list is not virtualised"
    # To the end of the list: the last node's last GPU is drawn.
    last = nodes[-1].name
    browser.js("const b = document.getElementById('rows'); b.scrollTop = b.scrollHeight")
    browser.wait_js("return !!document.querySelector(`.row[data-node='${arguments[0]}']"
                    "[data-uuid]`)", last)
    pending = browser.js("return document.getElementById('pending').textContent")
    assert "team-1/too-big" in pending
    # The search narrows 6,212 GPUs to one pod's node.
    browser.type_into("#search", f"job-{pods}")
    shown = browser.wait_js("const r = [...document.querySelectorAll('.row[data-uuid]')];"
                            "return r.length && document.querySelector('i.hit') && "
                            "[...new Set(r.map(x => x.dataset.node))]")
    assert len(shown) == 1, shown
