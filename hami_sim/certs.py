"""Test certificates: a CA and a server certificate for loopback, made with the openssl CLI
(no Python crypto package needed). For the doubles and demos only, never production."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


class CertError(RuntimeError):
    """openssl is missing or failed."""


@dataclass(frozen=True)
class ServerCerts:
    """Paths of the generated PEM files."""

    ca_cert: Path
    cert: Path
    key: Path


def _openssl(args: list[str], cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise CertError("the openssl command is needed to make test certificates "
                        "(apt-get install openssl)")
    proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CertError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


def make_server_certs(directory, hosts=("localhost", "127.0.0.1"), days: int = 30) -> ServerCerts:
    """A throwaway CA and a server certificate for hosts (DNS names and IPs) in directory."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
              "-out", "ca.crt", "-days", str(days), "-subj", "/CN=hami-sim-ca"], d)
    san = ",".join(("IP:" if h.replace(".", "").isdigit() or ":" in h else "DNS:") + h
                   for h in hosts)
    (d / "server.ext").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
                                  "keyUsage=digitalSignature,keyEncipherment\n"
                                  "extendedKeyUsage=serverAuth\n")
    _openssl(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
              "server.csr", "-subj", f"/CN={hosts[0]}"], d)
    _openssl(["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
              "-CAcreateserial", "-out", "server.crt", "-days", str(days),
              "-extfile", "server.ext"], d)
    return ServerCerts(d / "ca.crt", d / "server.crt", d / "server.key")
