"""Watchers: one bounded queue per open watch, fed by the store without ever blocking it."""
from __future__ import annotations

import threading
from collections import deque
from typing import Callable, NamedTuple


class Entry(NamedTuple):
    """A stored object: the decoded dict (never mutated once stored), its JSON, its version."""

    obj: dict
    raw: bytes
    rv: int


class Event(NamedTuple):
    """One change in the store; old/new are None for creations/deletions."""

    rv: int
    rkey: str
    namespace: str
    old: Entry | None
    new: Entry | None


def event_line(kind: str, raw: bytes) -> bytes:
    """One line of a watch stream (the object's JSON is spliced in, not re-encoded)."""
    return b'{"type":"' + kind.encode() + b'","object":' + raw + b"}\n"


class Watcher:
    """The queue behind one watch request; closed when it overflows or when told to."""

    def __init__(self, rkey: str, namespace: str | None, matches: Callable[[dict], bool],
                 limit: int):
        self.rkey = rkey
        self.namespace = namespace
        self._matches = matches
        self._limit = limit
        self._cond = threading.Condition(threading.Lock())
        self._items: deque = deque()
        self.closed: str | None = None  # why it was closed, once it is

    def classify(self, event: Event) -> tuple[str, bytes] | None:
        """The event as this watcher sees it: a selector change turns MODIFIED into
        ADDED/DELETED, as on the real server. None when it does not concern the watcher."""
        if event.rkey != self.rkey:
            return None
        if self.namespace is not None and event.namespace != self.namespace:
            return None
        was = event.old is not None and self._matches(event.old.obj)
        now = event.new is not None and self._matches(event.new.obj)
        if was and now:
            return "MODIFIED", event.new.raw
        if now:
            return "ADDED", event.new.raw
        if was:
            # A deletion carries the final state; leaving the selector carries the new state.
            return "DELETED", (event.new or event.old).raw
        return None

    def offer(self, event: Event) -> None:
        """Queues the event if it concerns this watcher; called with the store lock held."""
        item = self.classify(event)
        if item is None:
            return
        with self._cond:
            if self.closed:
                return
            if len(self._items) >= self._limit:
                # A watcher this far behind is dropped, as the real server does, so that writers
                # never wait for a slow reader.
                self.closed = "overflow"
                self._items.clear()
            else:
                self._items.append(item)
            self._cond.notify()

    def preload(self, items: list[tuple[str, bytes]]) -> None:
        """Queues the initial events (state or history) ahead of live ones, without a bound."""
        with self._cond:
            self._limit += len(items)  # the bound is for live events only
            self._items.extendleft(reversed(items))
            self._cond.notify()

    def next(self, timeout: float) -> tuple[str, bytes] | None:
        """The next (type, raw object), or None on timeout or once closed."""
        with self._cond:
            if not self._items and not self.closed:
                self._cond.wait(timeout)
            if self._items:
                return self._items.popleft()
            return None

    def close(self, reason: str) -> None:
        """Ends the watch; its stream stops at the next wake-up."""
        with self._cond:
            if not self.closed:
                self.closed = reason
            self._cond.notify_all()
