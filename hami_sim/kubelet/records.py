"""What the kubelet double remembers and dumps per pod: each container's allocation (the
plugin's answer) and, for pods it could not start, the last allocation failure."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class ContainerAllocation:
    """Everything the device plugins gave one container, merged over its resources."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    init: bool
    devices_by_resource: dict = field(default_factory=dict)  # resource -> [device IDs]
    envs: dict = field(default_factory=dict)
    mounts: list = field(default_factory=list)  # {container_path, host_path, read_only}
    devices: list = field(default_factory=list)  # {container_path, host_path, permissions}
    annotations: dict = field(default_factory=dict)
    cdi_devices: list = field(default_factory=list)
    # From the pod spec, so the demo can run the container's command with this environment.
    image: str = ""
    command: list = field(default_factory=list)
    args: list = field(default_factory=list)
    spec_env: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready form (what the dump files hold)."""
        return asdict(self)


@dataclass
class AllocationFailure:
    """Why a pod could not get its devices (the plugin's message, or the kubelet's)."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    resource: str
    message: str
    attempts: int = 1
    next_retry_s: float = 0.0

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


class RecordDir:
    """Dumps records under <root>/<namespace>/<pod>/<container>.json (and failure.json)."""

    def __init__(self, root):
        self.root = Path(root) if root else None

    def _pod_dir(self, namespace: str, pod: str) -> Path:
        return self.root / namespace / pod

    @staticmethod
    def _write(path: Path, data: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
        os.replace(tmp, path)

    def save_allocation(self, rec: ContainerAllocation) -> None:
        """Writes one container's allocation."""
        if self.root:
            self._write(self._pod_dir(rec.namespace, rec.pod) / f"{rec.container}.json",
                        rec.to_dict())

    def save_failure(self, failure: AllocationFailure) -> None:
        """Writes the pod's latest failure."""
        if self.root:
            self._write(self._pod_dir(failure.namespace, failure.pod) / "failure.json",
                        failure.to_dict())

    def clear_failure(self, namespace: str, pod: str) -> None:
        """Removes the failure file once the pod got its devices."""
        if self.root:
            (self._pod_dir(namespace, pod) / "failure.json").unlink(missing_ok=True)


def load_allocation(path) -> ContainerAllocation:
    """Reads a dumped container allocation back."""
    return ContainerAllocation(**json.loads(Path(path).read_text()))
