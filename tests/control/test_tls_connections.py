"""hami-control's TLS server under many callers: a client that connects and never shakes hands
holds up nobody else, and callers past cheroot's old limit of 10 keep their connections.

Both were found by bench/k8s_throughput.py: with the handshake in cheroot's accept thread one
silent connection stalled every call for 30 s (kube-scheduler's filter calls timed out), and
past 10 idle connections each call paid a new TLS handshake."""
import http.client
import socket
import ssl
import time

import pytest

from hami_control.server.wsgi import KEEP_ALIVE, HttpServer
from hami_sim.certs import make_server_certs


def _app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [environ["wsgi.url_scheme"].encode()]


@pytest.fixture
def server(tmp_path):
    certs = make_server_certs(tmp_path / "certs")
    srv = HttpServer(_app, "127.0.0.1", 0, threads=4, tls_cert=str(certs.cert),
                     tls_key=str(certs.key)).start()
    yield srv
    srv.stop()


def _connection(port: int) -> http.client.HTTPSConnection:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=20)


def _get(conn) -> http.client.HTTPResponse:
    conn.request("GET", "/")
    resp = conn.getresponse()
    assert resp.read() == b"https"
    return resp


def test_a_silent_or_plain_client_does_not_hold_up_others(server):
    silent = socket.create_connection(("127.0.0.1", server.port))
    plain = socket.create_connection(("127.0.0.1", server.port))
    plain.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        time.sleep(0.3)         # both accepted before the real client arrives
        started = time.monotonic()
        _get(_connection(server.port))
        assert time.monotonic() - started < 5, "a TLS request waited for a silent client"
        plain.settimeout(20)
        assert plain.recv(100) == b"", "a plain-HTTP client's connection is dropped"
        _get(_connection(server.port))          # and the server still serves
    finally:
        silent.close()
        plain.close()


def test_callers_past_ten_keep_their_connections(server):
    callers = [_connection(server.port) for _ in range(40)]
    assert KEEP_ALIVE >= len(callers)
    try:
        first = [_get(c) for c in callers]
        assert not any(r.will_close for r in first), "connections closed after one request"
        sockets = [c.sock for c in callers]
        for c in callers:
            assert not _get(c).will_close
        assert [c.sock for c in callers] == sockets, "a caller had to connect again"
    finally:
        for c in callers:
            c.close()


def test_a_trickling_request_is_cut_off_at_its_deadline(tmp_path):
    """A request sent a byte at a time (each read well within cheroot's per-read timeout) is
    answered 408 and closed once it has taken request_s, and every worker it held is free
    again: before, 16 such connections stopped the webhook and the extender for good."""
    certs = make_server_certs(tmp_path / "certs")
    srv = HttpServer(_app, "127.0.0.1", 0, threads=2, tls_cert=str(certs.cert),
                     tls_key=str(certs.key), request_s=1.0).start()
    context = ssl.create_default_context(cafile=str(certs.ca_cert))
    slow = [context.wrap_socket(socket.create_connection(("127.0.0.1", srv.port), timeout=20),
                                server_hostname="127.0.0.1") for _ in range(2)]
    try:
        started, answers = time.monotonic(), [b"", b""]
        for _ in range(30):                      # a byte per 0.2 s: never a quiet read
            for i, sock in enumerate(slow):
                try:
                    sock.sendall(b"G")
                    sock.settimeout(0.1)
                    answers[i] += sock.recv(200)
                except socket.timeout:
                    pass
                except (ConnectionError, ssl.SSLError):
                    continue
            if all(b"408" in a for a in answers):
                break
        cut_after = time.monotonic() - started
        assert all(a.startswith(b"HTTP/1.1 408") for a in answers), answers
        assert cut_after < 5, f"cut off after {cut_after:.1f} s, the deadline is 1 s"
        _get(_connection(srv.port))              # both workers serve again
    finally:
        for sock in slow:
            sock.close()
        srv.stop()
