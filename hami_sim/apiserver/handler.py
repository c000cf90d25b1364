"""The HTTP/1.1 edge: request parsing, body limits, fault injection, JSON responses and chunked
watch streams. One thread per connection; keep-alive by default."""
from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

from . import tables
from .api import dumps, query_flag
from .errors import ApiError, bad_request, internal
from .routes import Target, resolve
from .watch import event_line

if TYPE_CHECKING:
    from .server import App

_BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")
_DRAIN_LIMIT = 64 * 1024 * 1024
_REASON = {200: "OK", 201: "Created", 400: "Bad Request", 404: "Not Found", 409: "Conflict",
           410: "Gone", 413: "Request Entity Too Large", 415: "Unsupported Media Type",
           422: "Unprocessable Entity", 500: "Internal Server Error"}


class Handler(BaseHTTPRequestHandler):
    """Serves the API double; the App (store, faults, options) hangs off the server."""

    protocol_version = "HTTP/1.1"
    server_version = "hami-sim-apiserver"
    app: "App"

    def setup(self):
        super().setup()
        # Responses are one write each; no reason to let Nagle hold them back.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.app = self.server.app
        self.app.connections.add(self.connection)

    def finish(self):
        self.app.connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass  # the peer is gone; nothing left to flush

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        """Per-request logging is off: it would cost more than the request."""

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = lambda self: self._dispatch()

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        head = (f"HTTP/1.1 {code} {_REASON.get(code, 'Status')}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                f"Cache-Control: no-cache, private\r\n")
        if self.close_connection:
            head += "Connection: close\r\n"
        self.wfile.write(head.encode() + b"\r\n" + body)

    def _send_error(self, err: ApiError) -> None:
        self._send(err.code, dumps(err.status()))

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = self._read_chunked()
        else:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError as e:
                self.close_connection = True
                raise bad_request("Content-Length is not a number") from e
            if length > self.app.max_body:
                self._discard(length)
                raise ApiError(413, "RequestEntityTooLarge", f"the request body is {length} "
                               f"bytes, more than the limit of {self.app.max_body}")
            raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise bad_request(f"the request body is not valid JSON: {e}") from e

    def _discard(self, length: int) -> None:
        """Reads and drops an oversized body, so the client can read our 413 instead of a
        broken pipe; absurd sizes are not worth reading and just close the connection."""
        self.close_connection = True
        if length <= _DRAIN_LIMIT:
            while length > 0:
                got = self.rfile.read(min(length, 1 << 20))
                if not got:
                    break
                length -= len(got)

    def _read_chunked(self) -> bytes:
        chunks, total = [], 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip() or b"x", 16)
            except ValueError as e:
                self.close_connection = True
                raise bad_request("malformed chunked request body") from e
            if size == 0:
                self.rfile.readline(1024)
                return b"".join(chunks)
            total += size
            if total > self.app.max_body:
                self.close_connection = True
                raise ApiError(413, "RequestEntityTooLarge",
                               f"the request body exceeds the limit of {self.app.max_body} bytes")
            chunks.append(self.rfile.read(size))
            self.rfile.readline(1024)

    def _dispatch(self) -> None:
        method = self.command
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        try:
            body = self._read_body() if method in _BODY_METHODS else None
            if url.path.startswith("/_sim/"):
                self._send(*self.app.admin(method, url.path, body))
                return
            if url.path in ("/healthz", "/readyz", "/livez"):
                self._send(200, b"ok", "text/plain")
                return
            target = resolve(url.path, self.app.address)
            if isinstance(target, dict):
                if method != "GET":
                    raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")
                self._send(200, dumps(target))
                return
            self._resource(method, target, query, body)
        except ApiError as e:
            self._send_error(e)
        except (ConnectionError, socket.timeout):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 a bug must answer a 500, not kill the connection
            self.app.log(f"internal error on {method} {self.path}: {e!r}")
            self._send_error(internal(f"internal error: {e!r}"))

    def _resource(self, method: str, target: Target, query: dict, body) -> None:
        watch = method == "GET" and query_flag(query, "watch")
        verb = target.verb(method, watch)
        resource = target.resource_name()
        faults = self.app.faults
        if faults.latency_ms:
            time.sleep(faults.latency_ms / 1000.0)
        rule = faults.pick(verb, resource, target.namespace or "", target.name)
        if rule is not None and not rule.after:
            raise rule.error(verb, resource)
        if watch:
            self._watch(target, query)
            return
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        code, payload = self.app.perform(verb, target, query, body, content_type)
        if rule is not None:
            raise rule.error(verb, resource)
        if verb in ("get", "list") and target.res is not None and self._table_version():
            payload = tables.render(target.res, verb, payload, self._table_version(), query)
        self._send(code, payload)

    def _table_version(self) -> str | None:
        """The Table version kubectl's Accept asks for (None: plain JSON)."""
        return tables.table_version(self.headers.get("Accept", ""))

    def _event(self, target: Target, kind: str, raw: bytes, query: dict) -> bytes:
        """One watch line; its object a one-row Table when the client asked for tables."""
        if version := self._table_version():
            raw = tables.watch_object(target.res, kind, raw, version, query)
        return event_line(kind, raw)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _watch(self, target: Target, query: dict) -> None:
        try:
            watcher = self.app.api.watch(target.res, target.namespace, query)
        except ApiError as e:
            if e.code != 410:
                raise
            # As the real server: 200, then one ERROR event carrying the 410 Status.
            self._start_stream()
            self._chunk(b'{"type":"ERROR","object":' + dumps(e.status()) + b"}\n")
            self._chunk(b"")
            return
        try:
            self._start_stream()
            self._stream(watcher, target, query)
        except OSError:
            self.close_connection = True
        finally:
            self.app.store.unwatch(watcher)

    def _start_stream(self) -> None:
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Transfer-Encoding: chunked\r\nCache-Control: no-cache, private\r\n\r\n")

    def _stream(self, watcher, target: Target, query: dict) -> None:
        app = self.app
        timeout = float(query.get("timeoutSeconds") or app.watch_timeout)
        bookmarks = query_flag(query, "allowWatchBookmarks")
        now = time.monotonic()
        deadline, next_bookmark = now + timeout, now + app.bookmark_interval
        drop_after, sent = app.faults.watch_drop_after, 0
        while not watcher.closed:
            now = time.monotonic()
            if now >= deadline:
                break
            wait = min(deadline, next_bookmark if bookmarks else deadline) - now
            item = watcher.next(max(0.0, min(wait, 1.0)))
            if watcher.closed:
                break
            if item is not None:
                self._chunk(self._event(target, *item, query))
                sent += 1
                if drop_after and sent >= drop_after:
                    watcher.close("fault")
            elif bookmarks and time.monotonic() >= next_bookmark:
                self._chunk(self._bookmark(target, query))
                next_bookmark = time.monotonic() + app.bookmark_interval
        if watcher.closed in ("fault", "dropped") and app.faults.watch_drop_mode == "reset":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)  # abrupt, like a broken network
            return
        self._chunk(b"")

    def _bookmark(self, target: Target, query: dict) -> bytes:
        obj = {"kind": target.res.kind, "apiVersion": target.res.api_version,
               "metadata": {"resourceVersion": str(self.app.store.resource_version)}}
        return self._event(target, "BOOKMARK", dumps(obj), query)
