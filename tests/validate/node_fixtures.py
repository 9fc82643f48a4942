"""Turn a folder of recorded tool outputs (tests/fixtures/node/<system>/<host>/) into the document the
node_health payload prints, so tests feed the judge exactly what the tools said.

:class:`RecordedNode` keeps the files as text; a test changes one (``node.files["sysfs.tsv"] = ...``
or :meth:`RecordedNode.set_sysfs`) to produce a fault, then calls :meth:`RecordedNode.doc`.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from validate.node_checks import recorded_units
from validate.payloads.node_health import MODULES

RECORDED_DRIVER = ("550", "550.90.07")
"""Driver branch and release of the recorded nodes (``proc-driver-nvidia-version.txt``): the examples
default to a newer branch, so a test judges a recording against the example as it was deployed there."""

RECORDED_OFED = "2.9.1"
"""The recorded nodes run an OFED stack (they load ``nvidia-peermem``, have ``mlnx_qos`` and the per-priority
ECN knobs, which inbox rdma-core lacks); which DOCA release was not recorded, so this names a DOCA-Host
release of that time (https://docs.nvidia.com/doca/sdk/doca-host+installation+and+upgrade/index.html)."""


def as_recorded(bp: Any, *, gpudirect: str | None = None) -> Any:
    """``bp`` as deployed on the recorded nodes: their driver (:data:`RECORDED_DRIVER`), their OFED stack
    (:data:`RECORDED_OFED`; a RoCE network gets the ECN it had) and, when given, the GPUDirect RDMA method
    they ran (the DGX recording loads ``nvidia-peermem``)."""
    branch, release = RECORDED_DRIVER
    update: dict[str, Any] = {"software": bp.software.model_copy(update={
        "driver_branch": branch, "driver_version": release, "doca_ofed": RECORDED_OFED})}
    net_update: dict[str, Any] = {}
    if gpudirect is not None:
        net_update["gpudirect_rdma"] = bp.network.gpudirect_rdma.model_copy(update={"method": gpudirect})
    if getattr(bp.network, "roce", None) is not None:
        net_update["roce"] = bp.network.roce.model_copy(update={"ecn": True})
    if net_update:
        update["network"] = bp.network.model_copy(update=net_update)
    return bp.model_copy(update=update)


def as_recorded_yaml(text: str, *, gpudirect: str | None = None) -> str:
    """The blueprint YAML ``text`` with the recorded nodes' driver, for a CLI call (same as
    :func:`as_recorded`): appends a ``software`` override and, when given, the GPUDirect method."""
    import io

    from ruamel.yaml import YAML
    yaml = YAML()
    doc = yaml.load(text)
    branch, release = RECORDED_DRIVER
    doc.setdefault("software", {}).update({"driver_branch": branch, "driver_version": release,
                                           "doca_ofed": RECORDED_OFED})
    if gpudirect is not None:
        doc["network"]["gpudirect_rdma"]["method"] = gpudirect
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def _tsv(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if "\t" in line:
            k, v = line.split("\t", 1)
            out[k] = v
    return out


def _cmd(stdout: str | None, rc: int = 0, *, missing: bool = False, argv: list[str] | None = None) -> dict[str, Any]:
    if missing or stdout is None:
        return {"argv": argv or [], "rc": None, "stdout": "", "stderr": "", "missing": True}
    return {"argv": argv or [], "rc": rc, "stdout": stdout, "stderr": "", "missing": False}


@dataclass
class RecordedNode:
    """The recorded outputs of one node (file name -> text)."""

    files: dict[str, str]
    missing_tools: set[str] = field(default_factory=set)

    @classmethod
    def load(cls, folder: Path) -> RecordedNode:
        return cls({p.name: p.read_text(encoding="utf-8") for p in sorted(folder.iterdir()) if p.is_file()})

    def copy(self) -> RecordedNode:
        return RecordedNode(dict(self.files), set(self.missing_tools))

    @property
    def meta(self) -> dict[str, Any]:
        return json.loads(self.files["meta.json"])

    def set_meta(self, **kw: Any) -> None:
        self.files["meta.json"] = json.dumps({**self.meta, **kw})

    def set_sysfs(self, path: str, value: str | None) -> None:
        rows = _tsv(self.files["sysfs.tsv"])
        if value is None:
            rows.pop(path, None)
        else:
            rows[path] = value
        self.files["sysfs.tsv"] = "".join(f"{k}\t{v}\n" for k, v in rows.items())

    def replace(self, name: str, old: str, new: str, count: int = -1) -> None:
        assert old in self.files[name], (name, old)
        self.files[name] = self.files[name].replace(old, new, count)

    def doc(self) -> dict[str, Any]:
        """The node-health document (validate/payloads/node_health.py layout)."""
        f = self.files
        m = self.meta
        sysfs = _tsv(f.get("sysfs.tsv", ""))
        links = _tsv(f.get("links.tsv", ""))
        dirs: dict[str, Any] = {}
        ib = sorted({k.split("/")[4] for k in sysfs if k.startswith("/sys/class/infiniband/")})
        dirs["/sys/class/infiniband"] = ib if ib else None
        dirs["/sys/class/net"] = sorted({k.split("/")[4] for k in sysfs if k.startswith("/sys/class/net/")} | {"lo"})
        dirs["/sys/class/iommu"] = ["dmar0"] if any("/iommu_groups/" in k for k in sysfs) else []
        vermagic = _tsv(f.get("modinfo-vermagic.tsv", ""))
        systemctl = _tsv(f.get("systemctl.tsv", ""))
        miss = self.missing_tools
        cmds: dict[str, Any] = {
            "nvidia-smi -q -x": _cmd(f.get("nvidia-smi-q-x.xml"), missing="nvidia-smi" in miss),
            "lspci -vvv": _cmd(f.get("lspci-vvv.txt"), missing="lspci" in miss),
            "findmnt": _cmd(f.get("findmnt.json"), missing="findmnt" in miss),
            "ip addr": _cmd(f.get("ip-addr.json"), missing="ip" in miss),
        }
        if "nvidia-smi-nvlink-s.txt" in f and "nvidia-smi" not in miss:
            cmds["nvidia-smi nvlink -s"] = _cmd(f["nvidia-smi-nvlink-s.txt"])
        for unit in recorded_units():
            state = systemctl.get(unit, "inactive")
            cmds[f"systemctl is-active {unit}"] = _cmd(state + "\n", 0 if state == "active" else 3)
        for mod in MODULES:
            v = vermagic.get(mod)
            cmds[f"modinfo {mod}"] = (_cmd(None, missing=True) if "modinfo" in miss else
                                      _cmd(v + "\n") if v else _cmd("", 1))
        for name, text in f.items():
            if name.startswith("mlnx_qos-"):
                nd = name[len("mlnx_qos-"):-len(".txt")]
                cmds[f"mlnx_qos -i {nd}"] = _cmd(text, missing="mlnx_qos" in miss)
        return copy.deepcopy({
            "kind": "node-health", "version": 1, "host": m["host"], "kernel": m["kernel"], "machine": "x86_64",
            "collected_at": "2024-09-10T08:00:00+00:00", "uid": m.get("uid", 0), "host_root": "/",
            "commands": cmds,
            "files": {
                "/proc/cmdline": f.get("proc-cmdline.txt"), "/proc/mdstat": f.get("proc-mdstat.txt"),
                "/proc/modules": f.get("proc-modules.txt"), "/proc/self/limits": f.get("proc-self-limits.txt"),
                "/proc/driver/nvidia/version": f.get("proc-driver-nvidia-version.txt"),
                "/etc/containerd/config.toml": f.get("etc-containerd-config.toml"),
                "/etc/docker/daemon.json": f.get("etc-docker-daemon.json"),
            },
            "dirs": dirs, "sysfs": sysfs, "links": links,
            "statvfs": {"/dev/shm": {"size_bytes": m["shm_bytes"], "free_bytes": m["shm_bytes"]}},
            "processes": m.get("processes", []),
        })
