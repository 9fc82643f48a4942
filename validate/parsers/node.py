"""Parse the node-health document (``validate/payloads/node_health.py``) and the tool outputs inside it.

:func:`read_documents` finds the documents in a raw file (one JSON object, JSON lines from several
nodes, or lines mixed with launcher output); :func:`parse_document` turns one into
:class:`NodeFacts`, parsing each tool's output with the functions below (each takes the tool's own
text, so recorded outputs can be fed to them directly):

* :func:`parse_nvidia_smi_xml`: ``nvidia-smi -q -x`` (NVSMI XML, https://docs.nvidia.com/deploy/nvidia-smi/index.html);
* :func:`parse_nvlink_status`: ``nvidia-smi nvlink -s``;
* :func:`parse_lspci`: ``lspci -vvv -D`` (ACS capability and control lines);
* :func:`parse_mdstat`: ``/proc/mdstat``;
* :func:`parse_findmnt`: ``findmnt --json --list -o TARGET,SOURCE,FSTYPE,OPTIONS``;
* :func:`parse_ip_addr`: ``ip -j addr show``;
* :func:`parse_mlnx_qos`: ``mlnx_qos -i NETDEV`` (trust state, dscp2prio, PFC);
* :func:`parse_limits`: ``/proc/self/limits`` (memlock);
* :func:`parse_containerd_runtimes`: ``/etc/containerd/config.toml`` runtime handlers.

Nothing here raises on odd tool output: what cannot be parsed is ``None`` and the judge says so.
"""

from __future__ import annotations

import functools
import json
import re
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from .bounds import ScanBudget, clip_input, decode_at, loads, too_long

__all__ = [
    "NodeFacts",
    "parse_containerd_runtimes",
    "parse_document",
    "parse_findmnt",
    "parse_ip_addr",
    "parse_limits",
    "parse_lspci",
    "parse_mdstat",
    "parse_mlnx_qos",
    "parse_nvidia_smi_xml",
    "parse_nvlink_status",
    "read_documents",
]

DOC_KIND = "node-health"

_OPENER = re.compile(r"[\[{]")


_BRACKETS = re.compile(r"[\[{ \t,]*+")


def _skip_brackets(text: str, j: int) -> int:
    """The index after the run of opening brackets, blanks and commas that starts at ``j`` on its line: a document
    that failed from its first bracket is not tried again from each of the brackets that follow it. The run stops
    at a line break, so a document that starts the next line is still tried."""
    m = _BRACKETS.match(text, j)
    return max(m.end() if m else j + 1, j + 1)


def read_documents(text: str, kind: str = "node-health") -> list[dict[str, Any]]:
    """Every document of ``kind`` in ``text`` (JSON objects with ``"kind": "node-health"``, or
    ``"node-health-cluster"`` for what the Kubernetes launcher adds about the cluster), in order.

    Accepts one document, a JSON list of documents, JSON lines, or documents between other lines
    (launcher logs, Kubernetes marker lines). Returns ``[]`` when there is none. Within the bounds of
    :mod:`~validate.parsers.bounds`: the first ``MAX_INPUT_CHARS`` characters, documents nested no deeper
    than ``MAX_JSON_DEPTH`` (deeper ones are skipped with a note), time linear in the text.
    """
    text = clip_input(text)
    out: list[dict[str, Any]] = []
    dec = json.JSONDecoder()
    budget = ScanBudget(text)
    i, n = 0, len(text)
    while i < n:
        m = _OPENER.search(text, i)
        if m is None:
            break
        j = m.start()
        if budget.exhausted:
            break
        got = decode_at(dec, text, j, budget, what="node-health JSON")
        if got is None:
            i = _skip_brackets(text, j)
            continue
        obj, end = got
        items = obj if isinstance(obj, list) else [obj]
        out += [d for d in items if isinstance(d, dict) and d.get("kind") == kind]
        i = end
    return out


# ---------------------------------------------------------------------------------------------
# tool parsers
# ---------------------------------------------------------------------------------------------


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    m = re.match(r"\s*(\d+)", text)
    return int(m.group(1)) if m else None


def _find(el: ET.Element, path: str) -> str | None:
    x = el.find(path)
    return x.text.strip() if x is not None and x.text is not None else None


