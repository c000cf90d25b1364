"""KueueCheck: hami-control as a Kueue admission check controller (`controllerName:
hami.io/gpu-fit`).

A ClusterQueue that lists an AdmissionCheck of this controller admits a Workload only once the
check is Ready. Kueue reserves the quota first (condition QuotaReserved) and waits with the
job suspended; every `period` the leader looks at those workloads, oldest first, and sets the
check Ready when every GPU pod of the workload fits on a GPU now (fit.py), or leaves it
Pending with the reason the first pod that does not fit got, the filter's own words
(`kubectl get workload -o yaml` shows it under status.admissionChecks). It also marks its
AdmissionChecks Active (Kueue keeps a ClusterQueue with an inactive check from admitting).

A check once Ready is left alone: the pods then go through kube-scheduler and the extender as
any pod does (room taken meanwhile by another pod means they wait, as without the check).
Without Kueue's CRDs the loop says so once and looks again every minute.
"""
import logging
import threading
from datetime import datetime, timezone
from typing import Callable

from hami_control.cluster.api import ApiError, Invalid, NotFound
from hami_control.kueue.fit import check_message, workload_pods

log = logging.getLogger(__name__)
CONTROLLER = "hami.io/gpu-fit"
ABSENT_RETRY_S = 60.0


def _conditions(obj: dict) -> dict:
    return {c.get("type"): c.get("status") for c in
            (obj.get("status") or {}).get("conditions") or []}


def waiting(workload: dict, checks: set) -> list:
    """(index, name) of this controller's checks that the workload waits on: Pending, with its
    quota reserved and not admitted yet."""
    conds = _conditions(workload)
    if conds.get("QuotaReserved") != "True" or conds.get("Admitted") == "True" or \
            conds.get("Finished") == "True":
        return []
    return [(i, s.get("name")) for i, s in
            enumerate((workload.get("status") or {}).get("admissionChecks") or [])
            if s.get("name") in checks and s.get("state") == "Pending"]


class KueueCheck:
    """The admission check loop (run on every replica, acting on the leader only)."""

    def __init__(self, state, api, defaults, is_leader: Callable[[], bool],
                 controller: str = CONTROLLER, period_s: float = 2.0):
        self.state, self.api, self.defaults = state, api, defaults
        self.is_leader, self.controller, self.period_s = is_leader, controller, period_s
        self._stop = threading.Event()
        self._thread = None
        self._absent = False

    def start(self) -> "KueueCheck":
        """Starts the loop."""
        self._thread = threading.Thread(target=self._loop, name="kueue-check", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the loop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(ABSENT_RETRY_S if self._absent else self.period_s):
            if not self.is_leader():
                continue
            try:
                self.run_once()
                self._absent = False
            except NotFound:
                if not self._absent:
                    log.info("Kueue's CRDs are not installed (kueue.x-k8s.io/v1beta2): the "
                             "%s admission check waits for them", self.controller)
                self._absent = True
            except ApiError as e:
                log.warning("admission check %s: %s", self.controller, e)

    def run_once(self) -> None:
        """One pass: activate our AdmissionChecks, decide the workloads waiting on them."""
        checks = set()
        for ac in self.api.list_kueue("admissionchecks"):
            if (ac.get("spec") or {}).get("controllerName") != self.controller:
                continue
            name = ac["metadata"]["name"]
            checks.add(name)
            if _conditions(ac).get("Active") != "True":
                self.api.patch_kueue_status("admissionchecks", "", name, {"conditions": [{
                    "type": "Active", "status": "True", "reason": "Active",
                    "message": "hami-control checks that a GPU fits every pod",
                    "lastTransitionTime": _now()}]})
        if not checks:
            return
        todo = [(wl, waiting(wl, checks)) for wl in sorted(
            self.api.list_kueue("workloads"),
            key=lambda w: (w["metadata"].get("creationTimestamp") or "", w["metadata"]["name"]))]
        todo = [(wl, slots) for wl, slots in todo if slots]
        pods = [workload_pods(wl, self.defaults) for wl, _ in todo]
        results = self.state.fit_all([p for p in pods if not p.problem])
        verdicts = iter(results)
        for (wl, slots), wp in zip(todo, pods):
            failed_at, why = (0, "") if wp.problem else next(verdicts)
            self._write(wl, slots, failed_at < 0 and not wp.problem,
                        check_message(wp, failed_at, why))

    def _write(self, workload: dict, slots: list, ready: bool, message: str) -> None:
        meta = workload["metadata"]
        states = (workload.get("status") or {}).get("admissionChecks") or []
        ops = []
        for index, name in slots:
            if not ready and states[index].get("message") == message:
                continue
            path = f"/status/admissionChecks/{index}"
            ops += [{"op": "test", "path": f"{path}/name", "value": name},
                    {"op": "replace", "path": f"{path}/message", "value": message[:32768]}]
            if ready:
                ops += [{"op": "replace", "path": f"{path}/state", "value": "Ready"},
                        {"op": "replace", "path": f"{path}/lastTransitionTime",
                         "value": _now()}]
        if not ops:
            return
        try:
            self.api.json_patch_kueue_status("workloads", meta.get("namespace", ""),
                                             meta["name"], ops)
        except (Invalid, NotFound):
            return                    # changed or gone meanwhile: the next pass sees it anew
        log.info("workload %s/%s: %s %s", meta.get("namespace"), meta["name"],
                 "Ready:" if ready else "Pending:", message)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
