"""Kubeconfig files for the doubles (plain HTTP, or HTTPS with a CA), and clients from them.

The node agent and the control plane take `--kubeconfig FILE`; write one with
`write_kubeconfig(path, server.url, ca_file=...)`. The file is JSON, which is valid YAML, so
writing it needs no YAML library.
"""
from __future__ import annotations

import base64
import json
import os
from pathlib import Path


def kubeconfig_dict(server_url: str, *, ca_file: str | None = None,
                    ca_data: bytes | None = None, token: str | None = None,
                    insecure: bool = False, name: str = "hami-sim",
                    namespace: str = "default", client_cert: str | None = None,
                    client_key: str | None = None) -> dict:
    """The kubeconfig document for one cluster, user and context, all called `name`."""
    cluster: dict = {"server": server_url}
    if ca_file:
        cluster["certificate-authority"] = os.path.abspath(ca_file)
    elif ca_data:
        cluster["certificate-authority-data"] = base64.b64encode(ca_data).decode()
    if insecure:
        cluster["insecure-skip-tls-verify"] = True
    user = {"token": token} if token else {}
    if client_cert and client_key:       # x509 client authentication (the real API server)
        user = {"client-certificate": os.path.abspath(client_cert),
                "client-key": os.path.abspath(client_key)}
    return {"apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name,
                                                    "namespace": namespace}}],
            "preferences": {}}


def write_kubeconfig(path, server_url: str, **options) -> Path:
    """Writes a kubeconfig for server_url (options as kubeconfig_dict); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(kubeconfig_dict(server_url, **options), indent=2))
    os.replace(tmp, path)
    return path


def api_client_from_kubeconfig(path):
    """A kubernetes.client.ApiClient configured from a kubeconfig file."""
    from kubernetes import config
    return config.new_client_from_config(config_file=str(path))


def api_client_for(server_url: str, ca_file: str | None = None):
    """A kubernetes.client.ApiClient for a URL, without a file."""
    from kubernetes import client
    cfg = client.Configuration()
    cfg.host = server_url
    if ca_file:
        cfg.ssl_ca_cert = ca_file
    return client.ApiClient(cfg)
