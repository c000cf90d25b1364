"""Leader election on a coordination.k8s.io/v1 Lease, the way client-go's leaderelection does it.

The holder renews `spec.renewTime` every retry period; a candidate takes the Lease over once it
has seen the same holder and renew time for a whole lease duration (measured on its own
monotonic clock, so clock skew between replicas does not matter). Every write carries the
resourceVersion it read, so two candidates never both win. A leader that could not renew
within the renew deadline stops leading before anyone else may take over.
"""
import logging
import threading
from datetime import datetime
from typing import Callable, Optional

from hami_control.clock import Clock, SystemClock
from hami_control.cluster.api import ApiError, Conflict
from hami_control.config import LeaseConfig

log = logging.getLogger(__name__)


def micro_time(when: datetime) -> str:
    """Kubernetes MicroTime: RFC3339 with microseconds, in UTC."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Takes part in the election; `is_leader` says whether this replica may act now."""

    def __init__(self, api, config: LeaseConfig, clock: Clock = SystemClock(),
                 on_change: Optional[Callable[[bool], None]] = None):
        self.api, self.config, self.clock = api, config, clock
        self.on_change = on_change or (lambda leading: None)
        self._renewed_at: Optional[float] = None     # monotonic time of our last renewal
        self._observed: tuple = ()                   # (holder, renewTime) last seen
        self._observed_at = 0.0
        self.holder = ""
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._was_leader = False

    def start(self) -> "LeaderElector":
        """Starts campaigning in a thread."""
        self._thread = threading.Thread(target=self._loop, name="leader-election", daemon=True)
        self._thread.start()
        return self

    def stop(self, release: bool = True) -> None:
        """Stops; a leader gives the Lease up so that another replica takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.config.retry_period_s + 5)
        if release and self.is_leader:
            self._release()
        self._renewed_at = None

    @property
    def is_leader(self) -> bool:
        """Whether this replica holds the Lease and renewed it within the renew deadline."""
        renewed = self._renewed_at
        return renewed is not None and \
            self.clock.monotonic() - renewed < self.config.renew_deadline_s

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.try_acquire_or_renew():
                    self._renewed_at = self.clock.monotonic()
            except ApiError as e:
                log.warning("leader election: %s", e)
            self._notify()
            self._stop.wait(self.config.retry_period_s)

    def _notify(self) -> None:
        leading = self.is_leader
        if leading != self._was_leader:
            self._was_leader = leading
            log.info("leader election: %s the lease %s/%s", "acquired" if leading else "lost",
                     self.config.namespace, self.config.name)
            self.on_change(leading)

    def try_acquire_or_renew(self) -> bool:
        """One round: True when this replica holds the Lease afterwards."""
        cfg, now = self.config, self.clock.now()
        lease = self.api.get_lease(cfg.namespace, cfg.name)
        if lease is None:
            return self._create(now)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        self.holder = holder
        observed = (holder, spec.get("renewTime"))
        if observed != self._observed:
            self._observed, self._observed_at = observed, self.clock.monotonic()
        duration = float(spec.get("leaseDurationSeconds") or cfg.duration_s)
        if holder and holder != cfg.identity and \
                self.clock.monotonic() - self._observed_at < duration:
            return False
        new_spec = dict(spec, holderIdentity=cfg.identity, renewTime=micro_time(now),
                        leaseDurationSeconds=int(cfg.duration_s))
        if holder != cfg.identity:
            new_spec["acquireTime"] = micro_time(now)
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        try:
            self.api.replace_lease(cfg.namespace, cfg.name, dict(lease, spec=new_spec))
        except Conflict:
            return False          # someone else wrote it first; look again next round
        self.holder = cfg.identity
        return True

    def _create(self, now: datetime) -> bool:
        cfg = self.config
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                 "spec": {"holderIdentity": cfg.identity, "leaseDurationSeconds":
                          int(cfg.duration_s), "acquireTime": micro_time(now),
                          "renewTime": micro_time(now), "leaseTransitions": 0}}
        try:
            self.api.create_lease(cfg.namespace, lease)
        except Conflict:
            return False
        self.holder = cfg.identity
        return True

    def _release(self) -> None:
        cfg = self.config
        try:
            lease = self.api.get_lease(cfg.namespace, cfg.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != cfg.identity:
                return
            spec = dict(lease["spec"], holderIdentity="", leaseDurationSeconds=1)
            self.api.replace_lease(cfg.namespace, cfg.name, dict(lease, spec=spec))
            log.info("leader election: released the lease %s/%s", cfg.namespace, cfg.name)
        except ApiError as e:
            log.warning("leader election: could not release the lease: %s", e)


class AlwaysLeader:
    """Stands in for the elector when leader election is off (one replica)."""

    holder = "this replica (leader election off)"
    is_leader = True

    def start(self) -> "AlwaysLeader":
        return self

    def stop(self, release: bool = True) -> None:
        return None
