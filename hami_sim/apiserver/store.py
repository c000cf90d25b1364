"""The object store: objects by resource and name, one cluster-wide resourceVersion, a bounded
history of changes for watches, and the open watchers.

Stored objects are never mutated: a write builds a new dict outside the lock and swaps it in
with a compare-and-swap, so the lock only covers the swap, the version bump, the JSON encoding
and queueing the event to watchers (which never blocks).
"""
from __future__ import annotations

import json
import threading
from collections import deque
from typing import Callable

from .errors import ApiError, gone
from .watch import Entry, Event, Watcher

DELETE = object()  # returned by an update function to delete the object
MAX_CAS_RETRIES = 100


class StoreError(RuntimeError):
    """The store could not complete a write (e.g. endless contention)."""


class Store:
    """In-memory objects with resourceVersions and watch history; safe for many threads."""

    def __init__(self, history: int = 10000, watch_queue: int = 1000):
        self._lock = threading.Lock()
        self._rv = 0
        self._objects: dict[str, dict[str, dict[str, Entry]]] = {}
        self._history: deque[Event] = deque()
        self._history_limit = max(1, history)
        self._compacted = 0  # newest version that fell out of the history
        self._watchers: set[Watcher] = set()
        self.watch_queue = watch_queue
        self.dirty = threading.Event()

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion."""
        return self._rv

    def get(self, rkey: str, namespace: str, name: str) -> Entry | None:
        """The stored entry, or None."""
        return self._objects.get(rkey, {}).get(namespace, {}).get(name)

    def list(self, rkey: str, namespace: str | None) -> tuple[list[Entry], int]:
        """A consistent snapshot of the entries (of one namespace, or all) and its version."""
        with self._lock:
            spaces = self._objects.get(rkey, {})
            if namespace is not None:
                entries = list(spaces.get(namespace, {}).values())
            else:
                entries = [e for space in spaces.values() for e in space.values()]
            return entries, self._rv

    def write(self, rkey: str, namespace: str, name: str,
              change: Callable[[Entry | None], dict | object]) -> tuple[Entry | None, Entry | None]:
        """Applies change(current) -> new object (or DELETE) atomically; returns (old, new).

        change runs outside the lock and may run again if another writer got in first; it must
        not mutate its argument and may raise ApiError to refuse the write.
        """
        for _ in range(MAX_CAS_RETRIES):
            current = self.get(rkey, namespace, name)
            result = change(current)
            with self._lock:
                if self.get(rkey, namespace, name) is not current:
                    continue
                return current, self._commit(rkey, namespace, name, current, result)
        raise StoreError(f"{rkey} {namespace}/{name}: gave up after {MAX_CAS_RETRIES} "
                         "concurrent modifications")

    def _commit(self, rkey, namespace, name, current, result) -> Entry | None:
        self._rv += 1
        space = self._objects.setdefault(rkey, {}).setdefault(namespace, {})
        if result is DELETE:
            del space[name]
            meta = dict(current.obj["metadata"], resourceVersion=str(self._rv))
            final = dict(current.obj, metadata=meta)
            new = None
            gone_entry = Entry(final, json.dumps(final, separators=(",", ":")).encode(), self._rv)
            event = Event(self._rv, rkey, namespace, gone_entry, None)
        else:
            result["metadata"]["resourceVersion"] = str(self._rv)
            new = Entry(result, json.dumps(result, separators=(",", ":")).encode(), self._rv)
            space[name] = new
            event = Event(self._rv, rkey, namespace, current, new)
        self._history.append(event)
        if len(self._history) > self._history_limit:
            self._compacted = self._history.popleft().rv
        for watcher in self._watchers:
            watcher.offer(event)
        self.dirty.set()
        return new if new is not None else event.old

    def watch(self, rkey: str, namespace: str | None, since: int | None,
              matches: Callable[[dict], bool]) -> Watcher:
        """Opens a watch; since=None starts with ADDED for every current object (as for an
        unset or "0" resourceVersion), otherwise with the history after that version. Raises a
        410 ApiError when that history is gone."""
        watcher = Watcher(rkey, namespace, matches, self.watch_queue)
        with self._lock:
            if since is None:
                snapshot, events = self._snapshot(rkey, namespace), []
            else:
                if since < self._compacted:
                    raise gone(f"too old resource version: {since} ({self._compacted})")
                snapshot, events = [], [e for e in reversed(self._history) if e.rv > since]
                events.reverse()
            self._watchers.add(watcher)
        if snapshot:
            watcher.preload([("ADDED", e.raw) for e in snapshot if matches(e.obj)])
        else:
            watcher.preload([item for item in map(watcher.classify, events) if item])
        return watcher

    def _snapshot(self, rkey, namespace) -> list[Entry]:
        spaces = self._objects.get(rkey, {})
        if namespace is not None:
            return list(spaces.get(namespace, {}).values())
        return [e for space in spaces.values() for e in space.values()]

    def unwatch(self, watcher: Watcher) -> None:
        """Forgets a finished watcher."""
        with self._lock:
            self._watchers.discard(watcher)

    def close_watchers(self, reason: str) -> int:
        """Closes every open watch; returns how many."""
        with self._lock:
            watchers = list(self._watchers)
        for watcher in watchers:
            watcher.close(reason)
        return len(watchers)

    def dump(self) -> dict:
        """Every object and the current version, for the state file."""
        with self._lock:
            objects = [e.obj for spaces in self._objects.values()
                       for space in spaces.values() for e in space.values()]
            return {"resourceVersion": self._rv, "objects": objects}

    def load(self, objects: list[tuple[str, str, str, dict]], rv: int) -> None:
        """Replaces the contents with (rkey, namespace, name, obj) tuples; no events."""
        with self._lock:
            self._objects.clear()
            self._history.clear()
            for rkey, namespace, name, obj in objects:
                raw = json.dumps(obj, separators=(",", ":")).encode()
                entry = Entry(obj, raw, int(obj["metadata"].get("resourceVersion") or 0))
                self._objects.setdefault(rkey, {}).setdefault(namespace, {})[name] = entry
            self._rv = max([rv] + [e.rv for s in self._objects.values()
                                   for sp in s.values() for e in sp.values()])
            self._compacted = self._rv


__all__ = ["Store", "StoreError", "DELETE", "ApiError"]
