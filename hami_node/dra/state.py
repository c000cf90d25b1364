"""What hami-node has prepared, on disk: the checkpoint of prepared claims, the claims' CDI
spec files and shared directories. Every file is written whole (a temporary file renamed),
so a crash at any instant leaves the old state or the new one, never half of one.

Checkpoint (JSON, `version` 1): {"version": 1, "claims": {<claim UID>: {"namespace", "name",
"devices": [ClaimDevice fields], "cdiIds": [[...] per device]}}}. A prepare finds its claim
here after a restart of kubelet or hami-node and answers the same (idempotent); unprepare
removes the entry last.
"""
import json
import os
import shutil
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

from hami_common.constants import DRA_CDI_KIND
from hami_node.dra.claims import ClaimDevice
from hami_node.plugin.install import write_atomic
from hami_node.plugin.layout import HostLayout

VERSION = 1


class StateError(Exception):
    """The checkpoint cannot be read or written; the message says what to do."""


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    """The claim's CDI spec file (<vendor>-<class>_<uid>.json, CDI's naming habit)."""
    return Path(cdi_dir) / f"{DRA_CDI_KIND.replace('/', '-')}_{claim_uid}.json"


class PreparedState:
    """The checkpoint file and the files of each prepared claim."""

    def __init__(self, checkpoint: Path, cdi_dir: Path, layout: HostLayout):
        self.path, self.cdi_dir, self.layout = Path(checkpoint), Path(cdi_dir), layout
        self._lock = threading.Lock()
        self._claims = self._load()

    def _load(self) -> dict:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise StateError(f"DRA checkpoint {self.path} is unreadable ({e}); move it aside "
                             "and restart hami-node (kubelet prepares the claims again)") from e
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise StateError(f"DRA checkpoint {self.path} has version "
                             f"{doc.get('version') if isinstance(doc, dict) else '?'}, not "
                             f"{VERSION}; move it aside and restart hami-node")
        return dict(doc.get("claims") or {})

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps({"version": VERSION, "claims": self._claims}, sort_keys=True)
        write_atomic(self.path, data.encode(), 0o600)

    def get(self, claim_uid: str) -> Optional[dict]:
        """The checkpointed entry of a claim whose files are all in place, else None."""
        with self._lock:
            entry = self._claims.get(claim_uid)
        if entry and spec_path(self.cdi_dir, claim_uid).is_file() and \
                self.layout.claim_dir(claim_uid).is_dir():
            return entry
        return None

    def claims(self) -> dict:
        """Claim UID -> entry, a copy."""
        with self._lock:
            return dict(self._claims)

    def record(self, claim: dict, devices, ids, spec: dict) -> dict:
        """Writes the claim's shared directory, metadata and CDI spec, then checkpoints it."""
        meta = claim.get("metadata") or {}
        uid = meta["uid"]
        entry = {"namespace": meta.get("namespace"), "name": meta.get("name"),
                 "devices": [asdict(d) for d in devices], "cdiIds": ids}
        folder = self.layout.claim_dir(uid)
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o777)   # the containers' processes may run as any user
        write_atomic(self.layout.claim_meta(uid), json.dumps(entry).encode(), 0o644)
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(spec_path(self.cdi_dir, uid), json.dumps(spec, indent=1).encode(), 0o644)
        with self._lock:
            self._claims[uid] = entry
            self._save()
        return entry

    def remove(self, claim_uid: str) -> None:
        """Removes the claim's CDI spec and shared directory, then its checkpoint entry."""
        spec_path(self.cdi_dir, claim_uid).unlink(missing_ok=True)
        shutil.rmtree(self.layout.claim_dir(claim_uid), ignore_errors=True)
        self.layout.claim_meta(claim_uid).unlink(missing_ok=True)
        with self._lock:
            if self._claims.pop(claim_uid, None) is not None:
                self._save()

    def collect_orphans(self, clock: Callable[[], float], grace: float) -> int:
        """Removes the files of claims the checkpoint does not hold (a prepare that died half
        way, or a checkpoint moved aside) once untouched for `grace` seconds; how many."""
        known = set(self.claims())
        prefix = spec_path(self.cdi_dir, "").name[:-len(".json")]
        found: dict = {}
        if self.layout.claims.is_dir():
            for path in self.layout.claims.iterdir():
                found.setdefault(path.name.removesuffix(".json"), []).append(path)
        if self.cdi_dir.is_dir():
            for path in self.cdi_dir.glob(prefix + "*.json"):
                found.setdefault(path.stem[len(prefix):], []).append(path)
        removed = 0
        for uid, paths in found.items():
            try:
                newest = max(p.stat().st_mtime for p in paths)
            except FileNotFoundError:
                continue
            if uid not in known and clock() - newest > grace:
                self.remove(uid)
                removed += 1
        return removed


def devices_of(entry: dict) -> list:
    """The ClaimDevices of a checkpoint entry."""
    return [ClaimDevice(**d) for d in entry.get("devices") or []]

