"""Discovery documents (/api, /api/v1, /apis, /apis/<group>[/<version>], /version), as the
client libraries and kubectl read them."""
from __future__ import annotations

from .resources import ALL_VERBS, groups

SERVER_VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0-hami-sim",
                  "gitCommit": "hami-sim", "gitTreeState": "clean",
                  "buildDate": "2024-08-13T00:00:00Z", "goVersion": "python",
                  "compiler": "cpython", "platform": "linux/amd64"}


def api_versions(server_address: str) -> dict:
    """/api."""
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                            "serverAddress": server_address}]}


def _group_entry(name: str) -> dict:
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in groups()[name]]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def api_group_list() -> dict:
    """/apis."""
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group_entry(g) for g in groups() if g]}


def api_group(name: str) -> dict | None:
    """/apis/<group>, or None for an unknown group."""
    if not name or name not in groups():
        return None
    return dict(_group_entry(name), kind="APIGroup", apiVersion="v1")


def resource_list(group: str, version: str) -> dict | None:
    """/api/v1 or /apis/<group>/<version>, or None when not served."""
    served = groups().get(group, {}).get(version)
    if served is None:
        return None
    out = []
    for res in served.values():
        out.append({"name": res.name, "singularName": res.singular, "namespaced": res.namespaced,
                    "kind": res.kind, "verbs": list(ALL_VERBS),
                    "shortNames": list(res.short_names)})
        for sub in res.subresources:
            verbs = ["create"] if sub == "binding" else ["get", "patch", "update"]
            kind = "Binding" if sub == "binding" else res.kind
            out.append({"name": f"{res.name}/{sub}", "singularName": "",
                        "namespaced": res.namespaced, "kind": kind, "verbs": verbs})
    if group == "":
        out.append({"name": "bindings", "singularName": "binding", "namespaced": True,
                    "kind": "Binding", "verbs": ["create"]})
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": out}
