"""Real converges: every on-prem example blueprint is rendered and run with ``run_site`` against Debian 12
root filesystems (one per node group) through the chroot connection; a second run must change nothing;
the files and packages inside the root filesystems are checked against the blueprint.

Steps that need vendor repositories (NVIDIA driver and container toolkit, DOCA-OFED, Lustre client,
Kata) are exercised in check mode (:func:`test_vendor_install_steps_run_in_check_mode`), which writes
the list of those steps and their check-mode result to ``<out>/check-mode-steps.txt``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from blueprints import load_blueprint
from blueprints.models import InfinibandNetwork, RoceNetwork
from blueprints.settings import node_settings
from clusterforge.ansible.render import inventory_data, roles_for
from tests.conftest import EXAMPLES

from .conftest import CHECK_MODE_EXAMPLES

ON_PREM = ["onprem-dgx-h100-ib", "onprem-l40s-roce", "onprem-sandbox-kata", "local-workstation"]


def _params(names: list[str]) -> list:
    return [pytest.param(n, id=n, marks=pytest.mark.xdist_group(f"rootfs-{n}")) for n in names]


pytestmark = pytest.mark.slow


def _bp(example: str):
    return load_blueprint(EXAMPLES / f"{example}.yaml").blueprint


def _groups(c, example):
    """(node group name, settings, roles, root filesystem) for each converged group."""
    bp = _bp(example)
    for gname in c.groups:
        s = node_settings(bp, gname)
        yield gname, s, roles_for(bp, s), c.root(gname)


def _fstab(root: Path) -> dict[str, tuple[str, str, str]]:
    out = {}
    for line in (root / "etc/fstab").read_text().splitlines():
        f = line.split()
        if len(f) >= 4 and not f[0].startswith("#"):
            out[f[1]] = (f[0], f[2], f[3])
    return out


def _installed(root: Path) -> set[str]:
    pkgs, name = set(), None
    for line in (root / "var/lib/dpkg/status").read_text().splitlines():
        if line.startswith("Package: "):
            name = line.split(": ", 1)[1]
        elif line.startswith("Status: ") and line.endswith("install ok installed") and name:
            pkgs.add(name)
    return pkgs


def _enabled(root: Path, unit: str) -> bool:
    return (root / "etc/systemd/system/multi-user.target.wants" / unit).is_symlink()


def _keyvals(text: str, sep: str = "=") -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and sep in line:
            k, v = line.split(sep, 1)
            out[k.strip()] = v.strip()
    return out


@pytest.mark.parametrize("example", _params(ON_PREM))
def test_converge_succeeds_and_second_run_changes_nothing(converges, example):
    c = converges.get(example)
    assert c.rc == 0, f"{example}: converge failed: {c.first['failures']}"
    assert c.rerun_rc == 0, f"{example}: second run failed: {c.rerun['failures']}"
    changed = [f"{r['host']}: {r['role']} : {r['task']}" for r in c.rerun["results"] if r["status"] == "changed"]
    assert changed == [], f"{example}: the second run changed tasks (not idempotent): {changed}"
    assert set(c.rerun["hosts"]) == set(c.roots), "every representative host took part in the run"
    assert all(h["changed"] == 0 and h["failed"] == 0 for h in c.rerun["hosts"].values()), c.rerun["hosts"]
    assert sum(1 for r in c.first["results"] if r["status"] == "changed") > 0, "the first run configured something"
    # image mode: nothing touches the running kernel or starts a service inside a root filesystem
    live = [f"{r['host']}: {r['task']}" for r in c.first["results"] if r["status"] != "skipped" and (
        r["action"].endswith(("modprobe", "reboot", "driverctl"))
        or (r["action"].endswith("systemd_service") and (r["task"].startswith("Start ") or " now" in r["task"])))]
    assert live == [], f"{example}: live-host steps ran against a root filesystem: {live}"
    print(f"{example}: " + ", ".join(f"{k} {v:.1f} s" for k, v in c.seconds.items()))


@pytest.mark.parametrize("example", _params(ON_PREM))
def test_host_tuning_files_match_the_blueprint(converges, example):
    c = converges.get(example)
    for gname, s, roles, root in _groups(c, example):
        limits = (root / "etc/security/limits.d/90-clusterforge-memlock.conf").read_text()
        for who in (r"\*", "root"):
            for kind in ("soft", "hard"):
                assert re.search(rf"^{who}\s+{kind}\s+memlock\s+unlimited$", limits, re.MULTILINE), (gname, who, kind)
        assert "DefaultLimitMEMLOCK=infinity" in (root / "etc/systemd/system.conf.d/90-clusterforge-limits.conf").read_text()
        sysctl = {k: v for k, v in _keyvals((root / "etc/sysctl.d/90-clusterforge.conf").read_text()).items()}
        assert sysctl == dict(s.sysctls), gname
        grub = root / "etc/default/grub.d/90-clusterforge.cfg"
        if s.kernel_cmdline:
            line = next(ln for ln in grub.read_text().splitlines() if ln.startswith("GRUB_CMDLINE_LINUX="))
            assert line.endswith(" ".join(s.kernel_cmdline) + '"'), (gname, line)
        else:
            assert not grub.exists(), gname
        assert _enabled(root, "clusterforge-acs-disable.service") == s.disable_acs, gname
        assert _enabled(root, "clusterforge-cpu-governor.service")
        assert "echo \"$governor\"" in (root / "usr/local/sbin/clusterforge-cpu-governor").read_text()
        assert _enabled(root, "irqbalance.service")


@pytest.mark.parametrize("example", _params(ON_PREM))
def test_nccl_conf_and_rdma_files_match_the_blueprint(converges, example):
    c = converges.get(example)
    bp = _bp(example)
    net = bp.network
    inventory, _ = inventory_data(load_blueprint(EXAMPLES / f"{example}.yaml"))
    hostvars = {h: hv for g in inventory["all"]["children"].values() for h, hv in (g.get("hosts") or {}).items()}
    for gname, s, roles, root in _groups(c, example):
        nccl = root / "etc/nccl.conf"
        if "rdma" not in roles or not s.nccl_env:
            assert not nccl.exists(), gname
            continue
        conf = _keyvals(nccl.read_text())
        assert conf == dict(s.nccl_env), gname
        if isinstance(net, RoceNetwork):
            if net.roce.gid_index == "discover":
                # looked up on the node by the installed script; a root filesystem has no RoCE port, so it is left out
                assert "NCCL_IB_GID_INDEX" not in conf
                assert (root / "usr/local/sbin/roce-gid-index").stat().st_mode & 0o111
            else:
                assert conf["NCCL_IB_GID_INDEX"] == str(net.roce.gid_index)
            assert conf["NCCL_IB_TC"] == str(net.roce.dscp * 4) == "104"  # TC = DSCP << 2 with DSCP 26
            assert conf["NCCL_IB_HCA"] == "=" + ",".join(f"{n.device}:{n.port}" for n in bp.group(gname).hardware.nics)
            qos = _keyvals((root / "etc/clusterforge/roce-qos.conf").read_text())
            assert qos["PFC_VECTOR"] == s.roce.pfc_vector == "0,0,0,1,0,0,0,0" and qos["DSCP"] == "26" and qos["TRUST"] == "dscp"
            assert qos["MTU"] == str(net.mtu) and qos["ECN"] == "1"
            assert qos["INTERFACES"] == '"' + " ".join(n.netdev for n in bp.group(gname).hardware.nics) + '"'
            assert _enabled(root, "clusterforge-roce-qos.service")
        if isinstance(net, InfinibandNetwork):
            hca = conf["NCCL_IB_HCA"]
            ib_ports = [n for n in bp.group(gname).hardware.nics if n.link_layer == "infiniband"]
            assert hca == "=" + ",".join(f"{n.device}:{n.port}" for n in ib_ports), hca
            if gname == "dgx":  # every compute rail of a DGX H100
                assert hca == "=" + ",".join(f"mlx5_{i}:1" for i in range(8)), hca
            modules = (root / "etc/modules-load.d/clusterforge-rdma.conf").read_text().split()
            assert {"ib_umad", "ib_uverbs", "rdma_ucm", "ib_ipoib"} <= set(modules)
            # the peer-memory module only where the group's GPUs use it (not on the GPU-less management host)
            assert ("nvidia-peermem" in modules) == (s.gpudirect_rdma == "nvidia-peermem"), (gname, s.gpudirect_rdma)
            if gname == "dgx":
                assert s.gpudirect_rdma == "nvidia-peermem"
            host = c.groups[gname]
            for iface in hostvars[host].get("rdma_ipoib_interfaces", []):
                cfg = (root / "etc/network/interfaces.d" / f"60-clusterforge-{iface['netdev']}").read_text()
                assert f"address {iface['address']}" in cfg and "datagram" in cfg
    if isinstance(net, InfinibandNetwork):
        sm = net.infiniband.subnet_manager
        sm_group = next(g.name for g in bp.node_groups if any(h.name == sm.host for h in g.hosts))
        root = c.root(sm_group)
        assert f"sm_priority {sm.priority}" in (root / "etc/opensm/opensm.conf").read_text()
        assert "opensm" in _installed(root)


@pytest.mark.parametrize("example", _params(ON_PREM))
def test_storage_entries_match_the_blueprint(converges, example):
    c = converges.get(example)
    for gname, s, roles, root in _groups(c, example):
        fstab = _fstab(root)
        if s.scratch is not None:
            sc = s.scratch
            assert fstab[sc.mount] == (sc.md_device, sc.filesystem, ",".join(sc.mount_options)), gname
            mdadm = (root / "etc/mdadm/mdadm.conf").read_text()
            assert re.search(rf"^ARRAY {re.escape(sc.md_device)} metadata=1\.2 name=any:scratch$", mdadm, re.MULTILINE), mdadm
            assert (root / sc.mount.lstrip("/")).is_dir()
        for m in s.lustre:
            assert fstab[m.mount] == (m.source, "lustre", ",".join(m.options)), gname
            lnet = (root / "etc/modprobe.d/lustre.conf").read_text()
            assert f'options lnet networks="{m.lnet_networks}"' in lnet
        for m in s.nfs:
            assert fstab[m.mount] == (m.source, "nfs", ",".join([f"vers={m.version}", *m.options])), gname
        if not s.lustre:
            assert not (root / "etc/modprobe.d/lustre.conf").exists()
    if example == "onprem-dgx-h100-ib":
        # LNet binds to the IPoIB netdev of the DGX's first InfiniBand port
        assert 'options lnet networks="o2ib0(ibp24s0)"' in (c.root("dgx") / "etc/modprobe.d/lustre.conf").read_text()


@pytest.mark.parametrize("example", _params(ON_PREM))
def test_containerd_and_driver_files_match_the_blueprint(converges, example):
    c = converges.get(example)
    for gname, s, roles, root in _groups(c, example):
        config = root / "etc/containerd/config.toml"
        if "container_runtime" not in roles:
            assert "containerd" not in _installed(root), gname
            continue
        cri = tomllib.loads(config.read_text())["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
        assert cri["default_runtime_name"] == s.container_default_runtime, gname
        runtimes = cri["runtimes"]
        if s.container_default_runtime == "nvidia":
            assert runtimes["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
            assert runtimes["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
        else:
            assert "nvidia" not in runtimes, gname
        if s.sandbox.runtime == "kata":
            kata = runtimes[s.sandbox.runtime_class]
            assert kata["runtime_type"] == f"io.containerd.{s.sandbox.runtime_class}.v2"
            assert kata["options"]["ConfigPath"] == "/etc/kata-containers/configuration-qemu-nvidia-gpu.toml"
        assert "LimitMEMLOCK=infinity" in (root / "etc/systemd/system/containerd.service.d/50-clusterforge.conf").read_text()
        assert _enabled(root, "containerd.service")
        if "nvidia_driver" in roles:
            assert "blacklist nouveau" in (root / "etc/modprobe.d/blacklist-nouveau.conf").read_text()
            override = (root / "etc/systemd/system/nvidia-persistenced.service.d/override.conf").read_text()
            assert "--persistence-mode" in override


@pytest.mark.parametrize("example", _params(ON_PREM))
def test_distribution_packages_are_installed(converges, example):
    c = converges.get(example)
    for gname, s, roles, root in _groups(c, example):
        want = {"irqbalance", "pciutils"}
        if "rdma" in roles and s.fabric in ("infiniband", "roce"):
            want |= {"rdma-core", "ibverbs-utils", "perftest"}
        if "nvme_scratch" in roles:
            want |= {"mdadm", "xfsprogs", "nvme-cli"}
        if "nfs_client" in roles:
            want |= {"nfs-common"}
        if "container_runtime" in roles:
            want |= {"containerd"}
        if "validation_tools" in roles:
            want |= {"fio", "perftest", "numactl"}
        if s.sandbox.gpu_passthrough:
            want |= {"driverctl"}
        if s.sandbox.runtime == "vm":
            want |= {"qemu-system-x86", "libvirt-daemon-system", "ovmf"}
        installed = _installed(root)
        assert want <= installed, f"{gname}: missing {sorted(want - installed)}"
        # vendor packages were gated off for the real converge (their steps run in check mode)
        assert not {p for p in installed if p.startswith(("nvidia-open", "cuda-drivers", "nvidia-container-toolkit"))}
        if "validation_tools" in roles:
            payloads = {p.name for p in (root / "opt/clusterforge/validate").iterdir()}
            assert {"collectives.py", "fio_bench.py", "amp_bench.py"} <= payloads


@pytest.mark.parametrize("example", _params(["onprem-sandbox-kata"]))
def test_sandbox_passthrough_kata_and_vm_files(converges, example):
    c = converges.get(example)
    bp = _bp(example)
    for gname in ("kata", "vms"):
        root = c.root(gname)
        assert (root / "etc/modules-load.d/clusterforge-vfio.conf").read_text().split()[-3:] == [
            "vfio", "vfio_iommu_type1", "vfio_pci"]
        vfio = (root / "etc/modprobe.d/clusterforge-vfio.conf").read_text()
        assert "softdep nvidia pre: vfio-pci" in vfio and "softdep nouveau pre: vfio-pci" in vfio
        cmdline = (root / "etc/default/grub.d/90-clusterforge.cfg").read_text()
        iommu = "amd_iommu=on" if bp.group(gname).hardware.cpu_vendor == "amd" else "intel_iommu=on"
        assert f"{iommu} iommu=pt" in cmdline
        assert not (root / "etc/systemd/system/clusterforge-acs-disable.service").exists(), "ACS stays on for passthrough"
    kata = c.root("kata")
    dropin = tomllib.loads((kata / "etc/kata-containers/config.d/50-clusterforge-gpu.toml").read_text())
    assert dropin["hypervisor"]["qemu"]["cold_plug_vfio"] == "root-port"
    # full passthrough of an NVSwitch system: every GPU and every NVSwitch needs a root port in the guest
    assert dropin["hypervisor"]["qemu"]["pcie_root_port"] == bp.group("kata").hardware.gpu.count + 4 == 12
    assert dropin["runtime"]["static_sandbox_resource_mgmt"] is True
    shim = kata / "usr/local/bin/containerd-shim-kata-qemu-nvidia-gpu-v2"
    assert shim.is_symlink() and str(shim.readlink()) == "/opt/kata/bin/containerd-shim-kata-v2"
    vms = c.root("vms")
    vm = _keyvals((vms / "etc/clusterforge/sandbox-vm.conf").read_text())
    sizing = bp.group("vms").sandbox.vm
    assert (vm["VCPUS"], vm["MEMORY_GIB"], vm["GPUS_PER_VM"]) == (str(sizing.vcpus), str(sizing.memory_gib),
                                                                 str(sizing.gpus_per_vm))
    assert _enabled(vms, "libvirtd.service")


VENDOR_STEPS = {
    "nvidia_driver": ["Add the NVIDIA CUDA repository.", "Install the pinned NVIDIA driver packages."],
    "container_runtime": ["Add the libnvidia-container repository.", "Install the pinned NVIDIA Container Toolkit packages."],
    "lustre_client": ["Add the Lustre client repository.", "Install the Lustre client packages."],
    "rdma": ["Add the DOCA repository.", "Install DOCA-OFED."],
    "sandbox": ["Unpack the Kata Containers release into /opt/kata."],
}


@pytest.mark.parametrize("example", _params(sorted(CHECK_MODE_EXAMPLES)))
def test_vendor_install_steps_run_in_check_mode(converges, example):
    c = converges.check_vendor_steps(example)
    assert c.check_rc == 0, f"check-mode run failed: {c.check['failures']}"
    assert c.check["check"] is True
    ran = [r for r in c.check["results"] if r["status"] != "skipped" and r["role"] in VENDOR_STEPS
           and not r["action"].endswith(("assert", "set_fact", "debug", "include_vars", "validate_argument_spec", "stat",
                                        "shell", "command", "include_tasks", "find"))]
    listing = "\n".join(f"{r['host']}\t{r['role']}\t{r['task']}\t{r['status']}\t{r['message']}" for r in ran)
    (c.out / "check-mode-steps.txt").write_text(listing + "\n")
    print(f"steps run in check mode ({example}):\n{listing}")
    expected = []
    for gname, s, roles, root in _groups(c, example):
        host = c.groups[gname]
        if "nvidia_driver" in roles:
            expected += [(host, "nvidia_driver", t) for t in VENDOR_STEPS["nvidia_driver"]]
        if "container_runtime" in roles and s.container_default_runtime == "nvidia":
            expected += [(host, "container_runtime", t) for t in VENDOR_STEPS["container_runtime"]]
        if "lustre_client" in roles:
            expected += [(host, "lustre_client", t) for t in VENDOR_STEPS["lustre_client"]]
        if "rdma" in roles and s.fabric in ("infiniband", "roce"):
            expected += [(host, "rdma", t) for t in VENDOR_STEPS["rdma"]]
        if s.sandbox.runtime == "kata":
            expected += [(host, "sandbox", t) for t in VENDOR_STEPS["sandbox"]]
    got = {(r["host"], r["role"], r["task"]): r["status"] for r in ran}
    assert expected, "the example has vendor steps"
    for key in expected:
        # repository files: "changed" (would be written); package installs: "changed" or "ignored" when the
        # repository index cannot exist in check mode (no network to the vendor in CI)
        assert got.get(key) in ("changed", "ignored"), f"{key} did not run in check mode: {got.get(key)}"
    for root in c.roots.values():  # check mode wrote nothing
        assert not list((root / "etc/apt/sources.list.d").glob("*.sources"))
        assert not (root / "opt/kata").exists()
