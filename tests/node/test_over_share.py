"""The compute outside check on the simulated GPU: two pods given 30 % of one GPU each, one
process held to it by the shim, one beside it without the shim. hami-node reads the driver's
per-process utilization by host PID, maps it to the containers by their cgroups, and flags the
unthrottled one (Event, metric, log line) and never the throttled one."""
import time

from tenants import CORES, PERIOD_S, Tenant

# The check's bound (hami_node/plugin/overshare.py): flagged within
# PERIOD_S x (1 + threshold/share) + 1 s, under two periods; a loaded machine gets slack.
FLAG_WITHIN_S = 2 * PERIOD_S + 1 + 8


def test_the_unthrottled_container_is_flagged_and_the_throttled_one_never(hostile):
    honest, rogue = Tenant(hostile, "held"), Tenant(hostile, "unheld")
    try:
        _, held = honest.run_tenant("plain", 128, 120)
        assert held["error"] == 0
        env = {k: v for k, v in rogue.env.items() if k != "LD_PRELOAD"}
        started = time.monotonic()
        _, unheld = rogue.run_tenant("plain", 128, 120, env=env)
        event, _ = hostile.wait_event("unheld", "GPUComputeOverShare", timeout=FLAG_WITHIN_S + 10)
        took = time.monotonic() - started
        assert took < FLAG_WITHIN_S, f"flagged after {took:.1f} s"
        assert f"over its share of {CORES} %" in event.message
        assert str(unheld["pid"]) in event.message
        share = float(event.message.split(" used ")[1].split(" %")[0])
        assert share > CORES + 10
        print(f"unthrottled flagged after {took:.1f} s at {share} % of the GPU")
        over = hostile.over("hami_container_compute_over_share_percent")
        assert over.get("unheld", 0) > 10 and "held" not in over
        assert "default/unheld" in hostile.proc.log()
        time.sleep(2 * PERIOD_S)        # two more windows beside it: the shim still holds
        assert hostile.events("held", "GPUComputeOverShare") == []
        assert hostile.events("unheld", "GPUMemoryOverCap") == []     # 128 MiB: under its cap
    finally:
        honest.stop()
        rogue.stop()
