"""Node health checks judged on recorded tool outputs (tests/fixtures/node): healthy nodes pass, every
fault kind of the node suite gives its verdict and cause, on several members of each kind."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from blueprints import load_blueprint
from validate.judge import JudgeResult
from validate.node_checks import CHECKS, NA, blocking_failures, judge_node_documents, node_table
from validate.parsers.node import (
    parse_containerd_runtimes,
    parse_lspci,
    parse_mdstat,
    parse_mlnx_qos,
    parse_nvidia_smi_xml,
    read_documents,
)
from validate.payloads import PAYLOAD_DIR
from validate.runner import explanations, mark_explained

from .node_fixtures import RecordedNode, as_recorded

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "blueprints" / "examples"


@pytest.fixture(scope="module")
def dgx_bp():
    return as_recorded(load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml").blueprint, gpudirect="nvidia-peermem")


def _roce_with_gid_index(index: int | str):
    bp = as_recorded(load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml").blueprint)
    net = bp.network.model_copy(update={"roce": bp.network.roce.model_copy(update={"gid_index": index})})
    return bp.model_copy(update={"network": net})


@pytest.fixture(scope="module")
def roce_bp():
    """The RoCE example with a fixed GID index 3 (the example itself discovers the index on each node)."""
    return _roce_with_gid_index(3)


@pytest.fixture(scope="module")
def roce_discover_bp():
    bp = as_recorded(load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml").blueprint)
    assert bp.network.roce.gid_index == "discover"
    return bp


def node(fixtures_dir: Path, system: str, host: str) -> RecordedNode:
    return RecordedNode.load(fixtures_dir / "node" / system / host)


def checks_of(r: JudgeResult) -> dict[str, dict]:
    return {c["id"]: c for c in r.metrics["checks"]}


def judge_one(n: RecordedNode, bp, group: str) -> dict[str, dict]:
    (r,) = judge_node_documents([n.doc()], bp, group, source="node.json")
    return checks_of(r)


# ---------------------------------------------------------------------------------------------
# healthy nodes
# ---------------------------------------------------------------------------------------------


def test_healthy_dgx_nodes_pass_every_applicable_check(fixtures_dir: Path, dgx_bp) -> None:
    docs = [node(fixtures_dir, "dgx-h100", h).doc() for h in ("dgx-01", "dgx-02")]
    results = judge_node_documents(docs, dgx_bp, "dgx", source="node.json", label="node")
    assert [r.label for r in results] == ["node: dgx-01", "node: dgx-02", "node: cross-node"]
    for r in results:
        assert r.verdict == "pass", r.reasons
    c = checks_of(results[0])
    applicable = {k for k, v in c.items() if v["verdict"] != NA}
    assert applicable == {"gpu.count", "gpu.driver", "gpu.persistence", "gpu.ecc", "gpu.mig", "gpu.nvlink",
                          "gpu.fabric-manager", "gdr.module", "fabric.ports", "fabric.mtu", "fabric.ipoib", "pcie.acs",
                          "pcie.iommu", "limits.memlock", "limits.shm", "storage.scratch", "storage.raid",
                          "storage.shared", "software.runtimes", "software.modules"}
    # NVLink 4 (H100) needs no NVLink subnet manager; no RoCE on InfiniBand
    assert {c[k]["verdict"] for k in ("gpu.nvlsm", "fabric.roce-gid", "fabric.roce-qos")} == {NA}
    assert c["gpu.count"]["measured"] == "8 x NVIDIA H100 80GB HBM3"
    assert "192.168.100.3/24" in c["fabric.ipoib"]["measured"]
    assert c["storage.raid"]["measured"].startswith("md127: raid0 active, 8 active member(s)")
    assert all(c[k]["source"].startswith("https://") for k in c)
    cross = checks_of(results[2])
    assert cross["cross.mtu"]["verdict"] == cross["cross.driver"]["verdict"] == "pass"


def test_healthy_roce_nodes_pass(fixtures_dir: Path, roce_bp) -> None:
    docs = [node(fixtures_dir, "l40s-roce", h).doc() for h in ("l40s-01", "l40s-02")]
    results = judge_node_documents(docs, roce_bp, "l40s", source="node.json")
    assert [r.verdict for r in results] == ["pass"] * 3, [r.reasons for r in results]
    c = checks_of(results[0])
    assert c["fabric.roce-gid"]["verdict"] == c["fabric.roce-qos"]["verdict"] == c["gdr.module"]["verdict"] == "pass"
    assert c["gpu.nvlink"]["verdict"] == c["gpu.fabric-manager"]["verdict"] == NA  # L40S: PCIe, no NVSwitch
    assert checks_of(results[2])["cross.gid"]["verdict"] == "pass"


# ---------------------------------------------------------------------------------------------
# fault kinds: each mutates recorded outputs the way the fault shows in the real tool
# ---------------------------------------------------------------------------------------------

Fault = Callable[[RecordedNode, int], None]


def _gpu_blocks(xml: str) -> list[str]:
    return re.findall(r"\t<gpu id=.*?\t</gpu>\n", xml, flags=re.DOTALL)


def drop_gpu(n: RecordedNode, i: int) -> None:
    n.replace("nvidia-smi-q-x.xml", _gpu_blocks(n.files["nvidia-smi-q-x.xml"])[i], "")


def in_gpu(n: RecordedNode, i: int, old: str, new: str) -> None:
    blk = _gpu_blocks(n.files["nvidia-smi-q-x.xml"])[i]
    n.replace("nvidia-smi-q-x.xml", blk, blk.replace(old, new, 1))


def nvlink_down(n: RecordedNode, i: int) -> None:
    lines = n.files["nvidia-smi-nvlink-s.txt"].splitlines()
    start = lines.index(next(ln for ln in lines if ln.startswith(f"GPU {i}:")))
    lines[start + 1 + (i % 18)] = f"\t Link {i % 18}: <inactive>"
    n.files["nvidia-smi-nvlink-s.txt"] = "\n".join(lines) + "\n"


def port(n: RecordedNode, i: int, leaf: str, value: str | None) -> None:
    n.set_sysfs(f"/sys/class/infiniband/mlx5_{i}/ports/1/{leaf}", value)


def acs_on(n: RecordedNode, i: int) -> None:
    """Turn on ACS redirect on the i-th bridge of the PCI tree (bridges sit above the GPUs and NICs)."""
    text = n.files["lspci-vvv.txt"]
    ctl = [m.start() for m in re.finditer(r"ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir-", text)]
    at = ctl[i % len(ctl)]
    n.files["lspci-vvv.txt"] = (text[:at] + "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+"
                                + text[at + len("ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir-"):])


def iommu_translated(n: RecordedNode, i: int) -> None:
    n.replace("proc-cmdline.txt", " iommu=pt", "")
    for g in range(i, i + 5):
        n.set_sysfs(f"/sys/kernel/iommu_groups/{g}/type", ["DMA", "DMA-FQ"][g % 2])


def mdstat_members(n: RecordedNode, k: int) -> None:
    """Leave ``k`` of the 8 drives in the array (a drive not discovered at creation)."""
    members = " ".join(f"nvme{j + 2}n1[{j}]" for j in reversed(range(k)))
    n.files["proc-mdstat.txt"] = re.sub(r"raid0 (nvme\S+ ?)+", f"raid0 {members} ", n.files["proc-mdstat.txt"])


def drop_mount(n: RecordedNode, target: str) -> None:
    doc = json.loads(n.files["findmnt.json"])
    doc["filesystems"] = [fs for fs in doc["filesystems"] if fs["target"] != target]
    n.files["findmnt.json"] = json.dumps(doc)


def mount_opts(n: RecordedNode, target: str, fn: Callable[[str], str], fstype: str | None = None) -> None:
    doc = json.loads(n.files["findmnt.json"])
    for fs in doc["filesystems"]:
        if fs["target"] == target:
            fs["options"] = fn(fs["options"])
            if fstype:
                fs["fstype"] = fstype
    n.files["findmnt.json"] = json.dumps(doc)


def vermagic(n: RecordedNode, mod: str, value: str | None) -> None:
    rows = dict(ln.split("\t", 1) for ln in n.files["modinfo-vermagic.tsv"].splitlines())
    if value is None:
        rows.pop(mod)
    else:
        rows[mod] = value
    n.files["modinfo-vermagic.tsv"] = "".join(f"{k}\t{v}\n" for k, v in rows.items())


DGX_FAULTS: list[tuple[str, Fault, str, str, str]] = [
    # (name, fault(node, member index), check id, verdict, words of the cause)
    ("gpu-missing", drop_gpu, "gpu.count", "fail", "missing"),
    ("gpu-model", lambda n, i: n.replace("nvidia-smi-q-x.xml", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"),
     "gpu.count", "fail", "model differs"),
    ("driver-branch", lambda n, i: n.replace("nvidia-smi-q-x.xml", "550.90.07", ["535.183.01", "560.35.03", "470.256.02"][i % 3]),
     "gpu.driver", "fail", "not the declared branch"),
    ("persistence-off", lambda n, i: in_gpu(n, i, "<persistence_mode>Enabled", "<persistence_mode>Disabled"),
     "gpu.persistence", "warn", "nvidia-persistenced"),
    ("ecc-uncorrectable", lambda n, i: in_gpu(n, i, "<dram_uncorrectable>0</dram_uncorrectable>",
                                              f"<dram_uncorrectable>{i + 1}</dram_uncorrectable>"),
     "gpu.ecc", "fail", "memory errors"),
    ("row-remap-failure", lambda n, i: in_gpu(n, i, "<remapped_row_failure>No", "<remapped_row_failure>Yes"),
     "gpu.ecc", "fail", "memory errors"),
    ("mig-enabled", lambda n, i: in_gpu(n, i, "<current_mig>Disabled", "<current_mig>Enabled"),
     "gpu.mig", "fail", "MIG"),
    ("nvlink-down", nvlink_down, "gpu.nvlink", "fail", "NVLink links down"),
    ("fabric-manager-down", lambda n, i: (n.set_meta(processes=["sshd"]),
                                          n.replace("systemctl.tsv", "nvidia-fabricmanager\tactive",
                                                    "nvidia-fabricmanager\tfailed")),
     "gpu.fabric-manager", "fail", "system not yet initialized"),
    ("fabric-not-trained", lambda n, i: in_gpu(n, i, "<state>Completed</state>", "<state>In Progress</state>"),
     "gpu.fabric-manager", "fail", "not finished training"),
    ("peermem-missing", lambda n, i: n.replace("proc-modules.txt", "nvidia_peermem 16384 0 - Live 0x0000000000000000\n", ""),
     "gdr.module", "fail", "peer-memory module"),
    ("port-down", lambda n, i: port(n, i, "state", "1: DOWN"), "fabric.ports", "fail", "down"),
    ("port-init-no-sm", lambda n, i: port(n, i, "state", "2: INIT"), "fabric.ports", "fail", "subnet manager"),
    ("port-slow", lambda n, i: port(n, i, "rate", "200 Gb/sec (4X HDR)"), "fabric.ports", "fail", "lower rate"),
    ("port-link-layer", lambda n, i: port(n, i, "link_layer", "Ethernet"), "fabric.ports", "fail", "link layer"),
    ("port-absent", lambda n, i: port(n, i, "state", None), "fabric.ports", "fail", "missing"),
    ("ipoib-mode", lambda n, i: n.set_sysfs("/sys/class/net/ibp24s0/mode", "connected"), "fabric.ipoib", "fail", "mode"),
    ("ipoib-address", lambda n, i: n.replace("ip-addr.json", "192.168.100.3", f"192.168.100.{50 + i}"),
     "fabric.ipoib", "fail", "address"),
    ("acs-redirect", acs_on, "pcie.acs", "fail", "root complex"),
    ("iommu-translated", iommu_translated, "pcie.iommu", "fail", "translates DMA"),
    ("memlock", lambda n, i: n.replace("proc-self-limits.txt", "Max locked memory         unlimited            unlimited",
                                       f"Max locked memory         {65536 * (i + 1):<21}{65536 * (i + 1):<21}"),
     "limits.memlock", "fail", "ibv_reg_mr"),
    ("shm-small", lambda n, i: n.set_meta(shm_bytes=64 * 2**20 * (i + 1)), "limits.shm", "fail", "unhandled system error"),
    ("docker-shm", lambda n, i: n.files.__setitem__("etc-docker-daemon.json", json.dumps({"default-shm-size": "64M"})),
     "limits.shm", "fail", "docker"),
    ("scratch-unmounted", lambda n, i: drop_mount(n, "/raid"), "storage.scratch", "fail", "not mounted"),
    ("scratch-wrong-fs", lambda n, i: mount_opts(n, "/raid", lambda o: o, fstype="ext4"), "storage.scratch", "fail",
     "another file system"),
    ("raid-short", lambda n, i: mdstat_members(n, 1 + i % 7), "storage.raid", "fail", "every declared drive"),
    ("raid-failed-member", lambda n, i: n.replace("proc-mdstat.txt", f"nvme{i % 8 + 2}n1[{i % 8}]", f"nvme{i % 8 + 2}n1[{i % 8}](F)"),
     "storage.raid", "fail", "failed"),
    ("lustre-missing", lambda n, i: drop_mount(n, "/lustre"), "storage.shared", "fail", "missing"),
    ("lustre-no-flock", lambda n, i: mount_opts(n, "/lustre", lambda o: o.replace(",flock", "")), "storage.shared", "fail",
     "flock"),
    ("runtime-missing", lambda n, i: n.replace("etc-containerd-config.toml", "containerd.runtimes.nvidia", "containerd.runtimes.nv"),
     "software.runtimes", "fail", "not registered"),
    ("module-old-kernel", lambda n, i: vermagic(n, ["nvidia", "nvidia_peermem", "mlx5_ib", "lustre"][i % 4],
                                                "5.15.0-118-generic SMP mod_unload modversions "),
     "software.modules", "fail", "DKMS"),
    ("module-not-built", lambda n, i: vermagic(n, ["nvidia", "nvidia_peermem", "mlx5_ib", "lustre"][i % 4], None),
     "software.modules", "fail", "not built for the running kernel"),
]


@pytest.mark.parametrize("member", [0, 3, 7])
@pytest.mark.parametrize(("name", "fault", "cid", "verdict", "cause"), DGX_FAULTS, ids=[f[0] for f in DGX_FAULTS])
def test_dgx_fault_kinds(fixtures_dir: Path, dgx_bp, name: str, fault: Fault, cid: str, verdict: str, cause: str,
                         member: int) -> None:
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    fault(n, member)
    (r,) = judge_node_documents([n.doc()], dgx_bp, "dgx", source="node.json")
    c = checks_of(r)
    assert c[cid]["verdict"] == verdict, c[cid]
    assert cause.lower() in (c[cid]["cause"] + c[cid]["measured"]).lower(), c[cid]
    assert c[cid]["fix"]
    # only this check moved: every other applicable check still passes
    others = {k: v["verdict"] for k, v in c.items() if k != cid and v["verdict"] not in ("pass", NA)}
    allowed = {"storage.scratch": {"storage.raid"}}.get(cid, set())  # no mount: the array cannot be found
    assert set(others) <= allowed, others
    assert r.verdict == verdict
    assert c[cid]["blocking"] == (verdict == "fail" and CHECKS[cid].blocking)


def l40s_gid_shift(n: RecordedNode, i: int) -> None:
    """An extra IPv6 address moves the IPv4 RoCE v2 GID from index 3 to index 5 (GID order follows the addresses)."""
    nd, dev = [("ens1f0np0", "mlx5_0"), ("ens2f0np0", "mlx5_1")][i % 2]
    p = f"/sys/class/infiniband/{dev}/ports/1"
    rows = dict(ln.split("\t", 1) for ln in n.files["sysfs.tsv"].splitlines())
    v4 = rows[f"{p}/gids/3"]
    for idx, (gid, typ) in {2: ("fd00:0000:0000:0000:0000:0000:0000:0021", "IB/RoCE v1"),
                            3: ("fd00:0000:0000:0000:0000:0000:0000:0021", "RoCE v2"),
                            4: (v4, "IB/RoCE v1"), 5: (v4, "RoCE v2")}.items():
        n.set_sysfs(f"{p}/gids/{idx}", gid)
        n.set_sysfs(f"{p}/gid_attrs/types/{idx}", typ)
        n.set_sysfs(f"{p}/gid_attrs/ndevs/{idx}", nd)


def qos(n: RecordedNode, i: int, old: str, new: str) -> None:
    nd = ["ens1f0np0", "ens2f0np0"][i % 2]
    n.replace(f"mlnx_qos-{nd}.txt", old, new)


ROCE_FAULTS: list[tuple[str, Fault, str, str, str]] = [
    ("gid-index-shifted", l40s_gid_shift, "fabric.roce-gid", "fail", "NCCL_IB_GID_INDEX=3"),
    ("gid-roce-v1", lambda n, i: n.set_sysfs(f"/sys/class/infiniband/mlx5_{i % 2}/ports/1/gid_attrs/types/3", "IB/RoCE v1"),
     "fabric.roce-gid", "fail", "RoCE v2 GID"),
    ("no-ipv4", lambda n, i: n.replace("ip-addr.json", ["172.16.0.21", "172.16.1.21"][i % 2], "fd00::21"),
     "fabric.roce-gid", "fail", "no IPv4"),
    ("pfc-wrong-priority", lambda n, i: qos(n, i, "enabled     0   0   0   1   0", "enabled     0   0   0   0   1"),
     "fabric.roce-qos", "fail", "lossy"),
    ("pfc-all-off", lambda n, i: qos(n, i, "enabled     0   0   0   1   0", "enabled     0   0   0   0   0"),
     "fabric.roce-qos", "fail", "lossy"),
    ("trust-pcp", lambda n, i: qos(n, i, "Priority trust state: dscp", "Priority trust state: pcp"), "fabric.roce-qos",
     "fail", "QoS differs"),
    ("dscp-map", lambda n, i: qos(n, i, "prio:3 dscp:31,30,29,28,27,26,25,24,", "prio:3 dscp:31,30,29,28,27,25,24,"),
     "fabric.roce-qos", "fail", "QoS differs"),
    ("ecn-off", lambda n, i: n.set_sysfs(f"/sys/class/net/{['ens1f0np0', 'ens2f0np0'][i % 2]}/ecn/roce_np/enable/3", "0"),
     "fabric.roce-qos", "fail", "QoS differs"),
    ("mtu", lambda n, i: n.set_sysfs(f"/sys/class/net/{['ens1f0np0', 'ens2f0np0'][i % 2]}/mtu", ["1500", "4200"][i % 2]),
     "fabric.mtu", "fail", "MTU differs"),
    ("dmabuf-proprietary", lambda n, i: n.replace("proc-driver-nvidia-version.txt", "Open Kernel Module for x86_64",
                                                  "x86_64 Kernel Module"), "gdr.module", "fail", "open GPU kernel modules"),
    ("dmabuf-old-kernel", lambda n, i: n.set_meta(kernel=["5.4.0-190-generic", "5.11.0-49-generic"][i % 2]),
     "gdr.module", "fail", "DMA-BUF"),
    ("nfs-version", lambda n, i: mount_opts(n, "/home/shared", lambda o: o.replace("vers=4.2", "vers=3"), fstype="nfs"),
     "storage.shared", "fail", "declared options"),
    ("raid-level", lambda n, i: n.replace("proc-mdstat.txt", "active raid0", "active raid1"), "storage.raid", "fail",
     "every declared drive"),
]


@pytest.mark.parametrize("member", [0, 1])
@pytest.mark.parametrize(("name", "fault", "cid", "verdict", "cause"), ROCE_FAULTS, ids=[f[0] for f in ROCE_FAULTS])
def test_roce_fault_kinds(fixtures_dir: Path, roce_bp, name: str, fault: Fault, cid: str, verdict: str, cause: str,
                          member: int) -> None:
    n = node(fixtures_dir, "l40s-roce", "l40s-01")
    fault(n, member)
    c = judge_one(n, roce_bp, "l40s")
    assert c[cid]["verdict"] == verdict, c[cid]
    assert cause.lower() in (c[cid]["cause"] + c[cid]["measured"]).lower(), c[cid]
    if name == "dmabuf-old-kernel":  # a kernel change also shows as modules built for another kernel
        assert c["software.modules"]["verdict"] == "fail"
        return
    others = {k: v["verdict"] for k, v in c.items() if k != cid and v["verdict"] not in ("pass", NA)}
    assert not others, others


def test_gid_shift_names_the_index_nccl_should_use(fixtures_dir: Path, roce_bp) -> None:
    n = node(fixtures_dir, "l40s-roce", "l40s-01")
    l40s_gid_shift(n, 0)
    c = judge_one(n, roce_bp, "l40s")["fabric.roce-gid"]
    assert "172.16.0.21 at index 5" in c["measured"] and "gid_index" in c["fix"]


def test_discovered_gid_index_needs_a_roce_v2_gid_not_a_fixed_position(fixtures_dir: Path, roce_discover_bp) -> None:
    """With ``gid_index: discover`` a shifted table is fine (the node looks the index up); a missing
    RoCE v2 GID for the data-plane address still fails, and nodes may differ in the index."""
    n = node(fixtures_dir, "l40s-roce", "l40s-01")
    l40s_gid_shift(n, 0)
    c = judge_one(n, roce_discover_bp, "l40s")["fabric.roce-gid"]
    assert c["verdict"] == "pass" and "172.16.0.21 at index 5" in c["measured"]
    for i in range(16):
        n.set_sysfs(f"/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/{i}", "IB/RoCE v1")
    c = judge_one(n, roce_discover_bp, "l40s")["fabric.roce-gid"]
    assert c["verdict"] == "fail" and "no RoCE v2 GID" in c["measured"]
    a, b = node(fixtures_dir, "l40s-roce", "l40s-01"), node(fixtures_dir, "l40s-roce", "l40s-02")
    l40s_gid_shift(a, 0)
    cross = checks_of(judge_node_documents([a.doc(), b.doc()], roce_discover_bp, "l40s", source="x")[-1])
    assert cross["cross.gid"]["verdict"] == NA


def test_mlnx_qos_missing_is_invalid_not_pass(fixtures_dir: Path, roce_bp) -> None:
    n = node(fixtures_dir, "l40s-roce", "l40s-01")
    n.missing_tools.add("mlnx_qos")
    c = judge_one(n, roce_bp, "l40s")["fabric.roce-qos"]
    assert c["verdict"] == "invalid" and "mlnx_qos" in c["fix"]


# ---------------------------------------------------------------------------------------------
# cross-node checks
# ---------------------------------------------------------------------------------------------


def test_cross_node_mtu_driver_and_gid(fixtures_dir: Path, dgx_bp, roce_bp) -> None:
    a, b = node(fixtures_dir, "dgx-h100", "dgx-01"), node(fixtures_dir, "dgx-h100", "dgx-02")
    b.set_sysfs("/sys/class/net/ibp64s0/mtu", "2044")  # no MTU declared for IB: only the comparison catches it
    b.replace("nvidia-smi-q-x.xml", "550.90.07", "550.54.15")
    res = judge_node_documents([a.doc(), b.doc()], dgx_bp, "dgx", source="node.json")
    cross = checks_of(res[-1])
    assert cross["cross.mtu"]["verdict"] == "fail" and "dgx-02/ibp64s0 2044" in cross["cross.mtu"]["measured"]
    assert cross["cross.driver"]["verdict"] == "fail" and "550.54.15" in cross["cross.driver"]["measured"]
    assert checks_of(res[0])["fabric.mtu"]["verdict"] == "pass"
    assert blocking_failures(res)[("dgx", "cross-node")]
    a, b = node(fixtures_dir, "l40s-roce", "l40s-01"), node(fixtures_dir, "l40s-roce", "l40s-02")
    l40s_gid_shift(b, 0)
    cross = checks_of(judge_node_documents([a.doc(), b.doc()], roce_bp, "l40s", source="x")[-1])
    assert cross["cross.gid"]["verdict"] == "fail"


def test_a_node_that_did_not_answer_fails_the_cross_node_result(fixtures_dir: Path, dgx_bp) -> None:
    res = judge_node_documents([node(fixtures_dir, "dgx-h100", "dgx-01").doc()], dgx_bp, "dgx", source="x",
                               expected_nodes=4)
    assert res[-1].verdict == "fail" and "1 of 4 node(s) answered" in res[-1].reasons[-1]


# ---------------------------------------------------------------------------------------------
# absent hardware, NVLink 5, sandboxes
# ---------------------------------------------------------------------------------------------


def test_missing_nvidia_smi_on_a_gpu_node_fails_and_nothing_gpu_passes(fixtures_dir: Path, dgx_bp) -> None:
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    n.missing_tools.add("nvidia-smi")
    c = judge_one(n, dgx_bp, "dgx")
    assert c["gpu.count"]["verdict"] == "fail" and "not installed" in c["gpu.count"]["cause"]
    for k in ("gpu.driver", "gpu.persistence", "gpu.ecc", "gpu.mig", "gpu.nvlink"):
        assert c[k]["verdict"] == "invalid", (k, c[k])


def test_nvlink5_needs_nvlsm(fixtures_dir: Path) -> None:
    bp = load_blueprint(fixtures_dir / "field" / "03-hgx-b200-nvlsm.yaml").blueprint
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    n.replace("nvidia-smi-q-x.xml", "NVIDIA H100 80GB HBM3", "NVIDIA B200")
    n.replace("nvidia-smi-q-x.xml", "550.90.07", "570.86.15")
    n.set_meta(host="b200-01")
    c = judge_one(n, bp, "b200")
    assert c["gpu.nvlsm"]["verdict"] == "fail" and "system not yet initialized" in c["gpu.nvlsm"]["cause"]
    assert c["gpu.fabric-manager"]["verdict"] == "pass"
    n.set_meta(processes=[*n.meta["processes"], "nvlsm"])
    assert judge_one(n, bp, "b200")["gpu.nvlsm"]["verdict"] == "pass"


def test_passthrough_host_counts_vfio_gpus_and_wants_the_iommu_on(fixtures_dir: Path) -> None:
    bp = load_blueprint(EXAMPLES / "onprem-sandbox-kata.yaml").blueprint
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    n.missing_tools.add("nvidia-smi")  # GPUs bound to vfio-pci: no NVIDIA driver on the host
    links = n.files["links.tsv"]
    gpus = [ln.split("\t")[0] for ln in links.splitlines() if ln.split("/")[-1].startswith(("0000:18", "0000:2a"))]
    c = judge_one(n, bp, "kata")
    assert c["gpu.count"]["verdict"] == "fail" and "0 bound to vfio-pci" in c["gpu.count"]["measured"]
    n.files["links.tsv"] = links + "".join(f"{p}/driver\t/sys/bus/pci/drivers/vfio-pci\n"
                                           for p in (ln.split("\t")[0] for ln in links.splitlines())
                                           if p.startswith("/sys/bus/pci/devices/"))
    c = judge_one(n, bp, "kata")
    assert c["gpu.count"]["verdict"] == "pass", c["gpu.count"]
    assert c["gpu.driver"]["verdict"] == NA and "passed through" in c["gpu.driver"]["measured"]
    assert c["pcie.iommu"]["verdict"] == "pass" and c["pcie.acs"]["verdict"] == NA
    # Kata handler not registered in containerd
    assert c["software.runtimes"]["verdict"] == "fail" and "kata" in c["software.runtimes"]["expected"]
    # IOMMU off: no unit, no groups
    for line in n.files["sysfs.tsv"].splitlines():
        if "/iommu_groups/" in line:
            n.set_sysfs(line.split("\t")[0], None)
    assert judge_one(n, bp, "kata")["pcie.iommu"]["verdict"] == "fail"
    assert gpus


def test_lspci_without_root_cannot_see_acs(fixtures_dir: Path, dgx_bp) -> None:
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    n.files["lspci-vvv.txt"] = re.sub(r"\tCapabilities: .*\n(\t\t.*\n)*", "\tCapabilities: <access denied>\n",
                                      n.files["lspci-vvv.txt"])
    assert judge_one(n, dgx_bp, "dgx")["pcie.acs"]["verdict"] == "invalid"
    n.missing_tools.add("lspci")
    assert judge_one(n, dgx_bp, "dgx")["pcie.acs"]["verdict"] == "invalid"


def test_this_machine_really_runs_the_payload_and_absent_hardware_never_passes(tmp_path: Path) -> None:
    """The payload runs here for real; judged against every example, declared hardware this machine
    lacks is fail / invalid / n/a, never pass."""
    out = tmp_path / "node.json"
    subprocess.run([sys.executable, str(PAYLOAD_DIR / "node_health.py"), "--output", str(out)], check=True, timeout=120)
    (doc,) = read_documents(out.read_text())
    assert doc["kind"] == "node-health" and doc["kernel"] and "/proc/cmdline" in doc["files"]
    gpu_here = not doc["commands"]["nvidia-smi -q -x"]["missing"]
    rdma_here = bool(doc["dirs"].get("/sys/class/infiniband"))
    for ex in sorted(EXAMPLES.glob("*.yaml")):
        loaded = load_blueprint(ex)
        bp = loaded.blueprint
        for g in (rg.group for rg in loaded.cluster.compute_groups):
            (r,) = judge_node_documents([doc], bp, g.name, source=str(out))
            c = checks_of(r)
            if not gpu_here:
                for k in ("gpu.driver", "gpu.ecc", "gpu.mig", "gpu.persistence", "gpu.fabric-manager"):
                    assert c[k]["verdict"] != "pass", (ex.name, k, c[k])
                assert c["gpu.count"]["verdict"] in (("fail", NA) if not g.sandbox.passthrough else ("fail",))
            if not rdma_here and c["fabric.ports"]["expected"] != "no RDMA port declared":
                assert c["fabric.ports"]["verdict"] == "fail", (ex.name, c["fabric.ports"])
            if not Path(g.local_nvme.mount if g.local_nvme else "/nonexistent").is_mount():
                assert c["storage.scratch"]["verdict"] in ("fail", NA, "invalid")


# ---------------------------------------------------------------------------------------------
# parsers, documents, table, marking
# ---------------------------------------------------------------------------------------------


def test_parsers_on_recorded_outputs(fixtures_dir: Path) -> None:
    d = fixtures_dir / "node" / "dgx-h100" / "dgx-01"
    smi = parse_nvidia_smi_xml((d / "nvidia-smi-q-x.xml").read_text())
    assert smi and smi["driver_version"] == "550.90.07" and len(smi["gpus"]) == 8
    assert smi["gpus"][0]["ecc_uncorrectable_volatile"] == 0 and smi["gpus"][0]["fabric_state"] == "Completed"
    assert parse_nvidia_smi_xml("not xml") is None
    # a DOCTYPE with an entity is stripped, never expanded
    evil = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><nvidia_smi_log></nvidia_smi_log>'
    assert parse_nvidia_smi_xml(evil) == {"driver_version": None, "cuda_version": None, "gpus": []}
    pci = parse_lspci((d / "lspci-vvv.txt").read_text())
    bridges = [v for v in pci.values() if v["acs_ctl"] is not None]
    assert bridges and not any(v["acs_ctl"]["ReqRedir"] for v in bridges)
    md = parse_mdstat((d / "proc-mdstat.txt").read_text())
    assert md["md127"]["level"] == "raid0" and len(md["md127"]["members"]) == 8
    degraded = parse_mdstat("md0 : active raid1 sdb1[1](F) sda1[0]\n      1 blocks [2/1] [U_]\n")["md0"]
    assert degraded["failed"] == ["sdb1"]
    # `[n/m]`: n devices in the array, m of them up (md(4), /proc/mdstat); a degraded array tells them apart
    assert (degraded["raid_disks"], degraded["up"]) == (2, 1)
    qos = parse_mlnx_qos((fixtures_dir / "node" / "l40s-roce" / "l40s-01" / "mlnx_qos-ens1f0np0.txt").read_text())
    assert qos == {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "dscp2prio": qos["dscp2prio"]}
    assert qos["dscp2prio"][26] == 3 and qos["dscp2prio"][0] == 0
    rt = parse_containerd_runtimes((d / "etc-containerd-config.toml").read_text())
    assert rt == {"default": "nvidia", "runtimes": {"runc": "io.containerd.runc.v2", "nvidia": "io.containerd.runc.v2"}}


def test_documents_are_found_in_mixed_output(fixtures_dir: Path) -> None:
    a = node(fixtures_dir, "dgx-h100", "dgx-01").doc()
    b = node(fixtures_dir, "dgx-h100", "dgx-02").doc()
    text = ("srun: job 42 queued\n" + json.dumps(a) + "\n" + "Warning: Permanently added 'dgx-02'\n"
            + json.dumps(b) + "\n{\"kind\": \"amp\"}\n")
    assert [d["host"] for d in read_documents(text)] == ["dgx-01", "dgx-02"]
    assert [d["host"] for d in read_documents(json.dumps([a, b]))] == ["dgx-01", "dgx-02"]
    assert read_documents("no json here") == []
    (r,) = judge_node_documents([], load_blueprint(EXAMPLES / "local-workstation.yaml").blueprint, "local", source="x")
    assert r.verdict == "invalid"


def test_node_table_and_explained_marking(fixtures_dir: Path, dgx_bp) -> None:
    a, b = node(fixtures_dir, "dgx-h100", "dgx-01"), node(fixtures_dir, "dgx-h100", "dgx-02")
    port(b, 5, "state", "1: DOWN")
    b.replace("proc-mdstat.txt", "nvme2n1[0]", "nvme2n1[0](F)")
    res = judge_node_documents([a.doc(), b.doc()], dgx_bp, "dgx", source="node.json")
    t = node_table(res)
    assert t is not None and [name for name, _ in t.rows] == ["dgx-01", "dgx-02", "cross-node"]
    assert "gpu.nvlsm" in t.not_applicable and "fabric.ports" in t.columns
    assert {(name, c["id"]) for name, c in t.failing} == {("dgx-02", "fabric.ports"), ("dgx-02", "storage.raid")}
    assert set(blocking_failures(res)) == {("dgx", "dgx-02")}
    blockers = explanations(res)  # every registered suite's explanations: the node suite's failed blocking checks
    assert set(blockers) == {("node", "dgx", "dgx-02")}
    nccl = JudgeResult(source="raw/nccl.txt", kind="nccl", verdict="fail")
    fio = JudgeResult(source="raw/fio.json", kind="fio", verdict="warn")
    amp = JudgeResult(source="raw/amp.json", kind="amp")
    mark_explained([nccl, fio, amp], "dgx", blockers)
    assert nccl.metrics["explained_by"] == ["dgx-02: fabric.ports"] and nccl.verdict == "fail"
    assert fio.metrics["explained_by"] == ["dgx-02: storage.raid"]
    assert "explained_by" not in amp.metrics  # a fabric port does not explain a one-GPU training run
    assert any("mlx5_5/1" in note and note.startswith("explained by the node suite: dgx-02 failed blocking check "
                                                      "fabric.ports (measured ") for note in nccl.notes)
    mark_explained([other := JudgeResult(source="x", kind="nccl")], "another-group", blockers)
    assert "explained_by" not in other.metrics


def test_iommu_groups_are_counted_and_a_linear_array_is_not_raid0(fixtures_dir: Path, dgx_bp) -> None:
    # the recorded DGX has 160 IOMMU groups of type identity (sysfs.tsv) and its scratch is md127, a RAID0 over 8 NVMe
    # drives; an md array of another level (`linear` concatenates: one drive's throughput) fails storage.raid
    # (kills `+ 1` -> `| 1` in the group count and `level != raid` -> `>`: "linear" sorts before "raid0")
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    c = judge_one(n, dgx_bp, "dgx")
    assert c["pcie.iommu"]["measured"].endswith("groups identity: 160"), c["pcie.iommu"]
    assert c["storage.raid"]["verdict"] == "pass"
    n.replace("proc-mdstat.txt", " raid0 ", " linear ")
    c = judge_one(n, dgx_bp, "dgx")
    assert c["storage.raid"]["verdict"] == "fail" and c["storage.raid"]["measured"].startswith("md127: linear active"), \
        c["storage.raid"]


def test_node_table_of_results_read_back_from_disk(fixtures_dir: Path, dgx_bp, tmp_path: Path) -> None:
    # `clusterforge report RUN` reads results.jsonl back: the kinds are then strings json made, not the code's own
    # constants (kills `kind != "node"` -> `is not`, which drops every node row of a report built from disk)
    from validate.report import load_results

    a, b = node(fixtures_dir, "dgx-h100", "dgx-01"), node(fixtures_dir, "dgx-h100", "dgx-02")
    port(b, 5, "state", "1: DOWN")
    res = judge_node_documents([a.doc(), b.doc()], dgx_bp, "dgx", source="node.json")
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in res))
    back = node_table(load_results(tmp_path))
    assert back is not None and [name for name, _ in back.rows] == ["dgx-01", "dgx-02", "cross-node"]
    assert {(name, c["id"]) for name, c in back.failing} == {("dgx-02", "fabric.ports")}


def efa_node(fixtures_dir: Path, devices: int, down: int | None = None) -> RecordedNode:
    """A p5.48xlarge-like node: the DGX recording with its InfiniBand ports replaced by EFA devices
    (``rdmapXsY``, driver ``efa``), as /sys/class/infiniband shows them on AWS."""
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    n.files["sysfs.tsv"] = "".join(ln + "\n" for ln in n.files["sysfs.tsv"].splitlines()
                                   if not ln.startswith("/sys/class/infiniband/"))
    n.files["links.tsv"] = "".join(ln + "\n" for ln in n.files["links.tsv"].splitlines()
                                   if not ln.startswith("/sys/class/infiniband/"))
    for k in range(devices):
        dev = f"rdmap{k + 16}s{k + 27}"
        n.set_sysfs(f"/sys/class/infiniband/{dev}/ports/1/state", "1: DOWN" if k == down else "4: ACTIVE")
        n.set_sysfs(f"/sys/class/infiniband/{dev}/ports/1/link_layer", "Unspecified")
        n.files["links.tsv"] += f"/sys/class/infiniband/{dev}/device/driver\t/sys/bus/pci/drivers/efa\n"
    n.set_meta(host="ip-10-0-1-11")
    return n


@pytest.mark.parametrize(("devices", "down", "verdict"), [(32, None, "pass"), (31, None, "fail"), (8, None, "fail"),
                                                           (32, 0, "fail"), (32, 17, "fail")])
def test_efa_devices_against_the_instance_type(fixtures_dir: Path, devices: int, down: int | None, verdict: str) -> None:
    loaded = load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml")
    bp = loaded.blueprint
    g = loaded.cluster.compute_groups[0].name
    c = judge_one(efa_node(fixtures_dir, devices, down), bp, g)["fabric.ports"]
    assert c["verdict"] == verdict, c
    assert c["expected"].startswith("32 EFA device(s)")
    if verdict == "fail":
        assert "EFA" in c["cause"]


@pytest.mark.parametrize(("classes", "verdict"), [
    ([{"name": "kata-qemu-nvidia-gpu", "handler": "kata-qemu-nvidia-gpu"}, {"name": "nvidia", "handler": "nvidia"}], "pass"),
    ([{"name": "nvidia", "handler": "nvidia"}], "fail"),
    ([{"name": "kata-qemu-nvidia-gpu", "handler": "kata"}], "fail"),
    ([], "fail"),
])
def test_runtime_class_of_a_kubernetes_run(fixtures_dir: Path, classes: list, verdict: str) -> None:
    bp = load_blueprint(EXAMPLES / "onprem-sandbox-kata.yaml").blueprint
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    cluster = [{"kind": "node-health-cluster", "runtimeclasses": classes}]
    res = judge_node_documents([n.doc()], bp, "kata", source="x", cluster=cluster)
    c = checks_of(res[-1])["cross.runtimeclass"]
    assert res[-1].label == "node: cross-node" and c["verdict"] == verdict, c
    assert c["expected"] == "RuntimeClass kata-qemu-nvidia-gpu with handler kata-qemu-nvidia-gpu"
    if verdict == "fail":
        # the cause names the class and, for a wrong one, both handlers
        wrong = {rc["name"]: rc["handler"] for rc in classes}.get("kata-qemu-nvidia-gpu")
        assert c["blocking"] and c["cause"] == (
            "RuntimeClass kata-qemu-nvidia-gpu is missing: pods asking for it are rejected" if wrong is None else
            f"RuntimeClass kata-qemu-nvidia-gpu names handler {wrong}, the nodes register kata-qemu-nvidia-gpu: "
            "pods never start")
    # the same documents read back from a raw file the Kubernetes launcher writes
    assert read_documents(json.dumps(n.doc()) + "\n" + json.dumps(cluster[0]) + "\n", "node-health-cluster") == cluster


def test_vendor_unit_names_come_from_the_catalog_in_validate() -> None:
    """No module of the validation suite spells a vendor daemon's unit name where it names the unit (a
    ``systemctl``/``journalctl -u`` argument, ``NAME.service``): the judge, its messages and
    the failure signatures read them from the catalog (``blueprints.vendor.vendor_units``), the payload gets them
    as arguments."""
    import validate
    from blueprints.vendor import vendor_units
    from validate.signatures import SIGNATURES

    root = Path(validate.__file__).parent
    offenders = []
    for name in vendor_units().values():
        n = re.escape(name)
        rx = re.compile(rf"(systemctl(\s+[\w-]+)*\s+|journalctl\s+-u\s+){n}(?![\w-])|(?<![\w/-]){n}\.service\b")
        for path in sorted(root.rglob("*.py")):
            for i, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                if rx.search(code):
                    offenders.append(f"{path.relative_to(root)}:{i}: {name}: {line.strip()}")
    assert offenders == []
    # every unit a signature names resolves through the catalog, and the texts name the catalog's units
    for s in SIGNATURES:
        assert "{unit:" not in s.cause + s.fix, s.id
    fm = next(s for s in SIGNATURES if s.id == "fabric-manager-not-running")
    assert f"systemctl status {vendor_units()['fabricmanager']}" in fm.fix
    # NVLSM has no unit of its own (Fabric Manager's unit starts it): the text names the process, never a unit
    assert "nvlsm" not in vendor_units() and "nvlsm.service" not in fm.cause + fm.fix and "nvlsm" in fm.cause


def test_nvlink_failure_names_each_gpu_with_its_inactive_links(fixtures_dir: Path, dgx_bp) -> None:
    # the measured text names the GPUs and how many links each lost; "no link reported" only when nvidia-smi
    # reported no link at all
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    nvlink_down(n, 2)
    nvlink_down(n, 5)
    (r,) = judge_node_documents([n.doc()], dgx_bp, "dgx", source="node.json")
    c = checks_of(r)["gpu.nvlink"]
    assert (c["verdict"], c["measured"]) == ("fail", "GPU 2: 1 inactive, GPU 5: 1 inactive")


def test_a_bmc_display_adapter_is_not_taken_for_a_gpu_under_the_acs_check(fixtures_dir: Path, dgx_bp) -> None:
    # servers carry a BMC's VGA function (ASPEED, vendor 0x1a03, class 0x0300): a display device but no NVIDIA GPU,
    # so the bridges above it are not the GPUs' and NICs' and the check counts the same devices as without it
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    (before,) = judge_node_documents([n.doc()], dgx_bp, "dgx", source="node.json")
    bmc = "/sys/bus/pci/devices/0000:03:00.0"
    n.files["links.tsv"] += f"{bmc}\t/sys/devices/pci0000:00/0000:00:1c.0/0000:02:00.0/0000:03:00.0\n"
    n.set_sysfs(f"{bmc}/class", "0x030000")
    n.set_sysfs(f"{bmc}/vendor", "0x1a03")
    (after,) = judge_node_documents([n.doc()], dgx_bp, "dgx", source="node.json")
    a, b = checks_of(after)["pcie.acs"], checks_of(before)["pcie.acs"]
    assert (a["verdict"], a["measured"]) == (b["verdict"], b["measured"]) == ("pass", b["measured"])


def test_ipoib_address_is_the_one_declared_for_the_checked_interface(fixtures_dir: Path, dgx_bp) -> None:
    # a host with addresses on two IPoIB interfaces: the check expects the address of the group's interface,
    # not the first one listed
    import dataclasses

    from validate.node_checks import check_ipoib, node_expectation
    from validate.parsers.node import parse_document

    e = node_expectation(dgx_bp, "dgx")
    nd = e.ns.ipoib_netdev
    assert nd == "ibp24s0"
    host_key = next(h for h in e.ipoib if h.split(".")[0] == "dgx-01")
    want = next(a["address"] for a in e.ipoib[host_key] if a["netdev"] == nd)
    e2 = dataclasses.replace(e, ipoib={**e.ipoib, host_key: [{"netdev": "ib0", "address": "10.9.9.9/24"},
                                                            *e.ipoib[host_key]]})
    f = parse_document(node(fixtures_dir, "dgx-h100", "dgx-01").doc())
    c = check_ipoib(f, e2)
    assert c.verdict == "pass" and want in c.expected and "10.9.9.9" not in c.expected, c
