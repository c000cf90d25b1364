"""The production WSGI server: cheroot (a thread pool, HTTP/1.1 keep-alive), with its built-in
SSL adapter when a certificate is given. Bottle's own server is single-threaded and for
development only."""
import logging
import threading
from typing import Optional

from cheroot import wsgi

from hami_control.errors import ConfigError

log = logging.getLogger(__name__)


class HttpServer:
    """Serves a WSGI app on host:port in a background thread."""

    def __init__(self, app, host: str, port: int, threads: int = 16,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None):
        self._server = wsgi.Server((host, port), app, numthreads=threads,
                                   server_name="hami-control", timeout=30,
                                   shutdown_timeout=2, request_queue_size=128)
        # How often the accept loop looks up from select(): also how long stop() waits.
        self._server.expiration_interval = 0.1
        self._tls = bool(tls_cert)
        if tls_cert:
            self._server.ssl_adapter = _ssl_adapter(tls_cert, tls_key)
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "HttpServer":
        """Binds the socket (so the port is known) and serves in a thread."""
        try:
            self._server.prepare()
        except OSError as e:
            raise ConfigError("--listen", f"cannot listen on {self._server.bind_addr}: "
                                          f"{e.strerror or e}") from e
        self._thread = threading.Thread(target=self._server.serve, name="http", daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        return self._server.bind_addr[1]

    @property
    def url(self) -> str:
        """http(s)://host:port."""
        host = self._server.bind_addr[0]
        host = f"[{host}]" if ":" in host else host
        return f"{'https' if self._tls else 'http'}://{host}:{self.port}"

    def stop(self) -> None:
        """Stops accepting and waits for the workers."""
        self._server.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _ssl_adapter(cert: str, key: str):
    from cheroot.ssl.builtin import BuiltinSSLAdapter
    try:
        return BuiltinSSLAdapter(cert, key)
    except (OSError, ValueError) as e:      # ssl.SSLError is an OSError
        raise ConfigError("--tls-cert/--tls-key", f"cannot load the certificate {cert!r} "
                          f"with key {key!r}: {e}") from e
