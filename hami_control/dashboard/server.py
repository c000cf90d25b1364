"""The dashboard's HTTP side: the static page (static/, hand-written, no build step) and
GET /api/snapshot, cached for a moment and answered 304 when the page already has it, so that
a second browser tab or a quick poll costs no rebuild and no transfer."""
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


class SnapshotCache:
    """The last snapshot's JSON and ETag; rebuilt when older than FRESH_S."""

    def __init__(self, build, on_built=lambda snap: None):
        self.build, self.on_built = build, on_built
        self._lock = threading.Lock()
        self._made, self._body, self._etag = 0.0, b"", ""

    def get(self) -> tuple:
        """(JSON bytes, ETag)."""
        with self._lock:
            if time.monotonic() - self._made >= FRESH_S or not self._body:
                snap = self.build()
                self.on_built(snap)
                self._body = json.dumps(snap, separators=(",", ":")).encode()
                self._etag = '"' + hashlib.sha1(self._body).hexdigest()[:20] + '"'
                self._made = time.monotonic()
            return self._body, self._etag


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
        body, etag = cache.get()
        headers = {"ETag": etag, "Cache-Control": "no-cache"}
        if bottle.request.headers.get("If-None-Match") == etag:
            return bottle.HTTPResponse(status=304, headers=headers)
        headers["Content-Type"] = "application/json"
        return bottle.HTTPResponse(body, headers=headers)

    @app.get("/healthz")
    def healthz():
        return {"ok": True}
    return app


class HealthNews:
    """Turns GPU health changes between snapshots into events."""

    def __init__(self, record: Record):
        self.record, self._seen = record, {}

    def __call__(self, snap: dict) -> None:
        fresh = []
        for node in snap["nodes"]:
            for g in node["gpus"]:
                before = self._seen.get(g["uuid"])
                self._seen[g["uuid"]] = g["healthy"]
                if before is not None and before != g["healthy"]:
                    xids = ",".join(map(str, g.get("xids", []))) or "none counted"
                    text = (f"GPU {g['index']} of {node['name']} ({g['uuid']}) "
                            + (f"Unhealthy (XID {xids})" if not g["healthy"] else "Healthy again"))
                    fresh.append((text, node["name"], g["uuid"]))
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
        return self

    def stop(self) -> None:
        """Stops serving and scraping."""
        self.scraper.stop()
        if self.server is not None:
            self.server.stop()

    @property
    def url(self) -> str:
        """Where the page is."""
        return self.server.url if self.server else ""
