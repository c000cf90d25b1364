"""The production WSGI server: cheroot (a thread pool, HTTP/1.1 keep-alive), with TLS when a
certificate is given. Bottle's own server is single-threaded and for development only.

Two of cheroot's defaults do not fit a webhook and extender that the API server and
kube-scheduler call from many connections at once (bench/k8s_throughput.py found both):
- its SSL adapter shakes hands in the one thread that accepts and watches every connection,
  so a burst of new connections queued behind each other's key exchange, and one client that
  connected and sent nothing held up every other request for the socket timeout (30 s:
  kube-scheduler's filter calls timed out and 998 of 1,000 pods went unscheduled). Here the
  handshake happens in the worker thread that serves the connection (_LazyTlsAdapter);
- it keeps at most 10 idle keep-alive connections and closes the rest after one request, so
  past 10 concurrent callers every call paid a new TCP and TLS handshake. Here KEEP_ALIVE.
And a client may take at most REQUEST_S to send a request once it has begun (cheroot's timeout
is per read, so one that trickles a byte every 29 s held a worker thread for ever, and 16 such
connections, one per thread, stopped the webhook and the extender: tests/k8s/junk.py's stalled
requests found it); then it is answered 408 and the connection closed.

The certificate and key are read again when their files change (a renewed Secret, cert-manager):
new connections get the new certificate, established ones keep theirs. A pair that does not
load (say the certificate is renewed before its key) is logged and retried; the old one stays."""
import logging
import os
import socket
import ssl
import threading
import time
from typing import Optional

from cheroot import errors, wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter

from hami_control.errors import ConfigError

log = logging.getLogger(__name__)
KEEP_ALIVE = 256         # idle keep-alive connections kept open (cheroot's default: 10)
HANDSHAKE_S = 10.0       # a client has this long to complete its TLS handshake
REQUEST_S = 10.0         # ... and this long to send a request, from its first byte read


class HttpServer:
    """Serves a WSGI app on host:port in a background thread."""

    def __init__(self, app, host: str, port: int, threads: int = 16,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 reload_interval_s: float = 10.0, flag: str = "--listen",
                 request_s: float = REQUEST_S):
        self._server = wsgi.Server((host, port), app, numthreads=threads,
                                   server_name="hami-control", timeout=30,
                                   shutdown_timeout=2, request_queue_size=128)
        # How often the accept loop looks up from select(): also how long stop() waits.
        self._server.expiration_interval = 0.1
        self._server.keep_alive_conn_limit = KEEP_ALIVE
        self._tls = bool(tls_cert)
        self._reloader = None
        if tls_cert:
            self._server.ssl_adapter = _ssl_adapter(tls_cert, tls_key, request_s)
            self._reloader = CertReloader(self._server, tls_cert, tls_key, reload_interval_s,
                                          request_s)
        self._thread: Optional[threading.Thread] = None
        self._flag = flag               # what a failure to bind names

    def start(self) -> "HttpServer":
        """Binds the socket (so the port is known) and serves in a thread."""
        try:
            self._server.prepare()
        except OSError as e:
            raise ConfigError(self._flag, f"cannot listen on {self._server.bind_addr}: "
                                          f"{e.strerror or e}") from e
        self._thread = threading.Thread(target=self._server.serve, name="http", daemon=True)
        self._thread.start()
        if self._reloader:
            self._reloader.start()
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
        if self._reloader:
            self._reloader.stop()
        self._server.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _ssl_adapter(cert: str, key: str, request_s: float = REQUEST_S):
    try:
        return _LazyTlsAdapter(cert, key, request_s)
    except (OSError, ValueError) as e:      # ssl.SSLError is an OSError
        raise ConfigError("--tls-cert/--tls-key", f"cannot load the certificate {cert!r} "
                          f"with key {key!r}: {e}") from e


