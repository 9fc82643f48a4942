"""Node health checks, the branches the fault-kind tables of test_node_checks.py do not reach.

Each test feeds the judge a node's recorded tool outputs (tests/fixtures/node, assembled by
:mod:`tests.validate.node_fixtures`) changed the way the real tool shows one situation (nvidia-smi's
documented exit codes, a sysfs file a kernel lacks, ``findmnt`` absent, a docker ``daemon.json``), or a
blueprint changed the way a user would write it, and asserts the verdict with its figures, cause and fix.
Thresholds are tested on both sides, with the boundary the check's cited source gives (the blueprint's
declared counts, docker's size grammar, the kernel's sysfs ABI), so that a mutant of the branch's line is
killed. Each test's opening comment names the branch (function and condition) it pins.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from blueprints import load_blueprint
from validate.judge import JudgeResult
from validate.node_checks import (
    CHECKS,
    NA,
    Check,
    CheckVerdict,
    blocking_failures,
    cross_checks,
    explains,
    judge_node_documents,
    judge_node_file,
    node_table,
)

from .node_fixtures import RecordedNode, as_recorded
from .test_node_checks import EXAMPLES, checks_of, drop_gpu, in_gpu, judge_one, mount_opts, node


def example(tmp_path: Path, name: str, *edits: tuple[str, str], gpudirect: str | None = None) -> Any:
    """The example blueprint ``name`` with text ``edits`` (old, new) applied the way a user edits the YAML,
    loaded (so validated) and set to what the recorded nodes run (:func:`as_recorded`)."""
    text = (EXAMPLES / name).read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / name
    path.write_text(text)
    return as_recorded(load_blueprint(path).blueprint, gpudirect=gpudirect)


def dgx(tmp_path: Path, *edits: tuple[str, str]) -> Any:
    """The DGX H100 example as the dgx-h100 recording was deployed (nvidia-peermem)."""
    return example(tmp_path, "onprem-dgx-h100-ib.yaml", *edits, gpudirect="nvidia-peermem")


def judge_doc(doc: dict[str, Any], bp: Any, group: str) -> dict[str, dict]:
    (r,) = judge_node_documents([doc], bp, group, source="node.json")
    return checks_of(r)


def set_mount(n: RecordedNode, target: str, source: str) -> None:
    doc = json.loads(n.files["findmnt.json"])
    (fs,) = [fs for fs in doc["filesystems"] if fs["target"] == target]
    fs["source"] = source
    n.files["findmnt.json"] = json.dumps(doc)


# ---------------------------------------------------------------------------------------------
# Check itself
# ---------------------------------------------------------------------------------------------


def test_a_check_built_with_a_plain_verdict_string_holds_the_verdict() -> None:
    # Check.__post_init__: a verdict given as its string (what metrics["checks"] records) becomes the CheckVerdict
    c = Check("gpu.ecc", "warn", "ECC disabled on 00000000:18:00.0", "ECC enabled")
    assert c.verdict is CheckVerdict.WARN
    assert c.to_json()["verdict"] == "warn"
    with pytest.raises(ValueError):
        Check("gpu.ecc", "broken", "", "")


# ---------------------------------------------------------------------------------------------
# GPUs: nvidia-smi's exit codes (nvidia-smi(1) RETURN VALUE), counts against the declaration, ECC, NVLink
# ---------------------------------------------------------------------------------------------


def test_nvidia_smi_that_cannot_talk_to_the_driver_fails_gpu_count_with_its_message(fixtures_dir: Path,
                                                                                  tmp_path: Path) -> None:
    # check_gpu_count: nvidia-smi ran but exited non-zero (smi None, c.ran) -> fail "nvidia-smi exited RC: MESSAGE";
    # nvidia-smi prints this to stdout and exits 9 ("NVIDIA driver is not loaded", nvidia-smi(1))
    bp = dgx(tmp_path)
    doc = node(fixtures_dir, "dgx-h100", "dgx-01").doc()
    msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
           "NVIDIA driver is installed and running.")
    doc["commands"]["nvidia-smi -q -x"] = {"argv": [], "rc": 9, "stdout": msg + "\n\n", "stderr": "", "missing": False}
    c = judge_doc(doc, bp, "dgx")
    g = c["gpu.count"]
    assert (g["verdict"], g["measured"]) == ("fail", f"nvidia-smi exited 9: {msg}"), g
    assert "cannot talk to the GPUs" in g["cause"] and "dmesg | grep -i nvrm" in g["fix"] and g["blocking"]
    # what stderr says comes first when the tool wrote there
    doc["commands"]["nvidia-smi -q -x"]["stderr"] = "Failed to initialize NVML: Driver/library version mismatch\n"
    assert judge_doc(doc, bp, "dgx")["gpu.count"]["measured"] == (
        "nvidia-smi exited 9: Failed to initialize NVML: Driver/library version mismatch")
    assert all(c[k]["verdict"] == "invalid" for k in ("gpu.driver", "gpu.ecc", "gpu.mig", "gpu.persistence"))


def test_gpus_on_a_node_whose_group_declares_none_are_a_warning(fixtures_dir: Path) -> None:
    # check_gpu_count: `not want` with GPUs seen -> warn (the `"warn" if gpus else NA` side with GPUs)
    bp = load_blueprint(EXAMPLES / "local-workstation.yaml").blueprint  # `hardware: {}`: no GPU declared
    c = judge_one(node(fixtures_dir, "dgx-h100", "dgx-01"), bp, "local")["gpu.count"]
    assert (c["verdict"], c["measured"], c["expected"]) == ("warn", "8 x NVIDIA H100 80GB HBM3", "no NVIDIA GPU declared")
    assert c["cause"] == "the node has GPUs the blueprint does not declare" and "hardware.gpu" in c["fix"]
    assert not c["blocking"]


@pytest.mark.parametrize(("present", "verdict"), [(5, "warn"), (4, "pass")])
def test_more_gpus_than_the_blueprint_declares_warn(fixtures_dir: Path, tmp_path: Path, present: int,
                                                    verdict: str) -> None:
    # check_gpu_count: `len(gpus) > want` (blueprint `gpu: h100-sxm:4`): 5 GPUs -> warn, exactly 4 -> pass
    bp = dgx(tmp_path, ("gpu: h100-sxm:8", "gpu: h100-sxm:4"))
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    for _ in range(8 - present):
        drop_gpu(n, 0)
    c = judge_one(n, bp, "dgx")["gpu.count"]
    assert (c["verdict"], c["measured"], c["expected"]) == (verdict, f"{present} x NVIDIA H100 80GB HBM3",
                                                            "4 x h100-sxm"), c
    assert c["cause"] == ("more GPUs than declared" if verdict == "warn" else "")


def test_a_pending_row_remap_and_ecc_turned_off_are_warnings(fixtures_dir: Path, tmp_path: Path) -> None:
    # check_gpu_ecc: `pending` (remapped_rows/remapped_row_pending Yes) -> warn; then `off` (ecc_mode/current_ecc
    # Disabled) -> warn with expected "ECC enabled"; a pending remap is reported before ECC off
    bp = dgx(tmp_path)
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    in_gpu(n, 2, "<current_ecc>Enabled", "<current_ecc>Disabled")
    c = judge_one(n, bp, "dgx")["gpu.ecc"]
    assert (c["verdict"], c["measured"], c["expected"]) == ("warn", "ECC disabled on 00000000:3A:00.0", "ECC enabled"), c
    assert "memory errors go undetected" in c["cause"] and c["fix"] == "nvidia-smi -e 1 and reboot"
    in_gpu(n, 5, "<remapped_row_pending>No", "<remapped_row_pending>Yes")
    c = judge_one(n, bp, "dgx")["gpu.ecc"]
    assert (c["verdict"], c["measured"]) == ("warn", "row remapping pending on 00000000:AB:00.0"), c
    assert c["cause"] == "a row remap waits for a GPU reset" and "nvidia-smi -r" in c["fix"] and not c["blocking"]


def test_nvlink_status_that_fails_to_run_is_invalid(fixtures_dir: Path, tmp_path: Path) -> None:
    # check_gpu_nvlink: `not c.ok` for `nvidia-smi nvlink -s` -> invalid (exit 15: "GPU has fallen off the bus")
    doc = node(fixtures_dir, "dgx-h100", "dgx-01").doc()
    doc["commands"]["nvidia-smi nvlink -s"] = {
        "argv": [], "rc": 15, "missing": False, "stderr": "",
        "stdout": "Unable to determine the device handle for GPU 00000000:18:00.0: GPU is lost.  Reboot the system to "
                  "recover this GPU\n"}
    c = judge_doc(doc, dgx(tmp_path), "dgx")["gpu.nvlink"]
    assert (c["verdict"], c["measured"], c["fix"]) == ("invalid", "nvidia-smi nvlink -s exited 15",
                                                      "run nvidia-smi nvlink -s by hand"), c
    assert not c["blocking"]


# ---------------------------------------------------------------------------------------------
# fabric: RoCE ECN, IPoIB without a declared address
# ---------------------------------------------------------------------------------------------


def test_ecn_is_judged_only_where_the_blueprint_turns_it_on(fixtures_dir: Path, tmp_path: Path) -> None:
    # check_roce_qos: `if q.ecn` false (the example as shipped: `ecn: false`) -> the per-priority ECN knob is not read;
    # true -> ECN off on priority 3 fails
    on = example(tmp_path, "onprem-l40s-roce.yaml", ("gid_index: discover", "gid_index: 3"))
    off = on.model_copy(update={"network": on.network.model_copy(update={
        "roce": on.network.roce.model_copy(update={"ecn": False})})})
    n = node(fixtures_dir, "l40s-roce", "l40s-01")
    n.set_sysfs("/sys/class/net/ens1f0np0/ecn/roce_np/enable/3", "0")
    c = judge_one(n, off, "l40s")["fabric.roce-qos"]
    assert (c["verdict"], c["expected"]) == ("pass", "trust dscp, PFC 0,0,0,1,0,0,0,0, DSCP 26 -> priority 3"), c
    assert c["measured"] == "ens1f0np0: as declared; ens2f0np0: as declared"
    c = judge_one(n, on, "l40s")["fabric.roce-qos"]
    assert c["verdict"] == "fail" and c["expected"].endswith(", ECN on"), c
    assert c["measured"] == "ens1f0np0: ECN off on priority 3; ens2f0np0: as declared"


def test_ipoib_without_a_declared_address_wants_some_ipv4(fixtures_dir: Path, tmp_path: Path) -> None:
    # check_ipoib: no address declared (`ipoib` without `cidr`) -> pass with an IPv4 address on the interface,
    # warn with only the IPv6 link-local one every IPoIB interface has
    bp = dgx(tmp_path, ("ipoib: {enabled: true, mode: datagram, cidr: 192.168.100.0/24}",
                        "ipoib: {enabled: true, mode: datagram}"))
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    c = judge_one(n, bp, "dgx")["fabric.ipoib"]
    assert (c["verdict"], c["expected"]) == ("pass", "ibp24s0 in datagram mode"), c
    assert c["measured"] == "ibp24s0 datagram mode, addresses 192.168.100.3/24"
    n.replace("ip-addr.json", '"family":"inet","local":"192.168.100.3","prefixlen":24',
              '"family":"inet6","local":"fe80::ba59:9f03:c:1a2b","prefixlen":64')
    c = judge_one(n, bp, "dgx")["fabric.ipoib"]
    assert (c["verdict"], c["measured"]) == ("warn", "ibp24s0 datagram mode, addresses fe80::ba59:9f03:c:1a2b/64"), c
    assert c["cause"] == "no IPv4 address on the IPoIB interface" and c["fix"] == "declare ipoib.cidr"


# ---------------------------------------------------------------------------------------------
# PCIe: no PCI tree, IOMMU mode unreadable
# ---------------------------------------------------------------------------------------------


def test_acs_without_a_pci_tree_is_invalid(fixtures_dir: Path, tmp_path: Path) -> None:
    # check_acs: `not eps` (the payload saw no /sys/bus/pci/devices link: a pod without the host's sysfs) -> invalid
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    n.files["links.tsv"] = "".join(ln + "\n" for ln in n.files["links.tsv"].splitlines()
                                   if not ln.startswith("/sys/bus/pci/devices/"))
    c = judge_one(n, dgx(tmp_path), "dgx")["pcie.acs"]
    assert (c["verdict"], c["measured"]) == ("invalid", "no GPU or NIC found in the PCI tree"), c
    assert "/sys/bus/pci/devices" in c["fix"] and not c["blocking"]


def _without_group_types(n: RecordedNode) -> dict[str, Any]:
    """The node on a kernel without /sys/kernel/iommu_groups/*/type (the file came with Linux 5.11, sysfs ABI
    ``sysfs-kernel-iommu_groups``) but with its IOMMU unit listed in /sys/class/iommu."""
    for line in n.files["sysfs.tsv"].splitlines():
        if re.match(r"/sys/kernel/iommu_groups/[^/]+/type\t", line):
            n.set_sysfs(line.split("\t")[0], None)
    doc = n.doc()
    doc["dirs"]["/sys/class/iommu"] = ["dmar0"]
    return doc


def test_an_iommu_whose_mode_cannot_be_read_warns_unless_the_cmdline_says_passthrough(fixtures_dir: Path,
                                                                                       tmp_path: Path) -> None:
    # check_iommu: `"iommu=pt" not in cmdline and iommus and not ident` -> warn; each conjunct false -> pass
    bp = dgx(tmp_path)
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    c = judge_doc(_without_group_types(n), bp, "dgx")["pcie.iommu"]
    assert c["verdict"] == "pass" and "iommu=pt" in c["measured"] and c["measured"].endswith("groups none"), c
    n.replace("proc-cmdline.txt", " iommu=pt", "")
    c = judge_doc(_without_group_types(n), bp, "dgx")["pcie.iommu"]
    assert c["verdict"] == "warn" and c["measured"].endswith("; 1 IOMMU unit(s); groups none"), c
    assert c["cause"] == "IOMMU present but the mode cannot be read from the groups" and "iommu=pt" in c["fix"]
    doc = _without_group_types(n)
    doc["dirs"]["/sys/class/iommu"] = []  # IOMMU off: no unit
    assert judge_doc(doc, bp, "dgx")["pcie.iommu"]["verdict"] == "pass"
    n.set_sysfs("/sys/kernel/iommu_groups/7/type", "identity")  # a passthrough group shows the mode
    assert judge_doc(n.doc(), bp, "dgx")["pcie.iommu"]["verdict"] == "pass"


# ---------------------------------------------------------------------------------------------
# limits: memlock unreadable, /dev/shm absent, docker's default-shm-size
# ---------------------------------------------------------------------------------------------


def test_unreadable_limits_are_invalid_not_pass(fixtures_dir: Path, tmp_path: Path) -> None:
    # check_memlock: `soft is None` (/proc/self/limits not read) -> invalid
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    del n.files["proc-self-limits.txt"]
    c = judge_one(n, dgx(tmp_path), "dgx")["limits.memlock"]
    assert (c["verdict"], c["measured"], c["blocking"]) == ("invalid", "/proc/self/limits unreadable", False), c


def test_a_node_without_dev_shm_fails(fixtures_dir: Path, tmp_path: Path) -> None:
    # check_shm: `not st` (the payload records statvfs None when /dev/shm cannot be read) -> fail
    doc = node(fixtures_dir, "dgx-h100", "dgx-01").doc()
    doc["statvfs"]["/dev/shm"] = None
    c = judge_doc(doc, dgx(tmp_path), "dgx")["limits.shm"]
    assert (c["verdict"], c["measured"]) == ("fail", "/dev/shm absent"), c
    assert "SHM transport" in c["cause"] and c["fix"] == "mount tmpfs on /dev/shm"
    assert not c["blocking"]  # limits.shm is not a blocking check
    assert not CHECKS["limits.shm"].blocking


@pytest.mark.parametrize(("size", "verdict"), [
    ("1G", "pass"), ("1024M", "pass"), ("2Gi", "pass"), ("2GiB", "pass"), ("1p", "pass"), ("1 G", "pass"),
    ("1023M", "fail"), ("64Mi", "fail"), ("64m", "fail"),
])
def test_docker_default_shm_size_in_dockers_size_grammar(fixtures_dir: Path, tmp_path: Path, size: str,
                                                         verdict: str) -> None:
    # check_shm / _size_bytes: daemon.json's default-shm-size is read by docker with go-units RAMInBytes
    # (`^(\d+(\.\d+)*) ?([kKmMgGtTpP])?[iI]?[bB]?$`, binary prefixes, one space allowed): against the declared 1G,
    # 1 GiB passes and 1023 MiB fails
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    n.files["etc-docker-daemon.json"] = json.dumps({"default-shm-size": size})
    c = judge_one(n, dgx(tmp_path), "dgx")["limits.shm"]
    assert c["expected"] == "/dev/shm >= 1G, container default shm >= 1G"
    assert (c["verdict"], c["measured"]) == (verdict, f"/dev/shm 504 GiB; docker default-shm-size {size}"), c
    if verdict == "fail":
        assert c["cause"].startswith("containers get a /dev/shm smaller than declared")
        assert '"default-shm-size": "1G"' in c["fix"]


@pytest.mark.parametrize("size", ["lots", " 1G", "1G ", "1  G", "1.5.2G", "", 1073741824])
def test_a_default_shm_size_docker_cannot_read_stops_docker(fixtures_dir: Path, tmp_path: Path, size: Any) -> None:
    # docker reads default-shm-size as a JSON string in RAMInBytes' grammar (MemBytes.UnmarshalJSON, moby opts.go):
    # a number, "" or text around the size is "invalid size" and dockerd exits at start
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    n.files["etc-docker-daemon.json"] = json.dumps({"default-shm-size": size})
    c = judge_one(n, dgx(tmp_path), "dgx")["limits.shm"]
    assert (c["verdict"], c["measured"]) == ("fail", f"/dev/shm 504 GiB; docker default-shm-size {size}"), c
    assert c["cause"] == f"default-shm-size {json.dumps(size)} is not a size docker reads: dockerd refuses to start"
    assert c["fix"] == 'set "default-shm-size": "1G" in /etc/docker/daemon.json'


@pytest.mark.parametrize("text", ['{\n  "default-shm-size": "64M",\n}\n', "", "{}{}"])
def test_a_daemon_json_that_is_not_json_stops_docker(fixtures_dir: Path, tmp_path: Path, text: str) -> None:
    # dockerd exits at start on a daemon.json it cannot parse, an empty one included (moby issue 41268: "unable to
    # configure the Docker daemon with file /etc/docker/daemon.json: EOF"); a trailing comma is the usual slip
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    n.files["etc-docker-daemon.json"] = text
    c = judge_one(n, dgx(tmp_path), "dgx")["limits.shm"]
    assert (c["verdict"], c["measured"]) == ("fail", "/dev/shm 504 GiB; /etc/docker/daemon.json is not JSON"), c
    assert c["cause"] == "dockerd refuses to start with a daemon.json it cannot parse: no container runs"
    assert "python3 -m json.tool /etc/docker/daemon.json" in c["fix"]
    # no daemon.json at all: docker's defaults, /dev/shm decides
    del n.files["etc-docker-daemon.json"]
    assert judge_one(n, dgx(tmp_path), "dgx")["limits.shm"]["verdict"] == "pass"


# ---------------------------------------------------------------------------------------------
# storage: findmnt absent, md arrays by another name, one-drive scratch, a shared path of another type
# ---------------------------------------------------------------------------------------------


def test_without_findmnt_the_mounts_are_invalid(fixtures_dir: Path, tmp_path: Path) -> None:
    # check_scratch and check_shared: `not f.cmd("findmnt").ok` -> invalid (never fail: nothing was seen)
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    n.missing_tools.add("findmnt")
    c = judge_one(n, dgx(tmp_path), "dgx")
    for cid in ("storage.scratch", "storage.shared"):
        assert (c[cid]["verdict"], c[cid]["measured"], c[cid]["fix"]) == (
            "invalid", "findmnt gave nothing", "install util-linux (findmnt)"), c[cid]
    assert c["storage.raid"]["verdict"] == "invalid"


def test_the_only_md_array_is_the_scratch_whatever_its_device_name(fixtures_dir: Path, tmp_path: Path) -> None:
    # check_raid: name not in mdstat, `len(md) == 1 and src.startswith("/dev/md")` -> that array (the nvme_scratch
    # role creates /dev/md/scratch, mdstat lists md127); a plain drive mounted beside the array is not it -> fail
    bp = dgx(tmp_path)
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    set_mount(n, "/raid", "/dev/md/scratch")
    c = judge_one(n, bp, "dgx")["storage.raid"]
    assert (c["verdict"], c["measured"]) == ("pass", "md127: raid0 active, 8 active member(s)"), c
    set_mount(n, "/raid", "/dev/nvme2n1")
    c = judge_one(n, bp, "dgx")["storage.raid"]
    assert (c["verdict"], c["measured"]) == ("fail", "/raid is on /dev/nvme2n1, not an md array"), c
    assert "single drive instead of the RAID0" in c["cause"] and "nvme_scratch" in c["fix"] and c["blocking"]


def test_a_scratch_declared_without_raid_warns_when_it_sits_on_an_array(fixtures_dir: Path, tmp_path: Path) -> None:
    # check_raid: `s.raid == "none"` -> pass on a plain drive, warn on an md device
    bp = dgx(tmp_path, ("nvme: {count: 8, size_gb: 3840}", "nvme: {count: 1, size_gb: 3840}"),
             ("local_nvme: {raid: raid0,", "local_nvme: {raid: none,"))
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    c = judge_one(n, bp, "dgx")["storage.raid"]
    assert (c["verdict"], c["measured"], c["expected"]) == ("warn", "/dev/md127", "one drive, no RAID"), c
    set_mount(n, "/raid", "/dev/nvme2n1")
    n.files["proc-mdstat.txt"] = "Personalities : \nunused devices: <none>\n"
    c = judge_one(n, bp, "dgx")["storage.raid"]
    assert (c["verdict"], c["measured"]) == ("pass", "/dev/nvme2n1"), c


@pytest.mark.parametrize(("drives", "verdict"), [(1, "pass"), (2, "fail")])
def test_raid0_over_one_declared_drive_is_the_drive_itself(fixtures_dir: Path, tmp_path: Path, drives: int,
                                                           verdict: str) -> None:
    # check_raid: raid0, no md array at the mount, `n == 1` -> pass "(one drive)"; 2 declared drives -> fail
    bp = dgx(tmp_path, ("nvme: {count: 8, size_gb: 3840}", f"nvme: {{count: {drives}, size_gb: 3840}}"))
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    set_mount(n, "/raid", "/dev/nvme2n1")
    n.files["proc-mdstat.txt"] = "Personalities : \nunused devices: <none>\n"
    c = judge_one(n, bp, "dgx")["storage.raid"]
    assert c["verdict"] == verdict, c
    assert c["measured"] == ("/dev/nvme2n1 (one drive)" if drives == 1 else "/raid is on /dev/nvme2n1, not an md array")
    assert c["expected"] == f"raid0 over {drives} drive(s)"


def test_a_shared_path_mounted_with_another_file_system_fails_and_the_next_is_still_judged(
        fixtures_dir: Path, tmp_path: Path) -> None:
    # check_shared: `not fs.startswith(kind)` -> "PATH is FS, not KIND" and `continue` to the next declared mount
    # (an NFS home added to the DGX blueprint); nfs4 on a declared nfs mount is NFS (startswith)
    nfs_home = "  - kind: nfs\n    name: home\n    mount: /home/shared\n    server: 10.0.0.5\n    export: /export/home\n"
    bp = dgx(tmp_path, ("software:\n", nfs_home + "software:\n"))
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    mount_opts(n, "/lustre", lambda o: o, fstype="nfs4")
    c = judge_one(n, bp, "dgx")["storage.shared"]
    assert (c["verdict"], c["measured"]) == ("fail", "/lustre is nfs4, not lustre; /home/shared not mounted"), c
    doc = json.loads(n.files["findmnt.json"])
    doc["filesystems"].append({"target": "/home/shared", "source": "10.0.0.5:/export/home", "fstype": "nfs4",
                               "options": "rw,relatime,vers=4.2,hard,proto=tcp,nconnect=8,timeo=600,retrans=2,sec=sys"})
    n.files["findmnt.json"] = json.dumps(doc)
    c = judge_one(n, bp, "dgx")["storage.shared"]
    assert (c["verdict"], c["measured"]) == ("fail", "/lustre is nfs4, not lustre; /home/shared nfs4"), c
    mount_opts(n, "/lustre", lambda o: o, fstype="lustre")
    c = judge_one(n, bp, "dgx")["storage.shared"]
    assert (c["verdict"], c["measured"]) == ("pass", "/lustre lustre; /home/shared nfs4"), c


# ---------------------------------------------------------------------------------------------
# results, cross-node checks, reading files back, the report table
# ---------------------------------------------------------------------------------------------


def test_a_missing_node_with_nothing_to_compare_fails_the_cross_node_result(fixtures_dir: Path) -> None:
    # _result: `all(c.verdict == NA ...)` -> invalid "every check is not applicable" (only the cross-node result can:
    # a node's memlock and /dev/shm checks always apply); the missing node then makes it fail
    bp = load_blueprint(EXAMPLES / "local-workstation.yaml").blueprint  # ethernet, no GPU, no sandbox
    n = node(fixtures_dir, "dgx-h100", "dgx-01")
    n.missing_tools.add("nvidia-smi")
    res = judge_node_documents([n.doc()], bp, "local", source="x", expected_nodes=2)
    cross = res[-1]
    assert cross.label == "node: cross-node" and cross.verdict == "fail"
    assert {c["verdict"] for c in cross.metrics["checks"]} == {NA}
    assert cross.reasons == ["every check is not applicable: the node showed nothing to judge",
                             "1 of 2 node(s) answered: the others did not run the payload"]
    assert res[0].verdict != "invalid"  # the node itself had checks that apply


def test_not_applicable_checks_are_noted_and_a_result_without_any_has_no_note(fixtures_dir: Path,
                                                                                tmp_path: Path) -> None:
    # _result: `if na` -> note naming the n/a checks; a cross-node result where all four checks apply (RoCE with a
    # fixed GID index, a gVisor RuntimeClass on Kubernetes) has no note
    bp = example(tmp_path, "onprem-l40s-roce.yaml", ("gid_index: discover", "gid_index: 3"),
                 ("    local_nvme: {mount: /scratch}\n", "    local_nvme: {mount: /scratch}\n    sandbox: {runtime: gvisor}\n"))
    docs = [node(fixtures_dir, "l40s-roce", h).doc() for h in ("l40s-01", "l40s-02")]
    res = judge_node_documents(docs, bp, "l40s", source="x",
                               cluster=[{"kind": "node-health-cluster", "runtimeclasses": [{"name": "gvisor", "handler": "gvisor"}]}])
    cross = checks_of(res[-1])
    assert {k: v["verdict"] for k, v in cross.items()} == {"cross.mtu": "pass", "cross.driver": "pass",
                                                           "cross.gid": "pass", "cross.runtimeclass": "pass"}
    assert res[-1].notes == []
    assert any(n.startswith("not applicable on this node (each check's measurement says why): ") and "gpu.nvlink" in n
               for n in res[0].notes), res[0].notes


def test_a_runtime_class_outside_kubernetes_is_not_applicable(fixtures_dir: Path) -> None:
    # check_runtime_class: RuntimeClass declared, `not cluster` (an ssh/Slurm run has no RuntimeClass list) -> n/a
    bp = load_blueprint(EXAMPLES / "onprem-sandbox-kata.yaml").blueprint
    docs = [node(fixtures_dir, "dgx-h100", h).doc() for h in ("dgx-01", "dgx-02")]
    c = checks_of(judge_node_documents(docs, bp, "kata", source="x")[-1])["cross.runtimeclass"]
    assert (c["verdict"], c["measured"]) == (NA, "not a Kubernetes run (no RuntimeClass list)"), c
    assert c["expected"] == "RuntimeClass kata-qemu-nvidia-gpu with handler kata-qemu-nvidia-gpu" and not c["blocking"]


def test_cross_checks_of_no_node_compare_nothing() -> None:
    # cross_checks: `e0 is not None` false (no node, no expectation) -> no RuntimeClass check, the others n/a
    out = cross_checks([])
    assert [(c.id, c.verdict) for c in out] == [("cross.mtu", NA), ("cross.driver", NA), ("cross.gid", NA)]


def test_an_unreadable_node_file_is_one_invalid_result(tmp_path: Path) -> None:
    # judge_node_file: `except OSError` -> one invalid result naming the file
    bp = load_blueprint(EXAMPLES / "local-workstation.yaml").blueprint
    missing = tmp_path / "raw" / "node.json"
    (r,) = judge_node_file(missing, bp, "local", label="node")
    assert (r.kind, r.label, r.verdict, r.source) == ("node", "node", "invalid", str(missing))
    assert len(r.reasons) == 1 and r.reasons[0].startswith(f"cannot read {missing}: ")


def test_blocking_failures_and_the_table_skip_other_suites_results(fixtures_dir: Path, tmp_path: Path) -> None:
    # blocking_failures: `r.kind != "node"` -> continue; node_table: a result that is not a node's or has no checks
    # -> continue, node names prefixed with the group when results span groups, None without any node result
    bp = load_blueprint(EXAMPLES / "onprem-sandbox-kata.yaml").blueprint
    nccl = JudgeResult(source="raw/nccl.txt", kind="nccl", verdict="fail")
    nccl.metrics["checks"] = [{"id": "fabric.ports", "verdict": "fail", "blocking": True}]
    (empty,) = judge_node_documents([], bp, "kata", source="x")  # a node result without checks
    a = node(fixtures_dir, "dgx-h100", "dgx-01")
    (kata,) = judge_node_documents([a.doc()], bp, "kata", source="x")
    (vms,) = judge_node_documents([a.doc()], bp, "vms", source="x")
    res = [nccl, empty, kata, vms]
    blocked = blocking_failures(res)
    assert ("None", "None") not in blocked and all(k[0] in ("kata", "vms") for k in blocked)
    assert {c["id"] for c in blocked[("kata", "dgx-01")]} == {
        c["id"] for c in kata.metrics["checks"] if c["blocking"]} != set()
    t = node_table(res)
    assert t is not None and [name for name, _ in t.rows] == ["kata/dgx-01", "vms/dgx-01"]
    assert node_table([nccl, empty]) is None
    assert [name for name, _ in node_table([nccl, kata]).rows] == ["dgx-01"]


@pytest.mark.parametrize(("cid", "kind", "want"), [
    ("storage.raid", "fio", True), ("storage.raid", "nccl", False), ("gpu.count", "amp", True),
    ("gpu.persistence", "nccl", False), ("cross.runtimeclass", "amp", True), ("cross.mtu", "fio", False),
    ("no.such.check", "nccl", False),
])
def test_which_suites_a_failed_check_explains(cid: str, kind: str, want: bool) -> None:
    # explains: a node check's CHECKS entry (`spec is None` false), else the cross-node table; unknown ids explain nothing
    assert explains({"id": cid, "verdict": "fail"}, kind) is want


@pytest.mark.parametrize(("handler", "verdict"), [("runsc", "pass"), ("gvisor", "fail")])
def test_a_runtime_class_whose_handler_is_not_its_name(fixtures_dir: Path, tmp_path: Path, handler: str,
                                                       verdict: str) -> None:
    # on AWS the user data registers gVisor's handler as `runsc` (containerd's runtime name in gVisor's docs), so the
    # `gvisor` RuntimeClass must name `runsc`: one named after itself never starts a pod, and the cause says which is
    # the class and which the handlers
    bp = example(tmp_path, "aws-eks-p4d.yaml", ("    local_nvme: {mount: /scratch}\n",
                                                "    local_nvme: {mount: /scratch}\n    sandbox: {runtime: gvisor}\n"))
    cluster = [{"kind": "node-health-cluster", "runtimeclasses": [{"name": "gvisor", "handler": handler}]}]
    res = judge_node_documents([node(fixtures_dir, "dgx-h100", "dgx-01").doc()], bp, "gpu", source="x", cluster=cluster)
    c = checks_of(res[-1])["cross.runtimeclass"]
    assert c["verdict"] == verdict and c["expected"] == "RuntimeClass gvisor with handler runsc", c
    if verdict == "fail":
        assert c["cause"] == "RuntimeClass gvisor names handler gvisor, the nodes register runsc: pods never start"
