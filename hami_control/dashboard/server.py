"""The dashboard's HTTP side: the static page (static/, hand-written, no build step) and
GET /api/snapshot, built ahead of requests by a thread (SnapshotCache), served gzipped when
asked and answered 304 when the page already has it, so that a poll or a second tab costs
neither a build nor a transfer."""
import gzip
import hashlib
import json
import logging
import threading
import time
from pathlib import Path
from typing import Optional

import bottle

from hami_control.dashboard import snapshot
from hami_control.dashboard.record import Record
from hami_control.dashboard.scrape import Scraper, UrlBook
from hami_control.server.wsgi import HttpServer

log = logging.getLogger(__name__)
STATIC = Path(__file__).resolve().parent / "static"
FRESH_S = 0.4           # a snapshot younger than this is served again (polls, several tabs)
WATCHED_S = 60.0        # rebuilt every FRESH_S while a page polled this lately,
UNWATCHED_S = 10.0      # else this often (a new visitor's first paint is at most this old)


class SnapshotCache:
    """The last snapshot's JSON (plain and gzipped) and ETag, built by a thread: every FRESH_S
    while a page polled within WATCHED_S, else every UNWATCHED_S, and only when its
    fingerprint changed. A request is answered from what is built (waking the thread when it
    is old), so neither a poll nor a new visitor's first paint waits for a build; only the
    very first request, before anything was built, does."""

    def __init__(self, build, fingerprint, on_built=lambda snap: None):
        self.build, self.fingerprint, self.on_built = build, fingerprint, on_built
        self._lock = threading.Lock()           # the fields below
        self._building = threading.Lock()       # one build at a time
        self._made, self._print, self._body, self._gzipped, self._etag = 0.0, None, b"", b"", ""
        self._asked = 0.0
        self._wake, self._stop = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dashboard-snapshot",
                                        daemon=True)

    def get(self, gzipped: bool = False) -> tuple:
        """(JSON bytes, gzip-compressed if asked, ETag)."""
        with self._lock:
            self._asked = now = time.monotonic()
            ready, old = bool(self._body), now - self._made >= FRESH_S
        if not ready:
            self.refresh()
        elif old:
            self._wake.set()
        with self._lock:
            return (self._gzipped if gzipped else self._body), self._etag

    def refresh(self) -> None:
        """Builds the snapshot again if its fingerprint changed."""
        with self._building:
            mark = self.fingerprint()
            with self._lock:
                if self._body and mark == self._print:
                    self._made = time.monotonic()       # checked: still current
                    return
            snap = self.build()
            self.on_built(snap)
            body = json.dumps(snap, separators=(",", ":")).encode()
            # Once per build: an openb-size snapshot is megabytes of repetitive JSON.
            zipped = gzip.compress(body, compresslevel=1)
            etag = '"' + hashlib.sha1(body).hexdigest()[:20] + '"'
            with self._lock:
                self._body, self._gzipped, self._etag = body, zipped, etag
                self._made, self._print = time.monotonic(), mark

    def _loop(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                due = (now - self._made >= UNWATCHED_S or
                       (now - self._asked < WATCHED_S and now - self._made >= FRESH_S))
            if due:
                self.refresh()
            self._wake.wait(FRESH_S)
            self._wake.clear()
            if self._stop.is_set():
                return

    def start(self) -> None:
        """Builds and keeps building in a thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stops the thread."""
        self._stop.set()
        self._wake.set()


def make_app(cache: SnapshotCache) -> bottle.Bottle:
    """The dashboard's Bottle application (GET only)."""
    app = bottle.Bottle()

    @app.get("/")
    def index():
        return bottle.static_file("index.html", root=str(STATIC))

    @app.get("/static/<name:path>")
    def static(name):
        return bottle.static_file(name, root=str(STATIC))

    @app.get("/api/snapshot")
    def snap():
        gzipped = "gzip" in bottle.request.headers.get("Accept-Encoding", "")
        body, etag = cache.get(gzipped)
        headers = {"ETag": etag, "Cache-Control": "no-cache", "Vary": "Accept-Encoding"}
        if bottle.request.headers.get("If-None-Match") == etag:
            return bottle.HTTPResponse(status=304, headers=headers)
        headers["Content-Type"] = "application/json"
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        return bottle.HTTPResponse(body, headers=headers)

    @app.get("/healthz")
    def healthz():
        return {"ok": True}
    return app


class HealthNews:
    """Turns GPU health changes and newly counted XIDs between snapshots into events (the
    agent's Unhealthy verdict and its XID count come by different paths, in either order)."""

    def __init__(self, record: Record):
        self.record, self._seen = record, {}

    def __call__(self, snap: dict) -> None:
        fresh = []
        for node in snap["nodes"]:
            for g in node["gpus"]:
                xids = set(g.get("xids", ()))
                before = self._seen.get(g["uuid"])
                self._seen[g["uuid"]] = (g["healthy"], xids)
                if before is None:
                    continue
                name = f"GPU {g['index']} of {node['name']} ({g['uuid']})"
                new = sorted(xids - before[1])
                said = f" (XID {','.join(map(str, new))})" if new else ""
                if before[0] != g["healthy"]:
                    fresh.append((f"{name} {'Healthy again' if g['healthy'] else 'Unhealthy'}"
                                  f"{said}", node["name"], g["uuid"]))
                elif new:
                    fresh.append((f"{name}: XID {','.join(map(str, new))}", node["name"],
                                  g["uuid"]))
        for text, node, uuid in fresh:
            self.record.event("health", text, node=node, gpu=uuid)
        if fresh:
            snap["events"] = self.record.copy()[3][-snapshot.EVENTS_SHOWN:]


class Dashboard:
    """The dashboard of one hami-control: Record (fed by the sync and the filter), Scraper,
    and the HTTP server on its own listener."""

    def __init__(self, config, state, defaults):
        self.config, self.state = config, state
        self.record = Record(defaults)
        self.scraper = Scraper(UrlBook(config.node_metrics, self.record.agent_ip),
                               state.node_names, config.scrape_period_s)
        self.cache = SnapshotCache(
            lambda: snapshot.build(self.state, self.record, self.scraper.latest()),
            lambda: snapshot.fingerprint(self.state, self.record, self.scraper),
            HealthNews(self.record))
        self.server: Optional[HttpServer] = None

    def wrap_filter(self, handler):
        """The filter handler, telling the Record its answers (refusals)."""
        def filter_and_note(body):
            answer = handler(body)
            try:
                self.record.on_filter(body, answer)
            except Exception:       # the dashboard must never break a filter
                log.exception("dashboard: could not note a filter answer")
            return answer
        return filter_and_note

    def start(self) -> "Dashboard":
        """Serves (ConfigError naming --dashboard-listen if it cannot bind) and scrapes."""
        self.server = HttpServer(make_app(self.cache), self.config.host, self.config.port,
                                 threads=4, flag="--dashboard-listen").start()
        self.scraper.start()
        self.cache.start()
        return self

    def stop(self) -> None:
        """Stops serving and scraping."""
        self.scraper.stop()
        self.cache.stop()
        if self.server is not None:
            self.server.stop()

    @property
    def url(self) -> str:
        """Where the page is."""
        return self.server.url if self.server else ""
