"""Junk for hami-control's HTTPS port and hami-node's device plugin socket: raw bytes,
malformed HTTP and JSON, stalled requests, and gRPC calls kubelet would never make. Each
sender returns what came back, so that a test can say whether it was a clear refusal."""
from __future__ import annotations

import json
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Optional

JSON = "application/json"


@dataclass
class Answer:
    """An HTTP answer: its status and body (status 0: the connection closed without one)."""

    status: int
    body: bytes

    def message(self) -> str:
        """The JSON error message of the answer ('' if none)."""
        try:
            return str(json.loads(self.body).get("error", ""))
        except (ValueError, AttributeError):
            return ""


def tls_context(ca_file: str) -> ssl.SSLContext:
    """A client context trusting the cluster's CA (the serving certificate names 127.0.0.1)."""
    return ssl.create_default_context(cafile=ca_file)


def connect(port: int, context: Optional[ssl.SSLContext], timeout: float = 20):
    """A TCP connection to 127.0.0.1:port, wrapped in TLS when context is given."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return context.wrap_socket(sock, server_hostname="127.0.0.1") if context else sock


def read_answer(sock, timeout: float = 20) -> Answer:
    """Reads one HTTP/1.1 answer (Content-Length framed); status 0 if closed before one."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return Answer(0, data)
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return Answer(status, body)
    except (ConnectionError, ssl.SSLError):
        return Answer(0, data)


def raw_request(port: int, context, raw: bytes, timeout: float = 20) -> Answer:
    """Sends raw bytes as the request; the answer."""
    with connect(port, context, timeout) as sock:
        sock.sendall(raw)
        return read_answer(sock, timeout)


def post(port: int, context, path: str, body: bytes, content_type: Optional[str] = JSON,
         timeout: float = 20) -> Answer:
    """POST path with body (and a Content-Type unless None)."""
    headers = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
    if content_type:
        headers += f"Content-Type: {content_type}\r\n"
    return raw_request(port, context, headers.encode() + b"Connection: close\r\n\r\n" + body,
                       timeout)


def closed_within(sock, seconds: float) -> Optional[float]:
    """Waits for the peer to close sock (reading and dropping what it sends); the seconds it
    took, None if still open after `seconds`."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        sock.settimeout(max(0.1, seconds - (time.monotonic() - start)))
        try:
            if not sock.recv(65536):
                return time.monotonic() - start
        except socket.timeout:
            return None
        except (ConnectionError, ssl.SSLError, OSError):
            return time.monotonic() - start
    return None


def unix_raw(path: str, raw: bytes, seconds: float = 10) -> bool:
    """Sends raw bytes to a unix socket; whether the peer then closed the connection within
    `seconds` (what it sent before, a GOAWAY say, is dropped)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(seconds)
        sock.connect(path)
        sock.sendall(raw)
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                if not sock.recv(65536):
                    return True
        except ConnectionError:
            return True
        except socket.timeout:
            return False
    return False
