"""The HTTP surface (Bottle): routes, the body cap, and JSON errors.

Every answer is JSON (except /metrics). Malformed input gets a 4xx whose message says what to
fix; an unexpected error is logged with its traceback and answered 500 with a message, never
an HTML page and never a dropped connection.
"""
import json
import logging
import time
from dataclasses import dataclass
from typing import Callable

import bottle

from hami_control.errors import BadRequest

log = logging.getLogger(__name__)
JSON = "application/json"
_DRAIN_LIMIT = 8        # bodies up to 8x the cap are read and dropped; larger ones cut off


@dataclass
class Endpoints:
    """What the routes call. Handlers take the decoded body and return the answer dict;
    probes return (ok, detail)."""

    webhook: Callable[[object], dict]
    filter: Callable[[object], dict]
    bind: Callable[[object], dict]
    healthz: Callable[[], tuple]
    readyz: Callable[[], tuple]
    metrics: Callable[[], bytes]
    observe: Callable[[str, float], None] = lambda verb, seconds: None
    count: Callable[[str, str], None] = lambda endpoint, result: None
    # Whether this replica leads. A follower's filter/bind answers close the connection:
    # kube-scheduler keeps connections alive, and one opened to a demoted leader must not keep
    # reaching it (the next attempt goes through the Service to the current leader).
    leading: Callable[[], bool] = lambda: True
    # kube-scheduler's preempt verb (extender/preempt.py); without it, no preemption offered
    preempt: Callable[[object], dict] = lambda body: {"NodeNameToMetaVictims": {}}
    # kube-scheduler's prioritize verb (extender/prioritize.py): a HostPriorityList
    prioritize: Callable[[object], list] = lambda body: []


def _json(status: int, body, close: bool = False) -> bottle.HTTPResponse:
    headers = {"Content-Type": JSON}
    if close:
        headers["Connection"] = "close"
    return bottle.HTTPResponse(json.dumps(body, separators=(",", ":")), status=status,
                               headers=headers)


def _drain(stream, length: int) -> None:
    while length > 0:
        chunk = stream.read(min(length, 1 << 16))
        if not chunk:
            return
        length -= len(chunk)


def _json_media_type(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == JSON or (media.startswith("application/") and media.endswith("+json"))


def read_json(max_body: int):
    """The request body decoded as JSON; BadRequest (400/411/413/415) says what is wrong. A
    body declared as something else than JSON (a form, text) is refused; none declared is
    read as JSON."""
    env = bottle.request.environ
    length_text = env.get("CONTENT_LENGTH") or ""
    chunked = "chunked" in env.get("HTTP_TRANSFER_ENCODING", "").lower()
    if length_text:
        try:
            length = int(length_text)
        except ValueError as e:
            raise BadRequest(f"Content-Length {length_text!r} is not a number") from e
        if length > max_body:
            if length <= _DRAIN_LIMIT * max_body:     # read it, so the client sees the answer
                _drain(env["wsgi.input"], length)
            raise BadRequest(f"the body is {length} bytes; at most {max_body} are accepted", 413)
        data = env["wsgi.input"].read(length) if length > 0 else b""
    elif chunked:
        data = env["wsgi.input"].read(max_body + 1)
        if len(data) > max_body:
            _drain(env["wsgi.input"], (_DRAIN_LIMIT - 1) * max_body)
            raise BadRequest(f"the body is over {max_body} bytes, the most accepted", 413)
    else:
        raise BadRequest("a JSON body with a Content-Length is required", 411)
    content_type = env.get("CONTENT_TYPE") or ""
    if content_type and not _json_media_type(content_type):
        raise BadRequest(f"the body is declared as {content_type!r}; send JSON with "
                         f"Content-Type: {JSON}", 415)
    if not data:
        raise BadRequest("the body is empty; a JSON object is expected")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the body is not valid JSON: {e}") from e


def _webhook_result(answer: dict) -> str:
    response = answer.get("response") or {}
    if not response.get("allowed"):
        return "denied"
    return "mutated" if response.get("patch") else "allowed"


def make_app(endpoints: Endpoints, max_body: int) -> bottle.Bottle:
    """The Bottle application."""
    app = bottle.Bottle()
    app.config["catchall"] = False          # the routes answer their own errors as JSON
    app.config["json.enable"] = False

    def verb(name: str, handler: Callable[[object], dict], leader_only: bool = False):
        def route():
            start = time.perf_counter()
            try:
                answer = handler(read_json(max_body))
            except BadRequest as e:
                endpoints.count(name, "bad_request")
                return _json(e.status, {"error": str(e), "status": e.status})
            except Exception as e:      # a bug: answer it as one, keep serving
                log.exception("%s failed", name)
                endpoints.count(name, "internal_error")
                return _json(500, {"error": f"internal error in {name}: {e}", "status": 500})
            endpoints.observe(name, time.perf_counter() - start)
            if name == "webhook":
                endpoints.count(name, _webhook_result(answer))
            return _json(200, answer, close=leader_only and not endpoints.leading())
        app.route(f"/{name}", "POST", route)

    verb("webhook", endpoints.webhook)
    verb("filter", endpoints.filter, leader_only=True)
    verb("bind", endpoints.bind, leader_only=True)
    verb("preempt", endpoints.preempt, leader_only=True)
    verb("prioritize", endpoints.prioritize)

    def probe(check: Callable[[], tuple], role: bool = False):
        def route():
            ok, detail = check()
            body = {"ok": ok, "detail": detail}
            if role:
                body["leader"] = bool(endpoints.leading())
            return _json(200 if ok else 503, body)
        return route

    app.route("/healthz", "GET", probe(endpoints.healthz))
    app.route("/readyz", "GET", probe(endpoints.readyz, role=True))
    app.route("/metrics", "GET", lambda: bottle.HTTPResponse(
        endpoints.metrics(), headers={"Content-Type": "text/plain; version=0.0.4"}))
    for status in (400, 404, 405, 411, 413, 415, 500):
        app.error_handler[status] = _error_page
    return app


def _error_page(error: bottle.HTTPError) -> str:
    """Bottle's own errors (unknown path, wrong method) as JSON."""
    bottle.response.content_type = JSON
    return json.dumps({"error": f"{error.status_line}: {bottle.request.method} "
                                f"{bottle.request.path}", "status": error.status_code})
