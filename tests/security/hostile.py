"""Hostile blueprint values and the places they go: the shared pieces of the "values are data" tests.

:func:`string_fields` walks the blueprint's JSON Schema for every string a user can write (fields, list items,
mapping keys and values); :func:`bases_for` finds a document of :data:`BASES` where that field exists; and
:data:`HOSTILE` holds the values a careless or hostile author writes: template expressions, command
substitution, backticks, ``;``, newlines, quotes, a leading ``-``, ``]`` and a new config section. Each
hostile value would create the file ``CANARY`` (a placeholder for a path) if any layer ran it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from blueprints import load_blueprint
from blueprints.models import Blueprint

EXAMPLES = Path(__file__).resolve().parents[2] / "blueprints" / "examples"

HOSTILE = (
    "{{ lookup('pipe', 'touch CANARY') }}",
    "{% if lookup('pipe', 'touch CANARY') %}x{% endif %}",
    "x$(touch CANARY)",
    "x`touch CANARY`",
    "x;touch CANARY",
    "x\ntouch CANARY",
    "x'\"touch CANARY",
    "-oProxyCommand=touch CANARY",
    "x]touch CANARY",
    "x\n[section]\ntouch=CANARY",
)
"""One value per kind of injection the issue names (#33); ``CANARY`` is replaced by a real path."""

Path_ = tuple[Any, ...]


def string_fields() -> list[Path_]:
    """Every place a blueprint holds a user string, as a schema path: names for properties, ``"[]"`` for a list
    item, ``"*"`` for a mapping's value and ``"<key>"`` for a mapping's key. Enums and constants are left out
    (the schema admits only their listed values)."""
    schema = Blueprint.model_json_schema()
    defs = schema.get("$defs", {})
    out: set[Path_] = set()

    def resolve(s: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in s:
            s = defs[s["$ref"].split("/")[-1]]
        return s

    def walk(s: dict[str, Any], path: Path_) -> None:
        s = resolve(s)
        for k in ("anyOf", "oneOf", "allOf"):
            for sub in s.get(k, []):
                walk(sub, path)
        t = s.get("type")
        if t == "string" and "enum" not in s and "const" not in s:
            out.add(path)
        for name, sub in s.get("properties", {}).items():
            walk(sub, (*path, name))
        values = [*s.get("patternProperties", {}).values()]
        if isinstance(s.get("additionalProperties"), dict):
            values.append(s["additionalProperties"])
        for sub in values:
            walk(sub, (*path, "*"))
            out.add((*path, "<key>"))
        if t == "array" and isinstance(s.get("items"), dict):
            walk(s["items"], (*path, "[]"))

    walk(schema, ())
    return sorted(out)


def _extra_bases() -> dict[str, dict[str, Any]]:
    """Examples with the sections no example declares (so that every string field exists in some document)."""
    docs = {p.stem: load_blueprint(p).data for p in sorted(EXAMPLES.glob("*.yaml"))}
    p5 = copy.deepcopy(docs["aws-p5-efa-lustre"])
    p5["target"].update({"key_name": "ops", "ami_id": "ami-0abc12345def67890", "tags": {"team": "ml"},
                         "vpc": {"vpc_id": "vpc-0abc1234", "subnet_id": "subnet-0abc1234",
                                 "control_plane_subnet_ids": ["subnet-0abc1235"]}})
    p5["storage"][0]["fsx"].update({"kms_key_id": "alias/fsx", "availability_zone": p5["target"]["availability_zone"],
                                    "s3": {"data_repository_path": "s3://bucket/data", "file_system_path": "/data"}})
    p5["storage"][0]["stripes"] = [{"path": "checkpoints", "size": "4M"}]
    p5["validation"] = {**p5.get("validation", {}), "fio": {"targets": ["/fsx"], "size": "1G"}}
    p5["node_groups"][0]["labels"] = {"team": "ml"}
    p5["workload"] = {"model": "llama-3.1-8b", "sequence_length": 8192}
    reservation = copy.deepcopy(docs["aws-p5-efa-lustre"])
    reservation["target"]["capacity"] = {"type": "reservation", "reservation_id": "cr-0abc", "placement_group": "pg-1",
                                         "node_groups": [reservation["node_groups"][0]["name"]]}
    dgx = copy.deepcopy(docs["onprem-dgx-h100-ib"])
    dgx["description"] = "DGX cluster"
    dgx["software"] = {**dgx.get("software", {}), "doca_ofed": "3.2.1", "kata": "3.32.0", "gvisor": "20260504.0",
                       "lustre_client_repos": {dgx["target"].get("os", "ubuntu-22.04"): {
                           "url": "https://repo.example.com/lustre/", "key_url": "https://repo.example.com/key.asc",
                           "suite": "./", "components": ["main"], "packages": ["lustre-client-utils"]}}}
    dgx["orchestrator"] = {"kind": "slurm", "partition": "gpu", "account": "ml"}
    dgx["target"]["ssh"] = {**dgx["target"].get("ssh", {}), "user": "ubuntu", "private_key_file": "~/.ssh/id_ed25519"}
    dgx["network"]["nccl"] = {"env": {"NCCL_DEBUG_SUBSYS": "INIT"}, "socket_ifname": "ibp12s0"}
    dgx["node_groups"][0]["labels"] = {"team": "ml"}
    dgx["cost"] = {"compare_region": "us-east-1", "server_price_usd": {dgx["node_groups"][0]["name"]: 300000},
                   "node_power_kw": {dgx["node_groups"][0]["name"]: 10.2}}
    nvme = dgx["node_groups"][0].setdefault("hardware", {}).setdefault("nvme", {"count": 8})
    nvme.update({"model": "samsung-pm1743", "by_id": [f"/dev/disk/by-id/nvme-drive-{i}" for i in range(nvme["count"])]})
    dgx["node_groups"][0]["hardware"]["system"] = "dgx-h100"
    for g in dgx["node_groups"]:
        gpu = g.get("hardware", {}).get("gpu")
        if isinstance(gpu, str):
            model, _, count = gpu.partition(":")
            g["hardware"]["gpu"] = {"model": model, "count": int(count or 8)}
    k8s = copy.deepcopy(docs["onprem-sandbox-kata"])
    for g in k8s["node_groups"]:
        sb = g.get("sandbox")
        if sb == "vm" or isinstance(sb, dict) and sb.get("runtime") == "vm":
            g["sandbox"] = {**(sb if isinstance(sb, dict) else {"runtime": "vm"}), "vm": {"image": "/var/lib/base.qcow2"}}
    k8s["orchestrator"] = {"kind": "kubernetes", "node_selector": {"clusterforge.io/node-group": "{group}"}}
    slurm = copy.deepcopy(docs["onprem-l40s-roce"])
    slurm["orchestrator"] = {
        "kind": "slurm", "partition": "l40s", "cluster_name": "l40s",
        "partitions": [{"name": "train", "groups": ["l40s"], "default": True, "max_time": "2-00:00:00"}],
        "accounting": {"database_host": "db.example.com", "password_file": "/etc/slurm/db.pass"},
        "pyxis": True,
        "container_pins": {"enroot_4.1.2-1_amd64.deb": "a" * 64, "enroot+caps_4.1.2-1_amd64.deb": "b" * 64,
                           "pyxis-0.24.0.tar.gz": "c" * 64},
        "extra": {"MaxJobCount": "20000"},
    }
    return {"p5-full": p5, "p5-reservation": reservation, "dgx-full": dgx, "kata-k8s": k8s, "l40s-slurm-full": slurm}


BASES: dict[str, dict[str, Any]] = {
    **{p.stem: load_blueprint(p).data for p in sorted(EXAMPLES.glob("*.yaml"))},
    **_extra_bases(),
}
"""The documents hostile values are written into: every example and the fuller variants of :func:`_extra_bases`."""


def locate(doc: dict[str, Any], field: Path_) -> Path_ | None:
    """The document path of ``field`` (a schema path) in ``doc``, trying every list item and taking a mapping's
    first entry; a list or leaf that is missing at the end of the path is created by :func:`with_value`.
    ``None`` when the document does not hold the field's parent."""

    def walk(node: Any, rest: Path_, out: Path_) -> Path_ | None:
        if not rest:
            return out
        part, last = rest[0], len(rest) == 1
        if part == "[]":
            if last and (node is None or node == []):
                return (*out, ("<new-list>",))
            if not isinstance(node, list):
                return None
            for i, item in enumerate(node):
                found = walk(item, rest[1:], (*out, i))
                if found is not None:
                    return found
            return None
        if part in ("*", "<key>"):
            if not isinstance(node, dict) or not node:
                return None
            key = next(iter(node))
            return (*out, ("<key>", key)) if part == "<key>" else walk(node[key], rest[1:], (*out, key))
        if not isinstance(node, dict):
            return None
        if part not in node:
            if last:
                return (*out, part)
            return (*out, part, ("<new-list>",)) if len(rest) == 2 and rest[1] == "[]" else None
        return walk(node[part], rest[1:], (*out, part))

    return walk(doc, field, ())


def value_at(doc: dict[str, Any], path: Path_) -> str | None:
    """The string at ``path`` (from :func:`locate`) in ``doc``: the value, or the key for a ``("<key>", key)``
    element; ``None`` for a place that does not hold a string yet."""
    node: Any = doc
    for part in path:
        if part == ("<new-list>",):
            return None
        if isinstance(part, tuple):
            return str(part[1])
        if isinstance(node, dict) and part not in node:
            return None
        node = node[part]
    return node if isinstance(node, str) else None


def with_value(doc: dict[str, Any], path: Path_, value: str) -> dict[str, Any]:
    """A copy of ``doc`` with ``value`` at ``path`` (from :func:`locate`): a ``("<key>", key)`` last element
    renames that mapping key, a ``("<new-list>",)`` one makes a one-item list, a missing list becomes one."""
    out = copy.deepcopy(doc)
    node: Any = out
    for i, part in enumerate(path[:-1]):
        if isinstance(node, dict) and part not in node:
            node[part] = [] if path[i + 1] == ("<new-list>",) or isinstance(path[i + 1], int) else {}
        node = node[part]
    last = path[-1]
    if last == ("<new-list>",):
        node.clear()
        node.append(value)
    elif isinstance(last, tuple):
        old = last[1]
        items = list(node.items())
        node.clear()
        node.update({(value if k == old else k): v for k, v in items})
    else:
        node[last] = value
    return out
