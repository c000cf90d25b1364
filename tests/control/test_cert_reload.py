"""hami-control serves a renewed certificate without a restart: new connections get it once
the files change; a pair that does not load keeps the old one in service."""
import shutil
import socket
import ssl

from hami_control.server.wsgi import HttpServer
from hami_sim.certs import make_server_certs
from hami_sim.testing import wait_for


def _app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def _served_certificate(port: int) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw) as tls:
            return tls.getpeercert(binary_form=True)


def test_a_renewed_certificate_is_served_to_new_connections(tmp_path):
    first = make_server_certs(tmp_path / "first")
    second = make_server_certs(tmp_path / "second")
    live = tmp_path / "live"
    live.mkdir()
    for name, source in (("tls.crt", first.cert), ("tls.key", first.key)):
        shutil.copy(source, live / name)
    server = HttpServer(_app, "127.0.0.1", 0, threads=2, tls_cert=str(live / "tls.crt"),
                        tls_key=str(live / "tls.key"), reload_interval_s=0.1).start()
    try:
        original = _served_certificate(server.port)
        assert original == ssl.PEM_cert_to_DER_cert(first.cert.read_text())
        # Renewed half-way (certificate first, key still the old one): the old pair stays.
        shutil.copy(second.cert, live / "tls.crt.new")
        (live / "tls.crt.new").replace(live / "tls.crt")
        assert not server._reloader.check()
        assert _served_certificate(server.port) == original
        shutil.copy(second.key, live / "tls.key.new")
        (live / "tls.key.new").replace(live / "tls.key")
        renewed = ssl.PEM_cert_to_DER_cert(second.cert.read_text())
        assert wait_for(lambda: _served_certificate(server.port) == renewed, timeout=5,
                        what="the renewed certificate")
    finally:
        server.stop()
