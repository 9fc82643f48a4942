"""The Slurm renderer, from the user's side: what `clusterforge render` writes under `DIR/slurm/` for each Slurm
example (golden files), and the rendering rules that decide what a version of Slurm gets.

Numbers are pinned to their sources: RealMemory is 95 % of the installed memory (ParallelCluster's rule,
https://docs.aws.amazon.com/parallelcluster/latest/ug/Scheduling-v3.html); a DGX H100 has 2 x 56 cores with
Hyper-Threading and 2 TiB (https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html); Debian 12
ships Slurm 22.05.8, Ubuntu 22.04 21.08.5, Ubuntu 24.04 23.11.4 (packages.debian.org / packages.ubuntu.com).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from blueprints import load_blueprint, parse_blueprint
from blueprints.slurm import compress_hostlist, conf_line, slurm_files, slurm_settings
from clusterforge.cli import main
from tests.golden_files import assert_golden, golden_dir

from .rule_cases.emit import emit

EXAMPLES = Path(__file__).resolve().parents[2] / "blueprints" / "examples"
SLURM_EXAMPLES = ["onprem-dgx-h100-ib", "onprem-l40s-roce"]


def _conf(text: str) -> dict[str, str]:
    """slurm.conf's single ``Key=value`` lines (not node / partition lines) as a mapping."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and " " not in line and "=" in line:
            k, v = line.split("=", 1)
            out[k] = v
    return out


def _lines(text: str, first_key: str) -> list[dict[str, str]]:
    return [dict(p.split("=", 1) for p in line.split()) for line in text.splitlines() if line.startswith(first_key + "=")]


@pytest.mark.parametrize("example", SLURM_EXAMPLES)
def test_render_writes_the_slurm_files(example: str, tmp_path: Path) -> None:
    assert main(["render", str(EXAMPLES / f"{example}.yaml"), "-o", str(tmp_path)]) == 0
    root = tmp_path / "slurm"
    files = {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}
    assert {"etc/slurm/slurm.conf", "etc/slurm/gres.conf", "etc/slurm/cgroup.conf", "etc/slurm/slurmdbd.conf"} <= set(files)
    assert "StoragePass" not in files["etc/slurm/slurmdbd.conf"]  # the role appends it on the controller
    assert_golden(files, golden_dir("slurm") / example)


