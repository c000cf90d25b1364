"""The real cluster's certificates, made with the openssl CLI: one CA signs the API server's
serving certificate, kubelet's serving certificate for the node's name and InternalIP (the
API server verifies it), the client certificates of the admin, the controller manager and the
kubelet (their built-in RBAC identities), and hami-control's serving certificate for the
Service's DNS names (as deploy/hami-control-certs.sh makes it) plus 127.0.0.1, where the
processes listen. A service-account key pair signs the tokens. Throwaway, for this machine.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hami_sim.certs import _openssl

DAYS = "30"
SERVICE_IP = "10.96.0.1"       # first address of --service-cluster-ip-range
CONTROL_DNS = ("hami-control", "hami-control.hami-system", "hami-control.hami-system.svc",
               "hami-control.hami-system.svc.cluster.local")


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files in one folder."""

    root: Path

    def crt(self, name: str) -> Path:
        """The certificate called name."""
        return self.root / f"{name}.crt"

    def key(self, name: str) -> Path:
        """Its private key."""
        return self.root / f"{name}.key"

    @property
    def ca(self) -> Path:
        """The CA every component trusts."""
        return self.crt("ca")

    @property
    def sa_key(self) -> Path:
        """The service-account signing key (its public half is sa.pub)."""
        return self.root / "sa.key"


def _sign(pki: Pki, name: str, subject: str, ext: str) -> None:
    d = pki.root
    (d / f"{name}.ext").write_text(ext)
    _openssl(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
              f"{name}.csr", "-subj", subject], d)
    _openssl(["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
              "-CAcreateserial", "-out", f"{name}.crt", "-days", DAYS,
              "-extfile", f"{name}.ext"], d)


def _server_ext(dns: tuple, ips: tuple) -> str:
    san = ",".join([f"DNS:{n}" for n in dns] + [f"IP:{i}" for i in ips])
    return (f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
            "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")


CLIENT_EXT = ("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
              "extendedKeyUsage=clientAuth\n")


def make_pki(root: Path, node_name: str, node_ip: str) -> Pki:
    """Every certificate and key the cluster needs, in root (made once; kept if there, but
    kubelet's serving certificate made again if the node's address changed)."""
    pki = Pki(Path(root))
    if not pki.crt("apiserver-kubelet-client").exists():
        _make_all(pki, node_name)
    kubelet_serving(pki, node_name, node_ip)
    return pki


def kubelet_serving(pki: Pki, node_name: str, node_ip: str) -> None:
    """kubelet's serving certificate, signed by the cluster's CA for the node's name and its
    InternalIP: the API server reaches kubelet at that address (logs, exec, port-forward)
    and verifies this certificate (--kubelet-certificate-authority)."""
    ext = _server_ext((node_name, "localhost"), tuple(dict.fromkeys((node_ip, "127.0.0.1"))))
    done = pki.root / "kubelet-serving.ext"
    if pki.crt("kubelet-serving").exists() and done.exists() and done.read_text() == ext:
        return
    _sign(pki, "kubelet-serving", f"/CN={node_name}", ext)


def serving(pki: Pki, name: str, dns: tuple, ips: tuple) -> tuple:
    """A serving certificate signed by the cluster's CA (made once): (crt, key) paths."""
    if not pki.crt(name).exists():
        _sign(pki, name, f"/CN={name}", _server_ext(dns, ips))
    return pki.crt(name), pki.key(name)


def _make_all(pki: Pki, node_name: str) -> None:
    d = pki.root
    d.mkdir(parents=True, exist_ok=True)
    _openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
              "ca.crt", "-days", DAYS, "-subj", "/CN=hami-k8s-ca"], d)
    _openssl(["genrsa", "-out", "sa.key", "2048"], d)
    _openssl(["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"], d)
    _sign(pki, "apiserver", "/CN=kube-apiserver", _server_ext(
        ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        ("127.0.0.1", SERVICE_IP)))
    _sign(pki, "hami-control", "/CN=hami-control.hami-system.svc",
          _server_ext(CONTROL_DNS, ("127.0.0.1",)))
    for name, subject in (("admin", "/O=system:masters/CN=hami-k8s-admin"),
                          ("controller-manager", "/CN=system:kube-controller-manager"),
                          ("kubelet", f"/O=system:nodes/CN=system:node:{node_name}"),
                          ("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver")):
        _sign(pki, name, subject, CLIENT_EXT)
