"""Field failures people hit, as kinds: the handed inputs in ``tests/fixtures/field`` and generated
members of each kind (every NCCL fast-path variable of the catalog table, every way to leave a NIC
out of ``NCCL_IB_HCA``, every GID index, every GPU architecture against driver branches, every
runtime release's driver list, NVSwitch plans on every SXM baseboard), each with trip and no-trip
variants. Blueprints are built as data, written as YAML with positions (``rule_cases.emit``) and run
through the loader and every rule, like a user's ``clusterforge check``.
"""

from __future__ import annotations

import copy
import itertools
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from blueprints import catalog, check, load_blueprint, parse_blueprint
from blueprints.settings import cluster_settings, node_settings
from clusterforge.cli import main

from .rule_cases.emit import emit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "blueprints" / "examples"
CAT = catalog()


def _doc(example: str) -> dict[str, Any]:
    return copy.deepcopy(load_blueprint(EXAMPLES / f"{example}.yaml").data)


def _findings(doc: dict[str, Any]) -> list[Any]:
    text, _ = emit(doc)
    findings = check(parse_blueprint(text, "variant.yaml"))
    assert not [f for f in findings if f.rule_id == "internal-rule-error"], findings
    return findings


def _ids(doc: dict[str, Any]) -> set[str]:
    return {f.rule_id for f in _findings(doc)}