def parse_nvidia_smi_xml(text: str) -> dict[str, Any] | None:
    """``nvidia-smi -q -x`` -> ``{"driver_version", "cuda_version", "gpus": [...]}`` (``None``: not NVSMI XML).

    Each GPU: ``bus_id``, ``name``, ``persistence`` (``Enabled``/``Disabled``), ``mig_current``,
    ``ecc_mode``, ``ecc_uncorrectable_volatile`` and ``ecc_uncorrectable_aggregate`` (sums of the
    DRAM/SRAM (Hopper and later) or ``double_bit`` (older) counters; ``None`` when ECC is off or
    N/A), ``remap_failure`` (``Yes``/``No``/``None``), ``fabric_state`` / ``fabric_status``
    (NVSwitch systems). DOCTYPE declarations are refused (no entity expansion).
    """
    if not text or "<nvidia_smi_log" not in text:
        return None
    body = _strip_doctypes(text)
    if body is None:
        return None
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    gpus = []
    for g in root.findall("gpu"):
        def ecc_sum(scope: str, g: ET.Element = g) -> int | None:
            e = g.find(f"ecc_errors/{scope}")
            if e is None:
                return None
            vals = [_int(x.text) for x in e if "uncorrectable" in x.tag and x.tag != "sram_threshold_exceeded"]
            vals += [_int(_find(e, "double_bit/total"))]
            got = [v for v in vals if v is not None]
            return sum(got) if got else None

        gpus.append({
            "bus_id": g.get("id") or _find(g, "pci/pci_bus_id"),
            "name": _find(g, "product_name"),
            "persistence": _find(g, "persistence_mode"),
            "mig_current": _find(g, "mig_mode/current_mig"),
            "ecc_mode": _find(g, "ecc_mode/current_ecc"),
            "ecc_uncorrectable_volatile": ecc_sum("volatile"),
            "ecc_uncorrectable_aggregate": ecc_sum("aggregate"),
            "remap_failure": _find(g, "remapped_rows/remapped_row_failure"),
            "remap_pending": _find(g, "remapped_rows/remapped_row_pending"),
            "fabric_state": _find(g, "fabric/state"),
            "fabric_status": _find(g, "fabric/status"),
        })
    return {"driver_version": _find(root, "driver_version"), "cuda_version": _find(root, "cuda_version"),
            "gpus": gpus}


def _strip_doctypes(text: str) -> str | None:
    """``text`` without its ``<!DOCTYPE ...>`` declarations (with an internal subset ``[...]``); ``None``
    when one is not closed (the document is refused). One pass, linear in the text."""
    out: list[str] = []
    pos = 0
    while True:
        i = text.find("<!DOCTYPE", pos)
        if i < 0:
            break
        m = _DOCTYPE_END.match(text, i + 9)
        if m is None:
            return None
        out.append(text[pos:i])
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


_DOCTYPE_END = re.compile(r"[^>\[]*+(?:\[[^\]]*+\])?\s*+>")


def parse_nvlink_status(text: str) -> dict[int, dict[str, int]]:
    """``nvidia-smi nvlink -s`` -> ``{gpu index: {"up": links with a rate, "inactive": links <inactive>}}``."""
    out: dict[int, dict[str, int]] = {}
    cur: int | None = None
    for line in (text or "").splitlines():
        if too_long(line):
            continue
        m = re.match(r"GPU (\d+):", line)
        if m:
            cur = int(m.group(1))
            out[cur] = {"up": 0, "inactive": 0}
            continue
        m = re.match(r"\s+Link \d+:\s*(.*)", line)
        if m and cur is not None:
            out[cur]["inactive" if "inactive" in m.group(1).lower() else "up"] += 1
    return out


def parse_lspci(text: str) -> dict[str, dict[str, Any]]:
    """``lspci -vvv -D`` -> ``{bdf: {"desc", "acs_cap": {flag: bool} | None, "acs_ctl": {flag: bool} | None,
    "caps_denied": bool}}``. ``caps_denied``: lspci ran without root and could not read capabilities."""
    out: dict[str, dict[str, Any]] = {}
    cur: dict[str, Any] | None = None
    for line in (text or "").splitlines():
        if too_long(line):
            continue
        m = re.match(r"^([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.*)", line)
        if not m:
            m2 = re.match(r"^([0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.*)", line)
            if m2:
                m = m2
        if m:
            bdf = m.group(1).lower()
            if len(bdf) == 7:
                bdf = "0000:" + bdf
            cur = out[bdf] = {"desc": m.group(2), "acs_cap": None, "acs_ctl": None, "caps_denied": False}
            continue
        if cur is None:
            continue
        s = line.strip()
        if s.startswith("Capabilities: <access denied>"):
            cur["caps_denied"] = True
        for key, tag in (("acs_cap", "ACSCap:"), ("acs_ctl", "ACSCtl:")):
            if s.startswith(tag):
                cur[key] = {f[:-1]: f.endswith("+") for f in s[len(tag):].split() if f[-1:] in "+-"}
    return out


