"""The installed soak tells kube-scheduler's exit after a lost Lease apart from a crash."""
from hami_sim.soak.lease_loss import LeaseLosses

T0 = 1_800_000_000.0                      # 2027-01-15T08:00:00Z


def stamp(t: float) -> str:
    from datetime import datetime, timezone
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(restarts: int, ended: float = 0.0, exit_code: int = 1) -> dict:
    last = {"terminated": {"finishedAt": stamp(ended), "exitCode": exit_code}} if ended else {}
    return {"metadata": {"name": "hami-control-0"}, "status": {"containerStatuses": [
        {"name": "kube-scheduler", "restartCount": restarts, "lastState": last}]}}


class World:
    """The release's pods over time: views[i] from the i-th second after T0."""

    def __init__(self, views):
        self.views, self.t = views, T0

    def pods(self):
        return [self.views[min(int(self.t - T0), len(self.views) - 1)]]

    def advance(self, s):
        self.t += s


def run(views, output, fault_s=3.0):
    """Watches a fault of fault_s seconds; (restarts noted, report lines)."""
    world, noted = World(views), []
    losses = LeaseLosses(world.pods, lambda p, c: output, lambda *key: noted.append(key),
                         clock=lambda: world.t, sleep=world.advance)

    def fault():
        world.advance(fault_s)
        return 1.5
    assert losses.around("kube-apiserver-restarted", fault) == 1.5
    return noted, losses.found


def test_a_restart_after_a_lost_lease_is_noted_once():
    views = [pod(0)] * 5 + [pod(1, ended=T0 + 4)] * 30
    noted, found = run(views, 'E1204 "Leaderelection lost"\n')
    assert noted == [("hami-control-0", "kube-scheduler")]
    assert len(found) == 1 and "kube-apiserver-restarted" in found[0] and "exit 1" in found[0]


def test_a_crash_or_a_kill_is_not_a_lost_lease():
    views = [pod(0)] * 5 + [pod(1, ended=T0 + 4, exit_code=137)] * 30
    assert run(views, "panic: something else\n") == ([], [])


def test_a_restart_from_before_the_fault_is_not_counted():
    views = [pod(1, ended=T0 - 60)] * 40          # restarted long before, count unchanged
    assert run(views, "Leaderelection lost\n") == ([], [])