class _HandshakeOnFirstUse(ssl.SSLSocket):
    """A server-side TLS socket that shakes hands when first read or written, i.e. in the
    worker thread serving it. A failed handshake is cheroot's FatalSSLAlert: the connection is
    dropped quietly, as cheroot does with one that fails in its accept thread. Reads of one
    request share a deadline (REQUEST_S from its first read; an answer sent ends the request):
    past it a read raises socket.timeout("timed out"), which cheroot answers 408."""
    _shaken = False
    _deadline = None
    request_s = REQUEST_S

    def _shake(self) -> None:
        if self._shaken:
            return
        timeout = self.gettimeout()
        self.settimeout(HANDSHAKE_S if timeout is None else min(timeout, HANDSHAKE_S))
        try:
            self.do_handshake()
        except OSError as e:         # ssl.SSLError included
            log.debug("TLS handshake failed: %s", e)
            raise errors.FatalSSLAlert(str(e)) from e
        finally:
            self.settimeout(timeout)
        self._shaken = True

    def _read(self, read, *args, **kwargs):
        self._shake()
        if self.pending():           # already decrypted: no wait
            return read(*args, **kwargs)
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self.request_s
        left = self._deadline - now
        if left <= 0:
            raise socket.timeout("timed out")
        timeout = self.gettimeout()
        self.settimeout(left if timeout is None else min(timeout, left))
        try:
            return read(*args, **kwargs)
        finally:
            self.settimeout(timeout)

    def recv_into(self, *args, **kwargs):
        return self._read(super().recv_into, *args, **kwargs)

    def recv(self, *args, **kwargs):
        return self._read(super().recv, *args, **kwargs)

    def send(self, *args, **kwargs):
        self._shake()
        self._deadline = None
        return super().send(*args, **kwargs)

    def sendall(self, *args, **kwargs):
        self._shake()
        self._deadline = None
        return super().sendall(*args, **kwargs)


class _LazyTlsAdapter(BuiltinSSLAdapter):
    """cheroot's built-in adapter, wrapping without the handshake (see the module's text). The
    WSGI environ says HTTPS but not the cipher, which is only known after the handshake and
    which nothing here reads."""

    def __init__(self, cert: str, key: str, request_s: float = REQUEST_S):
        super().__init__(cert, key)
        self.context.sslsocket_class = type("_ServedTlsSocket", (_HandshakeOnFirstUse,),
                                            {"request_s": request_s})

    def wrap(self, sock):
        return (self.context.wrap_socket(sock, do_handshake_on_connect=False, server_side=True),
                {"wsgi.url_scheme": "https", "HTTPS": "on"})


def _stamp(*paths: str) -> tuple:
    """What tells a changed file: (inode, size, mtime) of each (the Secret volume's atomic
    symlink swap gives new inodes); None for a missing one."""
    stamps = []
    for path in paths:
        try:
            st = os.stat(path)
            stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            stamps.append(None)
    return tuple(stamps)


class CertReloader:
    """Swaps the server's SSL adapter when the certificate or key files change."""

    def __init__(self, server, cert: str, key: str, interval_s: float,
                 request_s: float = REQUEST_S):
        self.server, self.cert, self.key, self.interval_s = server, cert, key, interval_s
        self.request_s = request_s
        self._seen = _stamp(cert, key)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cert-reload", daemon=True)

    def start(self) -> None:
        """Watches in a thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stops watching."""
        self._stopped.set()

    def _loop(self) -> None:
        while not self._stopped.wait(self.interval_s):
            self.check()

    def check(self) -> bool:
        """Reloads if the files changed; whether a new certificate is now served."""
        stamp = _stamp(self.cert, self.key)
        if stamp == self._seen:
            return False
        try:
            adapter = _ssl_adapter(self.cert, self.key, self.request_s)
        except ConfigError as e:
            log.warning("the serving certificate changed but does not load (%s); still serving "
                        "the previous one, trying again in %g s", e, self.interval_s)
            return False
        self.server.ssl_adapter = adapter
        self._seen = stamp
        log.info("serving the renewed certificate %s", self.cert)
        return True