def parse_mdstat(text: str) -> dict[str, dict[str, Any]]:
    """``/proc/mdstat`` -> ``{"md127": {"state": "active", "level": "raid0", "members": ["nvme1n1", ...],
    "failed": [...], "raid_disks": int | None, "up": int | None}}``."""
    out: dict[str, dict[str, Any]] = {}
    last: dict[str, Any] | None = None
    for line in (text or "").splitlines():
        if too_long(line):
            continue
        m = re.match(r"^(md[^\s:]+)\s*:\s*(\S+)\s+(?:\((?:auto-)?read-only\)\s+)?(\S+)\s+(.*)$", line)
        if m:
            members: list[str] = []
            failed: list[str] = []
            for tok in m.group(4).split():
                mm = re.match(r"([^\[\s]+)\[\d+\](\([A-Z]\))?", tok)
                if mm:
                    (failed if mm.group(2) == "(F)" else members).append(mm.group(1))
            level = m.group(3) if m.group(3).startswith(("raid", "linear")) else None
            last = out[m.group(1)] = {"state": m.group(2), "level": level, "members": members, "failed": failed,
                                      "raid_disks": None, "up": None}
            continue
        mm = re.search(r"\[(\d+)/(\d+)\]", line)
        if last is not None and mm:
            last["raid_disks"], last["up"] = int(mm.group(1)), int(mm.group(2))
    return out


def parse_findmnt(text: str) -> list[dict[str, Any]]:
    """``findmnt --json`` (list or tree form) -> ``[{"target", "source", "fstype", "options": [..]}]``."""
    try:
        doc = loads(text or "")
    except ValueError:
        return []
    out: list[dict[str, Any]] = []

    def walk(items: list[dict[str, Any]]) -> None:
        for fs in items or []:
            out.append({"target": fs.get("target"), "source": fs.get("source"), "fstype": fs.get("fstype"),
                        "options": [o for o in str(fs.get("options") or "").split(",") if o]})
            walk(fs.get("children") or [])

    walk((doc.get("filesystems") or []) if isinstance(doc, dict) else [])
    return out


def parse_ip_addr(text: str) -> dict[str, list[str]]:
    """``ip -j addr show`` -> ``{ifname: ["10.0.0.11/24", ...]}`` (IPv4 and IPv6)."""
    try:
        doc = loads(text or "")
    except ValueError:
        return {}
    out: dict[str, list[str]] = {}
    for itf in doc if isinstance(doc, list) else []:
        out[itf.get("ifname", "?")] = [f"{a.get('local')}/{a.get('prefixlen')}" for a in itf.get("addr_info") or []
                                       if a.get("local")]
    return out


def parse_mlnx_qos(text: str) -> dict[str, Any] | None:
    """``mlnx_qos -i NETDEV`` -> ``{"trust": "dscp"|"pcp", "pfc": [0/1 x 8], "dscp2prio": {dscp: prio}}``;
    ``None`` when the text holds none of these."""
    trust = None
    pfc: list[int] | None = None
    d2p: dict[int, int] = {}
    lines = (text or "").splitlines()
    for i, line in enumerate(lines):
        if too_long(line):
            continue
        m = re.search(r"Priority trust state:\s*(\w+)", line)
        if m:
            trust = m.group(1).lower()
        m = re.match(r"\s*prio:(\d)\s+dscp:([\d,\s]+)", line)
        if m:
            for d in m.group(2).replace(" ", "").split(","):
                if d.isdigit():
                    d2p[int(d)] = int(m.group(1))
        if re.match(r"\s*enabled\s+[01](\s+[01]){7}\s*$", line) and i > 0 and "priority" in lines[i - 1]:
            pfc = [int(x) for x in line.split()[1:9]]
    if trust is None and pfc is None and not d2p:
        return None
    return {"trust": trust, "pfc": pfc, "dscp2prio": d2p}