def test_dgx_node_lines_come_from_the_catalog() -> None:
    s = slurm_settings(load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml").blueprint)
    assert s is not None
    conf = slurm_files(s)["/etc/slurm/slurm.conf"]
    nodes = _lines(conf, "NodeName")
    assert [n["NodeName"] for n in nodes] == ["dgx-01", "dgx-02", "dgx-03", "dgx-04"]
    n = nodes[0]
    assert (n["Sockets"], n["CoresPerSocket"], n["ThreadsPerCore"], n["CPUs"]) == ("2", "56", "2", "224")
    assert int(n["RealMemory"]) == int(2048 * 1024 * 0.95)  # 1992294 MiB: 95 % of 2 TiB
    assert n["Gres"] == "gpu:h100-sxm:8"
    gres = _lines(slurm_files(s)["/etc/slurm/gres.conf"], "NodeName")
    assert gres == [{"NodeName": "dgx-[01-04]", "Name": "gpu", "Type": "h100-sxm", "File": "/dev/nvidia[0-7]"}]
    part = _lines(conf, "PartitionName")
    assert part == [{"PartitionName": "gpu", "Nodes": "dgx-[01-04]", "Default": "YES", "OverSubscribe": "EXCLUSIVE",
                     "State": "UP"}]
    top = _conf(conf)
    assert top["SlurmctldHost"] == "mgmt-01(10.0.0.10)"
    assert top["PropagateResourceLimitsExcept"] == "MEMLOCK"  # InfiniBand: jobs keep the node's memlock
    assert top["AccountingStorageTRES"] == "gres/gpu"


def _variant(example: str, **changes: object) -> str:
    doc = copy.deepcopy(load_blueprint(EXAMPLES / f"{example}.yaml").data)
    for dotted, value in changes.items():
        node = doc
        parts = dotted.split("__")
        for p in parts[:-1]:
            node = node[int(p)] if p.isdigit() else node.setdefault(p, {})
        node[parts[-1]] = value
    return emit(doc)[0]


@pytest.mark.parametrize("os_name, version, cgroup_plugin", [
    ("ubuntu-22.04", "21.08.5", True),
    ("debian-12", "22.05.8", True),
    ("ubuntu-24.04", "23.11.4", True),
])
def test_the_version_is_the_distributions(os_name: str, version: str, cgroup_plugin: bool) -> None:
    bp = parse_blueprint(_variant("onprem-l40s-roce", target__os=os_name), "v.yaml").blueprint
    s = slurm_settings(bp)
    assert s is not None and s.version == version
    files = slurm_files(s)
    assert f"Slurm {version} ({os_name}" in files["/etc/slurm/slurm.conf"]
    assert ("CgroupPlugin=cgroup/v2" in files["/etc/slurm/cgroup.conf"]) is cgroup_plugin
    # topology/block first came in 23.11 (https://slurm.schedmd.com/topology.html): never rendered before
    assert s.has("topology_block") is (version >= "23.11")


def test_configless_nodes_get_no_files_but_the_conf_server() -> None:
    from blueprints.settings import node_settings

    bp = load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml").blueprint
    node = node_settings(bp, "l40s").slurm
    login = node_settings(bp, "login").slurm
    ctl = node_settings(bp, "ctl").slurm
    assert node is not None and login is not None and ctl is not None
    assert node.files == {} and node.conf_server == "ctl-01:6817"
    assert "/etc/slurm/slurm.conf" in login.files and login.conf_server == ""
    assert ctl.dbd_conf is not None and "/etc/slurm/slurmdbd.conf" not in ctl.files
    assert node.gpu_devices == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"]
    assert node.health["gpu_count"] == 4 and node.health["gpu_model"] == "l40s"
    assert node.health["timeout_s"] < 60  # slurmd kills the health check at 60 s


def test_extra_keys_replace_the_owned_value_and_nothing_else() -> None:
    bp = parse_blueprint(_variant("onprem-dgx-h100-ib", orchestrator__extra={
        "ReturnToService": "2", "MaxJobCount": "20000", "PropagateResourceLimits": "NOFILE"}), "v.yaml").blueprint
    s = slurm_settings(bp)
    assert s is not None
    conf = slurm_files(s)["/etc/slurm/slurm.conf"]
    top = _conf(conf)
    assert top["ReturnToService"] == "2" and top["MaxJobCount"] == "20000"
    assert conf.count("ReturnToService=") == 1
    assert "PropagateResourceLimitsExcept" not in top  # the two options are alternatives


@pytest.mark.parametrize("names, expected", [
    (["gpu-01", "gpu-02", "gpu-03"], "gpu-[01-03]"),
    (["gpu-01", "gpu-02", "gpu-04"], "gpu-[01-02,04]"),
    (["ctl", "n1"], "ctl,n1"),
    (["a9", "a10"], "a10,a9"),  # different widths are different runs
])
def test_hostlists(names: list[str], expected: str) -> None:
    assert compress_hostlist(names) == expected


def test_conf_line_drops_unset_keeps_zero_and_refuses_spaces() -> None:
    assert conf_line({"CPUs": 0, "NodeName": "n1", "Weight": None, "Feature": []}) == "NodeName=n1 CPUs=0"
    with pytest.raises(ValueError):
        conf_line({"NodeName": "n1 Gres=gpu:99"})


def test_block_topology_names_each_groups_nodes_on_a_slurm_that_has_it() -> None:
    bp = parse_blueprint(_variant("onprem-l40s-roce", orchestrator__topology="block"), "v.yaml").blueprint
    s = slurm_settings(bp)  # Ubuntu 24.04: Slurm 23.11.4, the first with topology/block
    assert s is not None and s.has("topology_block")
    files = slurm_files(s)
    assert _conf(files["/etc/slurm/slurm.conf"])["TopologyPlugin"] == "topology/block"
    assert _lines(files["/etc/slurm/topology.conf"], "BlockName") == [{"BlockName": "nvl-l40s", "Nodes": "l40s-[01-02]"}]