def _onprem(gpu: str, nics: int = 4, fabric: str = "infiniband", **group: Any) -> dict[str, Any]:
    """A two-host on-prem GPU group with ``nics`` declared ports on ``fabric``."""
    link = "infiniband" if fabric == "infiniband" else "ethernet"
    prefix = "ibp" if link == "infiniband" else "ens"
    g = {"name": "gpu", "role": "compute",
         "hosts": [{"name": "n1", "address": "10.9.0.11"}, {"name": "n2", "address": "10.9.0.12"}],
         "hardware": {"gpu": gpu, "cpu_vendor": "intel",
                      "nics": [{"device": f"mlx5_{k}", "netdev": f"{prefix}{k + 10}s0", "speed_gbps": 400,
                                "numa_node": k * 2 // max(nics, 1), "link_layer": link} for k in range(nics)]}}
    g.update(group)
    net: dict[str, Any] = {"fabric": fabric}
    if fabric == "infiniband":
        net["infiniband"] = {"generation": "NDR", "subnet_manager": {"kind": "ufm"}}
    elif fabric == "roce":
        net["roce"] = {"flow_control": "pfc"}
    return {"apiVersion": "clusterforge/v1", "kind": "Blueprint", "name": "variant",
            "target": {"provider": "onprem", "os": "ubuntu-24.04"}, "node_groups": [g], "network": net,
            "software": {"kernel_updates": "hold"}, "validation": {"suites": ["nccl"]}}


# --- the handed field inputs ------------------------------------------------------------------------

FIELD = {
    "01-kata-hgx-nvswitch.yaml": ("nvswitch-passthrough-plan", 1),
    "04-nccl-env-p2p-nvls-off.yaml": ("nccl-env-disables-fabric", 1),
    "09-ib-hca-one-of-four.yaml": ("nccl-env-disables-fabric", 1),
}


@pytest.mark.parametrize("name", sorted(FIELD))
def test_field_inputs_give_the_finding(name: str, fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rule_id, rc = FIELD[name]
    assert main(["check", str(fixtures_dir / "field" / name)]) == rc
    assert f": {rule_id}: " in capsys.readouterr().out


def test_field_04_names_both_switched_off_paths(fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["check", str(fixtures_dir / "field" / "04-nccl-env-p2p-nvls-off.yaml")])
    err = capsys.readouterr().out  # findings go to stdout, like other linters
    assert "NCCL_P2P_DISABLE=1` switches off GPU peer-to-peer" in err
    assert "NCCL_NVLS_ENABLE=0` switches off NVLink SHARP" in err and "p5.48xlarge" in err


def test_field_09_names_the_left_out_rails(fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["check", str(fixtures_dir / "field" / "09-ib-hca-one-of-four.yaml")])
    err = capsys.readouterr().out  # findings go to stdout, like other linters
    assert "leaves out 3 of the 4 NICs" in err and "mlx5_1:1, mlx5_2:1, mlx5_3:1" in err
    assert "`=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1`" in err  # the generated value it replaces


def test_field_07_lnet_uses_the_declared_netdevs(fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loaded = load_blueprint(fixtures_dir / "field" / "07-lustre-tcp-lnet-ifname.yaml")
    # the LNet interfaces are fine; what the field input still lacks is the client's package source, and its ECN
    # needs DOCA-OFED (roce-ecn-needs-ofed: the per-priority ECN switches come with it)
    assert {f.rule_id for f in check(loaded) if f.severity == "error"} == {"lustre-client-source", "roce-ecn-needs-ofed"}
    [m] = node_settings(loaded.blueprint, "l40s").lustre
    assert m.lnet_networks == "tcp0(ens1f0np0,ens2f0np0)" and m.lnet_route_to is None


def test_field_03_b200_driver_is_in_range(fixtures_dir: Path) -> None:
    """HGX B200 pinned to R570: the branch is inside Blackwell's range, and the default release of the
    branch is new enough for B200 (570.133.20 or later)."""
    loaded = load_blueprint(fixtures_dir / "field" / "03-hgx-b200-nvlsm.yaml")
    ids = {f.rule_id for f in check(loaded)}
    assert "driver-branch-gpu" not in ids
    assert node_settings(loaded.blueprint, "b200").driver_version == CAT.driver_release("570")


# --- NCCL variables that switch off or narrow declared hardware --------------------------------------

def _satisfying(needs: str) -> dict[str, Any] | None:
    """A blueprint that declares what ``needs`` asks for (on-prem), or ``None`` for EFA-only needs."""
    if needs in ("efa", "efa-rdma-read"):
        doc = _doc("aws-p5-efa-lustre")  # p5: EFA with RDMA read, GPUDirect RDMA on by default
        doc.pop("storage", None)
        return doc
    if needs == "mnnvl":
        return _onprem("gb200:4", 4)
    if needs == "roce":
        return _onprem("l40s:4", 2, fabric="roce")
    if needs == "rdma-not-rail":
        doc = _onprem("h100-sxm:8", 8)
        doc["network"]["infiniband"]["rail_optimized"] = False
        return doc
    doc = _onprem("h100-sxm:8", 8)
    if needs == "dmabuf":
        doc["network"]["gpudirect_rdma"] = {"enabled": True, "method": "dmabuf"}
    return doc


def _not_satisfying(needs: str) -> dict[str, Any]:
    """The nearest blueprint that lacks what ``needs`` asks for."""
    if needs in ("multi-gpu", "nvlink"):
        return _onprem("l40s:1", 1)
    if needs == "nvls":
        return _onprem("a100-80gb-sxm:8", 8)  # NVSwitch, but NVLink 3: no NVLink SHARP
    if needs in ("rdma", "net", "gdr", "dmabuf"):
        doc = _onprem("h100-sxm:8", 0, fabric="ethernet")
        if needs == "dmabuf":
            doc = _onprem("h100-sxm:8", 8)
            doc["network"]["gpudirect_rdma"] = {"enabled": True, "method": "nvidia-peermem"}
        return doc
    if needs in ("efa", "roce"):
        return _onprem("h100-sxm:8", 8)  # InfiniBand
    if needs == "efa-rdma-read":
        doc = _doc("aws-p5-efa-lustre")
        doc.pop("storage", None)
        doc["network"]["gpudirect_rdma"] = {"enabled": False}  # the EFA device's RDMA is off by choice
        return doc
    if needs == "mnnvl":
        return _onprem("b200:8", 8)  # NVSwitch inside the node only
    if needs == "rdma-not-rail":
        return _onprem("h100-sxm:8", 8)  # rail-optimized (the default)
    raise AssertionError(needs)


TABLE = [(row["name"], str(v), row["effect"], row["needs"]) for row in CAT.nccl_env_fast_paths for v in row["values"]]


@pytest.mark.parametrize("name,value,effect,needs", TABLE, ids=[f"{n}={v}" for n, v, _, _ in TABLE])
def test_every_fast_path_variable_trips_where_declared(name: str, value: str, effect: str, needs: str) -> None:
    rule_id = "nccl-env-disables-fabric" if effect == "disables" else "nccl-env-narrows-fabric"
    for spelled in {value if value != "*" else "Ring", value.lower() if value != "*" else "^NVLS"}:
        doc = _satisfying(needs)
        doc["network"].setdefault("nccl", {})["env"] = {name: spelled}
        hits = [f for f in _findings(doc) if f.rule_id == rule_id]
        assert hits and name in hits[0].message and "node group" in hits[0].message, (name, spelled, needs)
        assert hits[0].fix == f"remove `{name}` from `network.nccl.env`"


@pytest.mark.parametrize("name,value,effect,needs", TABLE, ids=[f"{n}={v}" for n, v, _, _ in TABLE])
def test_fast_path_variable_is_silent_without_the_hardware(name: str, value: str, effect: str, needs: str) -> None:
    rule_id = "nccl-env-disables-fabric" if effect == "disables" else "nccl-env-narrows-fabric"
    doc = _not_satisfying(needs)
    doc["network"].setdefault("nccl", {})["env"] = {name: value if value != "*" else "Ring"}
    assert rule_id not in _ids(doc), (name, needs)


def test_harmless_values_of_table_variables_are_silent() -> None:
    doc = _onprem("h100-sxm:8", 8)
    doc["network"]["nccl"] = {"env": {"NCCL_P2P_DISABLE": "0", "NCCL_NVLS_ENABLE": "1", "NCCL_NET_GDR_LEVEL": "PHB",
                                      "NCCL_IB_DISABLE": "0", "NCCL_P2P_LEVEL": "NVL", "NCCL_MAX_NCHANNELS": "32"}}
    assert not {"nccl-env-disables-fabric", "nccl-env-narrows-fabric"} & _ids(doc)


def test_rows_reading_values_elsewhere_and_harmless_exceptions() -> None:
    """The EFA device-RDMA switch is read from the EFA software entry clusterforge writes it from, and a
    row matching any value keeps its harmless values (``FI_PROVIDER=efa``) silent."""
    rows = {r["name"]: r for r in CAT.nccl_env_fast_paths}
    off = CAT.aws["efa_software"]["disable_device_rdma"]["FI_EFA_USE_DEVICE_RDMA"]
    assert rows["FI_EFA_USE_DEVICE_RDMA"]["values"] == [str(off)]
    assert all(r["source"].startswith("https://") for r in rows.values())
    for value, trips in [("efa", False), ("EFA", False), ("tcp", True), ("sockets", True)]:
        doc = _satisfying("efa")
        doc["network"]["nccl"] = {"env": {"FI_PROVIDER": value}}
        assert ("nccl-env-disables-fabric" in _ids(doc)) == trips, value
    doc = _satisfying("efa-rdma-read")
    doc["network"]["nccl"] = {"env": {"FI_EFA_USE_DEVICE_RDMA": "1"}}
    assert "nccl-env-disables-fabric" not in _ids(doc)


def _hca_values(devices: list[str]) -> tuple[list[str], list[str]]:
    """(values that leave a declared NIC out, values that select all of them) in NCCL's syntaxes."""
    leave, keep = [], ["mlx5", "=" + ",".join(devices), "^mlx5_9", "mlx5_", "=" + ",".join(f"{d}:1" for d in devices)]
    for r in range(1, len(devices)):
        for subset in itertools.combinations(devices, r):
            leave.append(",".join(subset))
            leave.append("=" + ",".join(f"{d}:1" for d in subset))
    leave += [f"^{d}" for d in devices] + ["=" + ",".join(devices[:-1]), f"{devices[0]}:2"]
    return leave, keep


@pytest.mark.parametrize("nics", [2, 4])
@pytest.mark.parametrize("fabric", ["infiniband", "roce"])
def test_ib_hca_leaving_out_declared_rails(nics: int, fabric: str) -> None:
    devices = [f"mlx5_{k}" for k in range(nics)]
    leave, keep = _hca_values(devices)
    for value in leave:
        doc = _onprem("a100-80gb-sxm:8", nics, fabric=fabric)
        doc["network"]["nccl"] = {"env": {"NCCL_IB_HCA": value}}
        hits = [f for f in _findings(doc) if f.rule_id == "nccl-env-disables-fabric"]
        assert len(hits) == 1 and "leaves out" in hits[0].message, value
        assert "the generated value is `=" in hits[0].message
    for value in keep:
        doc = _onprem("a100-80gb-sxm:8", nics, fabric=fabric)
        doc["network"]["nccl"] = {"env": {"NCCL_IB_HCA": value}}
        ids = _ids(doc)
        assert "nccl-env-disables-fabric" not in ids, value


def _socket(doc: dict[str, Any], where: str, value: str) -> dict[str, Any]:
    doc["network"]["nccl"] = {"env": {"NCCL_SOCKET_IFNAME": value}} if where == "env" else {"socket_ifname": value}
    return doc


def _socket_hits(doc: dict[str, Any], rule_id: str = "nccl-env-disables-fabric") -> list[Any]:
    return [f for f in _findings(doc) if f.rule_id == rule_id]


# on an RDMA fabric the socket interface only carries NCCL's bootstrap: a management NIC is right,
# an InfiniBand port is right only where it gets an IPoIB address (the first port, with a `cidr`)
BOOTSTRAP_OK = ["eno1", "=eno1", "eth0", "bond0", "^docker,lo", "^ibp", "^=ibp10s0", "eno1,ibp", "=eno1,ibp11s0"]
NO_ADDRESS = ["=ibp10s0", "ibp", "ibp1", "=ibp11s0,ibp12s0", "ibp12", "=ibp13s0"]


@pytest.mark.parametrize("where", ["env", "field"])
@pytest.mark.parametrize("value", BOOTSTRAP_OK)
def test_management_socket_interface_on_rdma_fabrics_is_fine(where: str, value: str) -> None:
    for doc in (_onprem("h100-sxm:8", 4), _onprem("b200:8", 8), _onprem("l40s:4", 2, fabric="roce")):
        assert not _socket_hits(_socket(doc, where, value)), value
    efa = _doc("aws-p5-efa-lustre")
    efa.pop("storage", None)
    assert not _socket_hits(_socket(efa, where, value)), value


@pytest.mark.parametrize("where", ["env", "field"])
@pytest.mark.parametrize("value", NO_ADDRESS)
def test_socket_interface_on_an_infiniband_port_without_ipoib_address(where: str, value: str) -> None:
    doc = _socket(_onprem("h100-sxm:8", 4), where, value)
    hits = _socket_hits(doc)
    assert len(hits) == 1 and "no IPoIB address" in hits[0].message and "bootstrap" in hits[0].message, value
    assert "`network.infiniband.ipoib.cidr` is unset" in hits[0].message and "=eno1" in hits[0].fix
    # on an RDMA fabric the socket interface carries no data: it disables the bootstrap, it never narrows the fabric
    assert not _socket_hits(doc, "nccl-env-narrows-fabric"), value
    # with an IPoIB subnet the first InfiniBand port (ibp10s0) gets the address: naming it is fine
    doc["network"]["infiniband"]["ipoib"] = {"enabled": True, "cidr": "192.168.100.0/24"}
    hits = _socket_hits(doc)
    if "ibp10s0" in value or value in ("ibp", "ibp1"):
        assert not hits, value
    else:
        assert len(hits) == 1 and "only `ibp10s0` gets the IPoIB address" in hits[0].message, value
        assert "`=ibp10s0`" in hits[0].fix
    doc["network"]["infiniband"]["ipoib"] = {"enabled": False}
    assert _socket_hits(doc), value


@pytest.mark.parametrize("where", ["env", "field"])
def test_socket_interface_on_ethernet_must_carry_the_declared_nics(where: str) -> None:
    """On plain Ethernet the socket transport carries the data: every declared data NIC belongs in it."""
    for value, disables, narrows in [
        ("ens", False, False), ("=ens10s0,ens11s0", False, False), ("^docker,lo", False, False), ("ens1", False, False),
        ("eno1", True, False), ("=eth0", True, False), ("^ens", True, False),
        ("=ens10s0", False, True), ("^=ens11s0", False, True), ("ens11", False, True),
    ]:
        doc = _socket(_onprem("l40s:4", 2, fabric="ethernet"), where, value)
        d = _socket_hits(doc)
        n = _socket_hits(doc, "nccl-env-narrows-fabric")
        assert bool(d) == disables and bool(n) == narrows, value
        if d:
            assert "ens10s0, ens11s0" in d[0].message and d[0].fix.startswith("name the declared data NICs")
        if n:
            assert "leaves out 1 of the 2 Ethernet NICs" in n[0].message


@pytest.mark.parametrize("name,user,trips", [
    ("NCCL_IB_TC", "96", True), ("NCCL_IB_TC", "104", False), ("NCCL_IB_GID_INDEX", "3", True),
    ("NCCL_NET_GDR_LEVEL", "SYS", False), ("NCCL_IB_TIMEOUT", "22", False),
])
def test_user_values_replacing_generated_ones_show_both(name: str, user: str, trips: bool) -> None:
    doc = _onprem("l40s:4", 2, fabric="roce")
    doc["network"]["nccl"] = {"env": {name: user}}
    hits = [f for f in _findings(doc) if f.rule_id == "nccl-env-overrides-generated"]
    assert bool(hits) == trips
    if trips and name == "NCCL_IB_TC":
        assert "`NCCL_IB_TC=104`" in hits[0].message and "=96" in hits[0].message
    if trips and name == "NCCL_IB_GID_INDEX":
        assert "discovers" in hits[0].message and hits[0].fix.endswith("`network.roce.gid_index: 3`")


def test_generated_hca_replaced_by_a_covering_value_is_a_warning() -> None:
    doc = _onprem("h100-sxm:8", 4)
    doc["network"]["nccl"] = {"env": {"NCCL_IB_HCA": "mlx5"}}
    hits = [f for f in _findings(doc) if f.rule_id == "nccl-env-overrides-generated"]
    assert hits and "NCCL_IB_HCA=mlx5` replaces `NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" in hits[0].message


# --- interface names from declared netdevs or discovery ----------------------------------------------

def _rendered_text(doc: dict[str, Any], tmp_path: Path) -> str:
    from clusterforge.ansible.render import render_ansible

    text, _ = emit(doc)
    render_ansible(parse_blueprint(text, "variant.yaml"), tmp_path)
    return "\n".join(p.read_text() for p in sorted(tmp_path.rglob("*.yml")))


@pytest.mark.parametrize("example", ["onprem-dgx-h100-ib", "onprem-l40s-roce", "onprem-sandbox-kata", "local-workstation"])
def test_rendered_configuration_names_no_guessed_interface(example: str, tmp_path: Path) -> None:
    text = _rendered_text(_doc(example), tmp_path)
    for guess in ("(eth0)", "(ib0)", "eth0,", "ib0,"):
        assert guess not in text, guess


@pytest.mark.parametrize("nid,fabric,nics,want", [
    ("10.1.0.5@tcp", "roce", 2, "tcp0(ens10s0,ens11s0)"),
    ("10.1.0.5@tcp", "ethernet", 0, "tcp0"),
    ("192.168.1.5@o2ib", "infiniband", 1, "o2ib0(ibp10s0)"),
    ("10.1.0.5@o2ib", "roce", 2, "o2ib0(ens10s0,ens11s0)"),
])
def test_lnet_interfaces_come_from_declared_netdevs_or_the_route(nid: str, fabric: str, nics: int, want: str) -> None:
    doc = _onprem("l40s:4", nics, fabric=fabric)
    if fabric == "infiniband":
        doc["network"]["infiniband"]["ipoib"] = {"cidr": "192.168.1.0/24"}
    doc["storage"] = [{"kind": "lustre", "name": "lfs", "mount": "/lfs", "server": {"mgs_nids": [nid], "fsname": "lfs"}}]
    text, _ = emit(doc)
    [m] = node_settings(parse_blueprint(text, "v.yaml").blueprint, "gpu").lustre
    assert m.lnet_networks == want
    assert m.lnet_route_to == (nid.split("@")[0] if "(" not in want else None)


@pytest.mark.parametrize("case", ["no-port", "port-without-netdev", "no-cidr"])
def test_o2ib_mount_without_an_ipoib_address_names_the_field(case: str) -> None:
    doc = _onprem("h100-sxm:8", 2)
    doc["network"]["infiniband"]["ipoib"] = {"cidr": "192.168.1.0/24"}
    doc["storage"] = [{"kind": "lustre", "name": "lfs", "mount": "/lfs",
                       "server": {"mgs_nids": ["192.168.1.5@o2ib"], "fsname": "lfs"}}]
    assert "netdev-required" not in _ids(doc)
    if case == "no-port":
        doc["node_groups"][0]["hardware"]["nics"] = []
        want = "node_groups.0.hardware.nics"
    elif case == "port-without-netdev":
        for n in doc["node_groups"][0]["hardware"]["nics"]:
            del n["netdev"]
        want = "node_groups.0.hardware.nics"
    else:
        del doc["network"]["infiniband"]["ipoib"]
        want = "network.infiniband.ipoib.cidr"
    hits = [f for f in _findings(doc) if f.rule_id == "netdev-required"]
    assert hits and want in hits[0].message + hits[0].fix


def test_roce_gid_discovery_script_finds_the_v2_ipv4_entry(tmp_path: Path) -> None:
    """The lookup the rdma role runs on each node, against a GID table laid out like the kernel's."""
    script = ROOT / "roles" / "rdma" / "files" / "roce-gid-index"
    port = tmp_path / "class/infiniband/mlx5_0/ports/1"
    table = [("fe80:0000:0000:0000:0a88:c2ff:fe3b:506a", "IB/RoCE v1", "ens1f0np0"),
             ("fe80:0000:0000:0000:0a88:c2ff:fe3b:506a", "RoCE v2", "ens1f0np0"),
             ("0000:0000:0000:0000:0000:ffff:0ac8:010a", "IB/RoCE v1", "ens1f0np0"),
             ("0000:0000:0000:0000:0000:ffff:0ac8:010a", "RoCE v2", "ens1f0np0"),
             ("0000:0000:0000:0000:0000:ffff:0ac9:010a", "IB/RoCE v1", "ens1f0np0.100"),
             ("0000:0000:0000:0000:0000:ffff:0ac9:010a", "RoCE v2", "ens1f0np0.100")]
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True)
    for i, (gid, typ, ndev) in enumerate(table):
        (port / "gids" / str(i)).write_text(gid + "\n")
        (port / "gid_attrs/types" / str(i)).write_text(typ + "\n")
        (port / "gid_attrs/ndevs" / str(i)).write_text(ndev + "\n")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", str(script), *args], capture_output=True, text=True,
                              env={**os.environ, "SYSFS": str(tmp_path)}, check=False)

    assert run("mlx5_0", "1").stdout.strip() == "3"
    assert run("mlx5_0", "1", "ens1f0np0.100").stdout.strip() == "5"  # a VLAN interface shifts the table
    r = run("mlx5_1", "1")
    assert r.returncode == 1 and "no GID table" in r.stderr
    (port / "gid_attrs/types/3").write_text("IB/RoCE v1\n")
    (port / "gid_attrs/types/5").write_text("IB/RoCE v1\n")
    r = run("mlx5_0", "1")
    assert r.returncode == 1 and "no RoCE v2 IPv4 GID" in r.stderr


def test_gid_discovery_is_the_default_and_reaches_the_role(tmp_path: Path) -> None:
    doc = _onprem("l40s:4", 2, fabric="roce")
    text, _ = emit(doc)
    s = node_settings(parse_blueprint(text, "v.yaml").blueprint, "gpu")
    assert s.roce is not None and s.roce.gid_index == "discover" and "NCCL_IB_GID_INDEX" not in s.nccl_env
    assert "rdma_roce_gid_index: !unsafe discover" in _rendered_text(doc, tmp_path)
    doc["network"]["roce"]["gid_index"] = 3
    text, _ = emit(doc)
    assert node_settings(parse_blueprint(text, "v.yaml").blueprint, "gpu").nccl_env["NCCL_IB_GID_INDEX"] == "3"


# --- fixed RoCE GID indices --------------------------------------------------------------------------

@pytest.mark.parametrize("index", range(8))
@pytest.mark.parametrize("where", ["field", "env"])
def test_gid_indices_on_v1_or_link_local_entries_trip(index: int, where: str) -> None:
    doc = _onprem("l40s:4", 2, fabric="roce")
    if where == "field":
        doc["network"]["roce"]["gid_index"] = index
    else:
        doc["network"]["nccl"] = {"env": {"NCCL_IB_GID_INDEX": str(index)}}
    unsafe = index in (0, 1) or index % 2 == 0
    assert ("roce-gid-index" in _ids(doc)) == unsafe


# --- driver branch against the GPU generation --------------------------------------------------------

BRANCHES = ["418", "450", "470", "520", "525", "535", "550", "570", "580", "590", "595"]
NVIDIA_GPUS = [k for k in CAT.gpu_keys if CAT.gpu(k).vendor == "nvidia"]


@pytest.mark.parametrize("gpu", NVIDIA_GPUS)
def test_driver_branch_against_every_architecture(gpu: str) -> None:
    spec = CAT.gpu(gpu)
    rng = CAT.driver_range(spec)
    assert rng is not None and rng.source.startswith("https://"), gpu
    for branch in BRANCHES:
        doc = _onprem(f"{gpu}:1", 0, fabric="ethernet")
        doc["node_groups"][0]["hardware"].pop("nics")
        doc["software"].update({"driver_branch": branch, "cuda": "11.0"})
        outside = int(branch) < rng.min_branch or (rng.max_branch is not None and int(branch) > rng.max_branch)
        hits = [f for f in _findings(doc) if f.rule_id == "driver-branch-gpu"]
        assert bool(hits) == outside, (gpu, branch)
        if outside:
            assert f"R{rng.min_branch}" in hits[0].message and rng.architecture in hits[0].message


def test_architectures_with_a_last_branch_name_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """A generation dropped from newer branches (Volta ends at R580): a Volta part added to the catalog
    trips above R580 and below its first branch, with the range in the message."""
    from blueprints.catalog import Catalog

    data = copy.deepcopy(CAT.data)
    data["gpus"]["v100-sxm"] = {**data["gpus"]["a100-40gb-sxm"], "architecture": "volta"}
    cat = Catalog(data, CAT.extras)
    monkeypatch.setattr("blueprints.rules.registry.catalog", lambda: cat)
    rng = cat.driver_range(cat.gpu("v100-sxm"))
    assert rng is not None and (rng.min_branch, rng.max_branch) == (384, 580)
    for branch in BRANCHES:
        doc = _onprem("v100-sxm:8", 0, fabric="ethernet")
        doc["node_groups"][0]["hardware"].pop("nics")
        doc["software"].update({"driver_branch": branch, "cuda": "11.0"})
        hits = [f for f in _findings(doc) if f.rule_id == "driver-branch-gpu"]
        assert bool(hits) == (int(branch) > 580), branch
        if hits:
            assert "R384-R580" in hits[0].message and hits[0].fix == "set `software.driver_branch` within R384-R580"


@pytest.mark.parametrize("release,trips", [("570.86.15", True), ("570.124.06", True), ("570.133.20", False),
                                           ("570.195.03", False)])
def test_part_minimum_release(release: str, trips: bool) -> None:
    doc = _onprem("b200:8", 8)
    doc["software"].update({"driver_branch": "570", "driver_version": release, "cuda": "12.8"})
    hits = [f for f in _findings(doc) if f.rule_id == "driver-branch-gpu"]
    assert bool(hits) == trips
    if trips:
        assert hits[0].fix == "set `software.driver_version` to 570.133.20 or newer"


def test_every_catalogued_branch_has_a_default_release_among_its_releases() -> None:
    for branch, row in CAT.extras["driver_releases"]["branches"].items():
        assert row["default"] in CAT.driver_releases(branch), branch
        assert all(r.split(".")[0] == branch for r in row["releases"])


@pytest.mark.parametrize("branch", ["600", "615", "710"])
def test_a_branch_without_a_catalogued_release_needs_an_exact_version_on_gpu_hosts(branch: str) -> None:
    """Driver, Fabric Manager and NSCQ are installed at one exact version: a branch the catalog knows
    no release of cannot be pinned until the blueprint names the release."""
    doc = _onprem("h100-sxm:8", 2, fabric="infiniband")
    doc["software"]["driver_branch"] = branch
    assert "driver-version-branch" in _ids(doc)
    doc["software"]["driver_version"] = f"{branch}.12.01"
    assert "driver-version-branch" not in _ids(doc)


# --- NCCL release against the GPUDirect method -------------------------------------------------------

@pytest.mark.parametrize("method,open_modules,nccl,trips", [
    # unset method: DMA-BUF with the open kernel modules, nvidia-peermem with the proprietary ones
    (None, True, "2.12.12", True), (None, True, "2.13.4", False), (None, True, "2.22.3", False),
    (None, False, "2.18.3", True), (None, False, "2.22.3", True), (None, False, "2.23.4", False),
    ("nvidia-peermem", True, "2.21.5", True), ("nvidia-peermem", True, "2.27.7", False),
    ("dmabuf", True, "2.12.12", True), ("dmabuf", True, "2.13.4", False), ("dmabuf", True, "2.21.5", False),
])
@pytest.mark.parametrize("fabric", ["infiniband", "roce"])
def test_nccl_release_against_gpudirect_method(method: str | None, open_modules: bool, nccl: str, trips: bool,
                                               fabric: str) -> None:
    doc = _onprem("h100-sxm:8", 4, fabric=fabric)
    doc["network"]["gpudirect_rdma"] = {"enabled": True, **({"method": method} if method else {})}
    doc["software"]["nccl"] = nccl
    doc["software"]["driver_open_kernel_modules"] = open_modules
    assert ("nccl-gpudirect-method" in _ids(doc)) == trips
    doc["network"]["gpudirect_rdma"]["enabled"] = False
    assert "nccl-gpudirect-method" not in _ids(doc)


# --- exact driver versions of sandbox runtimes -------------------------------------------------------

def _sandboxed(runtime: str, release: str, **software: Any) -> dict[str, Any]:
    doc = _onprem("h100-sxm:8", 0, fabric="ethernet",
                  sandbox={"runtime": runtime, **({"nvswitch": "full-passthrough"} if runtime == "kata" else {})})
    doc["node_groups"][0]["hardware"].pop("nics")
    doc["software"].update({runtime: release, **software})
    return doc


RELEASES = [(r.runtime, r) for rt in ("gvisor", "kata") for r in CAT.runtime_releases(rt)]


@pytest.mark.parametrize("runtime,rel", RELEASES, ids=[f"{rt}-{r.release}" for rt, r in RELEASES])
def test_every_listed_driver_passes_and_unlisted_ones_trip(runtime: str, rel: Any) -> None:
    assert rel.source.startswith("https://") and rel.drivers
    for driver in rel.drivers:
        doc = _sandboxed(runtime, rel.release, driver_branch=driver.split(".")[0], driver_version=driver)
        assert "sandbox-driver-allow-list" not in _ids(doc), driver
    for branch in sorted({d.split(".")[0] for d in rel.drivers}):
        unlisted = [r for r in CAT.driver_releases(branch) if r not in rel.drivers]
        for driver in unlisted:
            doc = _sandboxed(runtime, rel.release, driver_branch=branch, driver_version=driver)
            hits = [f for f in _findings(doc) if f.rule_id == "sandbox-driver-allow-list"]
            assert hits and driver in hits[0].message, driver
            assert any(d in hits[0].fix for d in rel.drivers)


@pytest.mark.parametrize("runtime,release", [("gvisor", "latest"), ("gvisor", "20250512.0"), ("kata", "3.32.0")])
def test_floating_driver_trips(runtime: str, release: str) -> None:
    doc = _sandboxed(runtime, release, driver_branch="545")  # no catalogued release: the driver floats
    hits = [f for f in _findings(doc) if f.rule_id == "sandbox-driver-allow-list"]
    assert hits and "floating" in hits[0].message


@pytest.mark.parametrize("runtime,release", [("gvisor", "20230101.0"), ("kata", "3.24.0"), ("kata", "3.23.0")])
def test_runtime_release_without_a_list_trips(runtime: str, release: str) -> None:
    doc = _sandboxed(runtime, release, driver_branch="595", driver_version="595.58.03")
    hits = [f for f in _findings(doc) if f.rule_id == "sandbox-driver-allow-list"]
    assert hits and "without a known GPU driver list" in hits[0].message


def test_container_groups_have_no_allow_list() -> None:
    doc = _onprem("h100-sxm:8", 8)
    doc["software"].update({"driver_branch": "545"})
    assert "sandbox-driver-allow-list" not in _ids(doc)


# --- NVSwitch fabric plan for passthrough ------------------------------------------------------------

SXM8 = [k for k in NVIDIA_GPUS if CAT.gpu(k).has_nvlink and CAT.gpu(k).nvlink_gen and k != "gb200-per-gpu"]


def _passthrough(gpu: str, runtime: str, plan: Any = None, gpus_per_vm: int | None = None) -> dict[str, Any]:
    sandbox: dict[str, Any] = {"runtime": runtime}
    if plan is not None:
        sandbox["nvswitch"] = plan
    if gpus_per_vm is not None:
        sandbox["vm"] = {"gpus_per_vm": gpus_per_vm}
    doc = _onprem(gpu, 0, fabric="ethernet", sandbox=sandbox)
    doc["node_groups"][0]["hardware"].pop("nics")
    return doc


@pytest.mark.parametrize("gpu", SXM8)
@pytest.mark.parametrize("runtime", ["kata", "vm"])
def test_passthrough_on_nvswitch_needs_a_plan(gpu: str, runtime: str) -> None:
    assert "nvswitch-passthrough-plan" in _ids(_passthrough(f"{gpu}:8", runtime))
    good = _passthrough(f"{gpu}:8", runtime, "full-passthrough", 8 if runtime == "vm" else None)
    assert "nvswitch-passthrough-plan" not in _ids(good)
    for size in (1, 2, 4, 8):
        doc = _passthrough(f"{gpu}:8", runtime, {"mode": "shared-nvswitch", "gpus_per_guest": size},
                           size if runtime == "vm" else None)
        assert "nvswitch-passthrough-plan" not in _ids(doc), size
    for size in (3, 5, 6, 7):
        doc = _passthrough(f"{gpu}:8", runtime, {"mode": "shared-nvswitch", "gpus_per_guest": size})
        assert "nvswitch-passthrough-plan" in _ids(doc), size


def test_no_plan_needed_without_nvswitch() -> None:
    for gpu in ("l40s:4", "h100-pcie:8", "h100-sxm:4"):
        assert "nvswitch-passthrough-plan" not in _ids(_passthrough(gpu, "vm", gpus_per_vm=2)), gpu


def test_full_passthrough_vm_must_take_every_gpu_and_kata_must_pass_nvswitches() -> None:
    hits = [f for f in _findings(_passthrough("h100-sxm:8", "vm", "full-passthrough", 2))
            if f.rule_id == "nvswitch-passthrough-plan"]
    assert hits and "gpus_per_vm: 8" in hits[0].fix
    doc = _passthrough("h100-sxm:8", "kata", "full-passthrough")
    doc["software"]["kata"] = "3.28.0"
    hits = [f for f in _findings(doc) if f.rule_id == "nvswitch-passthrough-plan"]
    assert hits and hits[0].fix == "set `software.kata` to 3.29.0 or newer"


@pytest.mark.parametrize("gpu,switches", [("a100-80gb-sxm", 6), ("h100-sxm", 4), ("h200-sxm", 4), ("b200", 2)])
def test_rendered_settings_follow_the_plan(gpu: str, switches: int, tmp_path: Path) -> None:
    full = _passthrough(f"{gpu}:8", "kata", "full-passthrough")
    text, _ = emit(full)
    s = node_settings(parse_blueprint(text, "v.yaml").blueprint, "gpu")
    assert s.sandbox.nvswitch_passthrough and s.sandbox.pcie_root_ports == 8 + switches
    assert not s.fabric_manager and s.fabric_manager_mode is None  # Fabric Manager runs in the guest
    rendered = _rendered_text(full, tmp_path / "full")
    assert "sandbox_vfio_nvswitches: true" in rendered and f"sandbox_kata_pcie_root_ports: {8 + switches}" in rendered
    shared = _passthrough(f"{gpu}:8", "vm", {"mode": "shared-nvswitch", "gpus_per_guest": 2}, 2)
    text, _ = emit(shared)
    s = node_settings(parse_blueprint(text, "v.yaml").blueprint, "gpu")
    assert s.fabric_manager and s.fabric_manager_mode == "shared-nvswitch" and s.install_gpu_driver
    assert not s.sandbox.nvswitch_passthrough and s.sandbox.gpus_per_guest == 2
    shared_text = _rendered_text(shared, tmp_path / "shared")
    assert "sandbox_vfio_nvswitches: false" in shared_text
    # the host's Fabric Manager runs in Shared NVSwitch mode (FABRIC_MODE=1); bare metal keeps mode 0
    assert s.gpu_packages is not None and s.gpu_packages.fabric_mode == ("FABRIC_MODE", 1)
    assert "nvidia_driver_fabricmanager_settings:\n  FABRIC_MODE: 1\n" in shared_text
    bare = _onprem(f"{gpu}:8", 2, fabric="infiniband")
    text, _ = emit(bare)
    b = node_settings(parse_blueprint(text, "v.yaml").blueprint, bare["node_groups"][0]["name"])
    assert b.fabric_manager_mode == "default" and b.gpu_packages is not None
    assert b.gpu_packages.fabric_mode == ("FABRIC_MODE", 0)


# --- fio expectations that vanish --------------------------------------------------------------------

@pytest.mark.parametrize("nvme,trips", [
    ({"count": 2}, True), ({"count": 2, "model": "no-such-drive"}, True), ({"count": 2, "model": "micron-7450"}, False),
    ({"count": 2, "seq_read_mb_s": 6800, "seq_write_mb_s": 5300}, False), ({"count": 2, "seq_read_mb_s": 6800}, True),
])
def test_nvme_without_a_known_model(nvme: dict[str, Any], trips: bool) -> None:
    doc = _onprem("l40s:4", 2, fabric="roce", local_nvme={"mount": "/scratch"})
    doc["node_groups"][0]["hardware"]["nvme"] = nvme
    doc["validation"]["suites"] = ["fio"]
    assert ("fio-expectation-missing" in _ids(doc)) == trips
    doc["validation"]["suites"] = ["nccl"]
    assert "fio-expectation-missing" not in _ids(doc)


def test_lustre_server_without_throughput(tmp_path: Path) -> None:
    doc = _onprem("l40s:4", 2, fabric="roce")
    doc["storage"] = [{"kind": "lustre", "name": "lfs", "mount": "/lfs",
                       "server": {"mgs_nids": ["10.1.0.5@tcp"], "fsname": "lfs"}}]
    doc["validation"] = {"suites": ["fio"]}
    hits = [f for f in _findings(doc) if f.rule_id == "fio-expectation-missing"]
    assert hits and hits[0].fix == "set `storage.0.server.throughput_mb_s` to the servers' throughput in MB/s"
    doc["validation"]["fio"] = {"targets": ["/scratch-elsewhere"]}
    assert "fio-expectation-missing" not in _ids(doc)  # the mount is not tested
    doc["validation"]["fio"] = {}
    doc["storage"][0]["server"]["throughput_mb_s"] = 20000
    assert "fio-expectation-missing" not in _ids(doc)
    from validate.expectations import context_from_blueprint
    from validate.suites.fio import fio_expectations

    text, _ = emit(doc)
    exp = context_from_blueprint(parse_blueprint(text, "v.yaml").blueprint)
    lustre = [s for s in fio_expectations(exp).storage if s.mount == "/lfs"]
    assert lustre and lustre[0].read_mb_s == 20000 and lustre[0].write_mb_s == 20000


@pytest.mark.parametrize("version", ["3", "4.1", "4.2"])
def test_nfs_export_without_throughput(version: str) -> None:
    doc = _onprem("l40s:4", 2, fabric="roce")
    doc["storage"] = [{"kind": "nfs", "name": "home", "mount": "/home/shared", "server": "10.1.0.5",
                       "export": "/export/home", "version": version}]
    doc["validation"] = {"suites": ["fio"]}
    hits = [f for f in _findings(doc) if f.rule_id == "fio-expectation-missing"]
    assert hits and hits[0].fix == "set `storage.0.throughput_mb_s` to what the NFS server delivers to one client, in MB/s"
    doc["validation"]["fio"] = {"targets": ["/scratch-elsewhere"]}
    assert "fio-expectation-missing" not in _ids(doc)  # the mount is not tested
    doc["validation"] = {"suites": ["nccl"]}
    assert "fio-expectation-missing" not in _ids(doc)  # fio does not run
    doc["validation"] = {"suites": ["fio"]}
    doc["storage"][0]["throughput_mb_s"] = 2500
    assert "fio-expectation-missing" not in _ids(doc)
    from validate.expectations import context_from_blueprint
    from validate.suites.fio import fio_expectations

    text, _ = emit(doc)
    exp = context_from_blueprint(parse_blueprint(text, "v.yaml").blueprint)
    [nfs] = [s for s in fio_expectations(exp).storage if s.mount == "/home/shared"]
    assert nfs.kind == "nfs" and nfs.read_mb_s == 2500 and nfs.write_mb_s == 2500 and "2500 MB/s" in nfs.derivation


# --- kernel drift under out-of-tree modules ----------------------------------------------------------

@pytest.mark.parametrize("variant,trips", [
    ("gpu", True), ("cpu-only", False), ("cpu-lustre", True), ("cpu-doca-ib", True), ("passthrough", False),
    ("shared-nvswitch-vm", True), ("shared-nvswitch-kata", True), ("full-passthrough", False),
])
def test_kernel_drift_where_out_of_tree_modules_run(variant: str, trips: bool) -> None:
    doc = _onprem("h100-sxm:8", 4)
    g = doc["node_groups"][0]
    if variant != "gpu":
        g["hardware"].pop("gpu")
        g["role"] = "login"
    if variant == "cpu-lustre":
        doc["storage"] = [{"kind": "lustre", "name": "lfs", "mount": "/lfs",
                           "server": {"mgs_nids": ["10.1.0.5@tcp"], "fsname": "lfs"}}]
        doc["network"] = {"fabric": "ethernet"}
        g["hardware"]["nics"] = []
    if variant == "cpu-doca-ib":
        doc["software"]["doca_ofed"] = "2.9.1"
    if variant == "passthrough":
        doc = _passthrough("l40s:4", "vm", gpus_per_vm=2)
    if variant.startswith("shared-nvswitch"):
        # the host keeps the NVSwitches: it installs the driver and Fabric Manager (out-of-tree modules)
        runtime = variant.rsplit("-", 1)[1]
        doc = _passthrough("h100-sxm:8", runtime, {"mode": "shared-nvswitch", "gpus_per_guest": 2},
                           2 if runtime == "vm" else None)
    if variant == "full-passthrough":
        doc = _passthrough("h100-sxm:8", "vm", "full-passthrough", 8)  # the driver runs in the guest
    text, _ = emit(doc)
    installs = any(s.install_gpu_driver for s in cluster_settings(parse_blueprint(text, "v.yaml").blueprint).values())
    assert installs == (variant in ("gpu", "shared-nvswitch-vm", "shared-nvswitch-kata"))
    del doc["software"]["kernel_updates"]
    assert ("kernel-drift" in _ids(doc)) == trips
    for choice in ("hold", "dkms-verify"):
        doc["software"]["kernel_updates"] = choice
        assert "kernel-drift" not in _ids(doc)
        text, _ = emit(doc)
        assert all(s.kernel_updates == choice for s in cluster_settings(parse_blueprint(text, "v.yaml").blueprint).values())


def test_kernel_drift_not_on_aws() -> None:
    assert "kernel-drift" not in _ids(_doc("aws-p5-efa-lustre"))


# --- NVLSM (NVLink 5): pinned to a catalogued release of the driver branch, or the blueprint is stopped ---

@pytest.mark.parametrize("gpu,nvlink5", [("b200:8", True), ("h100-sxm:8", False)])
@pytest.mark.parametrize("branch", sorted(CAT.extras["driver_releases"]["branches"], key=int))
def test_nvlsm_needs_a_catalogued_release_for_the_branch(gpu: str, nvlink5: bool, branch: str) -> None:
    doc = _onprem(gpu, 4)
    doc["software"] = {"driver_branch": branch, "cuda": "12.4"}
    known = CAT.bare_metal["nvidia_driver"]["nvswitch"]["nvlsm_versions"]
    hits = [f for f in _findings(doc) if f.rule_id == "nvlsm-release"]
    assert bool(hits) == (nvlink5 and branch not in known), [f.message for f in hits]
    if hits:
        assert hits[0].severity == "error" and f"branch {branch}" in hits[0].message