def parse_limits(text: str) -> dict[str, Any]:
    """``/proc/self/limits`` -> ``{"memlock_soft": bytes | "unlimited" | None, "memlock_hard": ...}``."""
    out: dict[str, Any] = {"memlock_soft": None, "memlock_hard": None}
    for line in (text or "").splitlines():
        if line.startswith("Max locked memory"):
            parts = line[len("Max locked memory"):].split()
            if len(parts) >= 2:
                conv = [p if p == "unlimited" else int(p) if p.isdigit() else None for p in parts[:2]]
                out["memlock_soft"], out["memlock_hard"] = conv
    return out


_MAX_TOML_CHARS = 1024 * 1024
"""Largest containerd configuration read (characters); real ones are a few KB."""


def parse_containerd_runtimes(text: str | None) -> dict[str, Any] | None:
    """``/etc/containerd/config.toml`` -> ``{"default": name | None, "runtimes": {name: runtime_type}}``
    (config versions 2 and 3); ``None`` when the file is absent or not TOML."""
    if text is None:
        return None
    if len(text) > _MAX_TOML_CHARS:
        return None
    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):  # tomllib recurses into nested arrays and tables
        return None
    plugins = doc.get("plugins") or {}
    for key in ('io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime'):
        cri = plugins.get(key) or {}
        ctd = cri.get("containerd") or {}
        if ctd:
            return {"default": ctd.get("default_runtime_name"),
                    "runtimes": {k: (v or {}).get("runtime_type") for k, v in (ctd.get("runtimes") or {}).items()}}
    return {"default": None, "runtimes": {}}


# ---------------------------------------------------------------------------------------------
# the document
# ---------------------------------------------------------------------------------------------


@dataclass
class Command:
    """One recorded command: ``ran`` False when the tool is missing; ``rc``, ``stdout``, ``stderr``."""

    ran: bool
    rc: int | None
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """The tool ran and exited 0."""
        return self.ran and self.rc == 0


@dataclass
class NodeFacts:
    """One node's collected facts (raw texts plus the parsed views the judge uses)."""

    host: str
    kernel: str
    uid: int | None
    doc: dict[str, Any]
    commands: dict[str, Command] = field(default_factory=dict)

    def cmd(self, name: str) -> Command:
        """The command recorded as ``name`` (a not-run :class:`Command` when the payload did not record it)."""
        return self.commands.get(name) or Command(False, None, "", "not recorded")

    def file(self, path: str) -> str | None:
        """Text of a file the payload read (``None``: absent or unreadable)."""
        return (self.doc.get("files") or {}).get(path)

    def sysfs(self, path: str) -> str | None:
        """A sysfs value (stripped), ``None`` when absent."""
        return (self.doc.get("sysfs") or {}).get(path)

    def listing(self, path: str) -> list[str] | None:
        """Entries of a directory the payload listed (``None``: absent)."""
        return (self.doc.get("dirs") or {}).get(path)

    def link(self, path: str) -> str | None:
        """Resolved target of a sysfs link."""
        return (self.doc.get("links") or {}).get(path)

    @property
    def processes(self) -> set[str]:
        return set(self.doc.get("processes") or [])

    @functools.cached_property
    def smi(self) -> dict[str, Any] | None:
        """``nvidia-smi -q -x`` parsed (:func:`parse_nvidia_smi_xml`), once: two dozen checks read it."""
        c = self.cmd("nvidia-smi -q -x")
        return parse_nvidia_smi_xml(c.stdout) if c.ok else None

    @property
    def modules_loaded(self) -> set[str]:
        return {ln.split()[0] for ln in (self.file("/proc/modules") or "").splitlines() if ln.strip()}

    @property
    def mounts(self) -> list[dict[str, Any]]:
        return parse_findmnt(self.cmd("findmnt").stdout)

    @property
    def addresses(self) -> dict[str, list[str]]:
        return parse_ip_addr(self.cmd("ip addr").stdout)


def parse_document(doc: dict[str, Any]) -> NodeFacts:
    """:class:`NodeFacts` of one node-health document. Raises ``ValueError`` when ``doc`` is not one."""
    if not isinstance(doc, dict) or doc.get("kind") != DOC_KIND:
        raise ValueError("not a node-health document (kind must be 'node-health')")
    cmds = {}
    for name, c in (doc.get("commands") or {}).items():
        if isinstance(c, dict):
            cmds[name] = Command(ran=not c.get("missing"), rc=c.get("rc"), stdout=str(c.get("stdout") or ""),
                                 stderr=str(c.get("stderr") or ""))
    return NodeFacts(host=str(doc.get("host") or "?"), kernel=str(doc.get("kernel") or ""), uid=doc.get("uid"),
                     doc=doc, commands=cmds)
