"""Real converges: every on-prem example blueprint is rendered and run with ``run_site`` against root
filesystems (one per node group) through the chroot connection — each GPU example on its declared Ubuntu
release (a Debian root shaped as Ubuntu) and on Debian 12; a second run must change nothing; the files and
packages inside the root filesystems are checked against the blueprint.

The vendor installs run for real: the NVIDIA driver stack, the NVIDIA Container Toolkit and Kata come from
the stand-in vendor repositories of :mod:`tests.roles.vendor_repo` (real names, versions and dependency
relations, served on 127.0.0.1), and the tests check what was installed, at which version, held, enabled and
that a reboot was requested. The Lustre client comes from the stand-in site repository that the blueprint's
``software.lustre_client_repos`` names for the converged OS (as a site declares its own).
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from blueprints import load_blueprint
from blueprints.catalog import catalog
from blueprints.models import InfinibandNetwork, RoceNetwork
from blueprints.settings import node_settings
from blueprints.vendor import bare_metal, nvidia_services, vendor_units
from clusterforge.ansible.render import inventory_data, roles_for
from tests.conftest import EXAMPLES

from .conftest import CONVERGES, GPU_EXAMPLES, converge_id, installed_packages, rewritten_files
from .cuda_repos import revision
from .vendor_repo import FIXTURES

ON_PREM = CONVERGES


def _params(pairs: list[tuple[str, str]]) -> list:
    return [pytest.param(e, o, id=converge_id(e, o)) for e, o in pairs]


def _gpu_params() -> list:
    return _params([(e, o) for e, o in CONVERGES if e in GPU_EXAMPLES])


pytestmark = pytest.mark.slow


def _bp(example: str, os_name: str | None = None):
    bp = load_blueprint(EXAMPLES / f"{example}.yaml").blueprint
    if os_name and bp.target.provider == "onprem" and bp.target.os != os_name:
        bp = bp.model_copy(update={"target": bp.target.model_copy(update={"os": os_name})})
    return bp


def _groups(c, example):
    """(node group name, settings, roles, root filesystem) for each converged group."""
    bp = _bp(example, c.os_name)
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
    return set(installed_packages(root))


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


@pytest.mark.parametrize(("example", "os_name"), _params(ON_PREM))
def test_converge_succeeds_and_second_run_changes_nothing(converges, example, os_name):
    c = converges.get(example, os_name)
    assert c.rc == 0, f"{example}: converge failed: {c.first['failures']}"
    assert c.rerun_rc == 0, f"{example}: second run failed: {c.rerun['failures']}"
    changed = [f"{r['host']}: {r['role']} : {r['task']}" for r in c.rerun["results"] if r["status"] == "changed"]
    assert changed == [], f"{example}: the second run changed tasks (not idempotent): {changed}"
    assert set(c.rerun["hosts"]) == set(c.roots), "every representative host took part in the run"
    assert all(h["changed"] == 0 and h["failed"] == 0 for h in c.rerun["hosts"].values()), c.rerun["hosts"]
    assert sum(1 for r in c.first["results"] if r["status"] == "changed") > 0, "the first run configured something"
    rewritten = rewritten_files(c.rerun)
    assert rewritten == [], f"{example}: the second run wrote these files again (their probe misses): {rewritten}"
    # image mode: nothing touches the running kernel or starts a service inside a root filesystem
    live = [f"{r['host']}: {r['task']}" for r in c.first["results"] if r["status"] != "skipped" and (
        r["action"].endswith(("modprobe", "reboot", "driverctl"))
        or (r["action"].endswith("systemd_service") and (r["task"].startswith("Start ") or " now" in r["task"])))]
    assert live == [], f"{example}: live-host steps ran against a root filesystem: {live}"
    print(f"{example}: " + ", ".join(f"{k} {v:.1f} s" for k, v in c.seconds.items()))


@pytest.mark.parametrize(("example", "os_name"), _params(ON_PREM))
def test_host_tuning_files_match_the_blueprint(converges, example, os_name):
    c = converges.get(example, os_name)
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


@pytest.mark.parametrize(("example", "os_name"), _params(ON_PREM))
def test_nccl_conf_and_rdma_files_match_the_blueprint(converges, example, os_name):
    c = converges.get(example, os_name)
    bp = _bp(example, os_name)
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
        if isinstance(net, RoceNetwork) and s.roce is None:
            # a group that declares no RoCE NIC (the Slurm controller and login node): no ports to configure
            assert not s.rdma_devices and "NCCL_IB_HCA" not in conf and "NCCL_IB_GID_INDEX" not in conf, gname
            assert not (root / "usr/local/sbin/roce-gid-index").exists(), gname
            assert not (root / "etc/clusterforge/roce-qos.conf").exists(), gname
        elif isinstance(net, RoceNetwork):
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
            assert qos["MTU"] == str(net.mtu) and qos["ECN"] == ("1" if net.roce.ecn else "0")
            assert qos["INTERFACES"] == "'" + " ".join(n.netdev for n in bp.group(gname).hardware.nics) + "'"  # one word
            assert _enabled(root, "clusterforge-roce-qos.service")
        if isinstance(net, InfinibandNetwork):
            hca = conf["NCCL_IB_HCA"]
            ib_ports = [n for n in bp.group(gname).hardware.nics if n.link_layer == "infiniband"]
            assert hca == "=" + ",".join(f"{n.device}:{n.port}" for n in ib_ports), hca
            if gname == "dgx":  # every compute rail of a DGX H100
                assert hca == "=" + ",".join(f"mlx5_{i}:1" for i in range(8)), hca
            modules = (root / "etc/modules-load.d/clusterforge-rdma.conf").read_text().split()
            assert {"ib_umad", "ib_uverbs", "rdma_ucm", "ib_ipoib"} <= set(modules)
            # the peer-memory module only where the group's GPUs use it; DMA-BUF is the default (open
            # kernel modules, no OFED), where nvidia-peermem would fail to load
            assert ("nvidia-peermem" in modules) == (s.gpudirect_rdma == "nvidia-peermem"), (gname, s.gpudirect_rdma)
            if gname == "dgx":
                assert s.gpudirect_rdma == "dmabuf"
            host = c.groups[gname]
            for iface in hostvars[host].get("rdma_ipoib_interfaces", []):
                if os_name.startswith("ubuntu"):  # Ansible's facts said Ubuntu: netplan, not ifupdown
                    cfg = (root / f"etc/netplan/60-clusterforge-{iface['netdev']}.yaml").read_text()
                    assert iface["address"] in cfg
                    assert not (root / "etc/network/interfaces.d" / f"60-clusterforge-{iface['netdev']}").exists()
                else:
                    cfg = (root / "etc/network/interfaces.d" / f"60-clusterforge-{iface['netdev']}").read_text()
                    assert f"address {iface['address']}" in cfg and "datagram" in cfg
    if isinstance(net, InfinibandNetwork):
        sm = net.infiniband.subnet_manager
        sm_group = next(g.name for g in bp.node_groups if any(h.name == sm.host for h in g.hosts))
        root = c.root(sm_group)
        assert f"sm_priority {sm.priority}" in (root / "etc/opensm/opensm.conf").read_text()
        assert "opensm" in _installed(root)


@pytest.mark.parametrize(("example", "os_name"), _params(ON_PREM))
def test_storage_entries_match_the_blueprint(converges, example, os_name):
    c = converges.get(example, os_name)
    for gname, s, roles, root in _groups(c, example):
        fstab = _fstab(root)
        if s.scratch is not None:
            sc = s.scratch
            # an image has no array yet: fstab gets the entry only for an array that exists
            assert sc.mount not in fstab, gname
            mdadm = (root / "etc/mdadm/mdadm.conf").read_text()
            assert re.search(rf"^ARRAY {re.escape(sc.md_device)} metadata=1\.2 name=any:scratch$", mdadm, re.MULTILINE), mdadm
            assert (root / sc.mount.lstrip("/")).is_dir()
        for m in s.lustre:
            assert fstab[m.mount] == (m.source, "lustre", ",".join(m.options)), gname
            lnet = (root / "etc/modprobe.d/lustre.conf").read_text()
            assert f'options lnet networks="{m.lnet_networks}"' in lnet
        if any(m.source for m in s.lustre):  # the client comes from the site repository (the stand-in here)
            dpkg = installed_packages(root)
            assert all(p in dpkg for p in s.lustre_client_packages), (gname, s.lustre_client_packages)
            assert "/lustre/" in (root / "etc/apt/sources.list.d/lustre-client.sources").read_text()
        for m in s.nfs:
            assert fstab[m.mount] == (m.source, "nfs", ",".join([f"vers={m.version}", *m.options])), gname
        if not s.lustre:
            assert not (root / "etc/modprobe.d/lustre.conf").exists()
    if example == "onprem-dgx-h100-ib":
        # LNet binds to the IPoIB netdev of the DGX's first InfiniBand port
        assert 'options lnet networks="o2ib0(ibp24s0)"' in (c.root("dgx") / "etc/modprobe.d/lustre.conf").read_text()


@pytest.mark.parametrize(("example", "os_name"), _params(ON_PREM))
def test_containerd_and_driver_files_match_the_blueprint(converges, example, os_name):
    c = converges.get(example, os_name)
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


@pytest.mark.parametrize(("example", "os_name"), _params(ON_PREM))
def test_distribution_packages_are_installed(converges, example, os_name):
    c = converges.get(example, os_name)
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
        if "nvidia_driver" not in roles:
            assert not {p for p in installed if p.startswith(("nvidia-open", "cuda-drivers", "nvidia-fabricmanager"))}
        if "validation_tools" in roles:
            payloads = {p.name for p in (root / "opt/clusterforge/validate").iterdir()}
            assert {"collectives.py", "fio_bench.py", "amp_bench.py"} <= payloads


@pytest.mark.parametrize(("example", "os_name"), _params([p for p in CONVERGES if p[0] == "onprem-sandbox-kata"]))
def test_sandbox_passthrough_kata_and_vm_files(converges, example, os_name):
    c = converges.get(example, os_name)
    bp = _bp(example, os_name)
    for gname in ("kata", "vms"):
        root = c.root(gname)
        assert (root / "etc/modules-load.d/clusterforge-vfio.conf").read_text().split()[-3:] == [
            "vfio", "vfio_iommu_type1", "vfio_pci"]
        vfio = (root / "etc/modprobe.d/clusterforge-vfio.conf").read_text()
        assert "softdep nvidia pre: vfio-pci" in vfio and "softdep nouveau pre: vfio-pci" in vfio
        cmdline = (root / "etc/default/grub.d/90-clusterforge.cfg").read_text()
        # the AMD IOMMU is on by default (`amd_iommu=on` is not a valid value); Intel needs intel_iommu=on
        assert "amd_iommu" not in cmdline
        want = "iommu=pt" if bp.group(gname).hardware.cpu_vendor == "amd" else "intel_iommu=on iommu=pt"
        assert want + '"' in cmdline
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


def _spec(spec: str) -> tuple[str, str]:
    name, _, version = spec.partition("=")
    return name, version


@pytest.mark.parametrize(("example", "os_name"), _gpu_params())
def test_nvidia_stack_is_installed_at_one_version_held_and_a_reboot_requested(converges, example, os_name):
    c = converges.get(example, os_name)
    seen = 0
    for gname, s, roles, root in _groups(c, example):
        if "nvidia_driver" not in roles:
            continue
        seen += 1
        p = s.gpu_packages
        assert p is not None and p.version == s.driver_version
        dpkg = installed_packages(root)
        for spec in p.packages:
            name, version = _spec(spec)
            assert name in dpkg, f"{gname}: {name} not installed"
            if version:  # an apt version pattern (580.173.02-*)
                assert fnmatch.fnmatchcase(dpkg[name][0], version), f"{gname}: {name} {dpkg[name][0]} != pinned {version}"
        # every driver package at the pinned release with the revision of this distribution's directory of NVIDIA's
        # CUDA repository (debian12 -1, ubuntu2204/ubuntu2404 -0ubuntu1 / -1ubuntu1: tests/fixtures/cuda-repos), its
        # dependencies too (the stand-in repository also has the catalogued releases around it)
        dist = bare_metal()["nvidia_driver"]["cuda_repo"]["dists"][os_name]
        nvidia = {n: v for n, (v, _) in dpkg.items() if n.startswith(("nvidia-", "libnvidia-")) and "container" not in n}
        assert nvidia and set(nvidia.values()) == {f"{p.version}-{revision(dist, p.version)}"}, (gname, nvidia)
        # NVIDIA's compute-only set: no X driver, GL stack or desktop meta-package on a cluster node
        desktop = [n for n in dpkg if n in ("nvidia-open", "cuda-drivers", "nvidia-driver") or "xserver-xorg-video-nvidia" in n
                   or n.startswith(("libnvidia-gl", "nvidia-driver-5"))]
        assert desktop == [] and not (root / "usr/lib/xorg/modules/drivers/nvidia_drv.so").exists(), (gname, desktop)
        held = {n for n, (_, sel) in dpkg.items() if sel == "hold"}
        assert set(p.hold) <= held, f"{gname}: not held: {sorted(set(p.hold) - held)}"
        pref = (root / "etc/apt/preferences.d/clusterforge-nvidia-driver.pref").read_text()
        assert f"Pin: version {p.version}-*" in pref and "Pin-Priority: 1000" in pref
        blacklist = (root / "etc/apt/apt.conf.d/51clusterforge-nvidia").read_text()
        assert all(f'"^{re.escape(n)}$";' in blacklist for n in p.hold), blacklist
        if s.fabric_manager:  # NVSwitch: Fabric Manager and NSCQ at exactly the driver version
            assert dpkg["nvidia-fabricmanager"][0] == dpkg["libnvidia-nscq"][0] == nvidia["nvidia-fabricmanager"]
            assert {"nvidia-fabricmanager", "libnvidia-nscq"} <= held
        else:
            assert "nvidia-fabricmanager" not in dpkg and "libnvidia-nscq" not in dpkg
        for unit in p.services:
            assert _enabled(root, f"{unit}.service"), f"{gname}: {unit} not enabled"
        if p.fabricmanager_config:  # Fabric Manager's mode written into its own configuration file
            cfg = _keyvals((root / p.fabricmanager_config.lstrip("/")).read_text())
            assert p.fabric_mode is not None and cfg[p.fabric_mode[0]] == str(p.fabric_mode[1]), cfg
        assert "datacenter-gpu-manager" not in dpkg, "DCGM 3 package"
        assert any(n.startswith("datacenter-gpu-manager-4-") for n in dpkg)
        # DCGM 4 for the driver's CUDA major, with its recommends (libnuma1: NVIDIA/DCGM cmake/packaging.cmake)
        assert {_spec(x)[0] for x in p.dcgm_packages} <= set(dpkg) and "libnuma1" in dpkg, (gname, p.dcgm_packages)
        # a new driver needs a reboot: requested (image mode never reboots)
        assert p.version in (root / "run/reboot-required").read_text()
        assert set((root / "run/reboot-required.pkgs").read_text().split()) == set(p.hold)
        # the stand-in nvidia-smi prints the recorded output of the pinned release where one is recorded
        smi = subprocess.run(["chroot", str(root), "nvidia-smi"], capture_output=True, text=True, check=True).stdout
        recorded = FIXTURES / "nvidia-smi" / f"nvidia-smi-{p.version}.txt"
        assert smi == recorded.read_text() if recorded.exists() else smi.startswith(f"NVIDIA-SMI {p.version} ")
        # the CUDA repository's distribution directory of this OS (catalog ``cuda_repo.dists``: debian12, ubuntu2204 ...)
        cuda = bare_metal()["nvidia_driver"]["cuda_repo"]
        uris = _keyvals((root / "etc/apt/sources.list.d/nvidia-cuda.sources").read_text(), ":")["URIs"]
        assert uris.rstrip("/").endswith(f"/cuda/{cuda['dists'][os_name]}/{cuda['arch']['x86_64']}"), (os_name, uris)
        # Ubuntu task files were selected on the Ubuntu-shaped root (Ubuntu's kernel headers meta-package)
        headers = "linux-headers-generic" if os_name.startswith("ubuntu") else "linux-headers-amd64"
        assert headers in dpkg, (gname, os_name)
        reran = [r for r in c.rerun["results"] if r["host"] == c.groups[gname] and r["role"] == "nvidia_driver"
                 and r["task"].startswith("Install the pinned")]
        # rerun: dpkg-query shows the pinned set installed at the pinned versions, so apt is not opened at all
        # (tests/roles/test_apt_fast_path.py: a moved pin or a half-installed package still goes to apt)
        assert reran and all(r["status"] == "skipped" for r in reran), reran
    # every group that drives its GPUs on the host was checked (the Kata example passes all of them through)
    assert seen == sum(node_settings(_bp(example, os_name), g).install_gpu_driver for g in c.groups)


@pytest.mark.parametrize(("example", "os_name"), _gpu_params())
def test_container_toolkit_is_pinned_and_cdi_follows_the_driver(converges, example, os_name):
    c = converges.get(example, os_name)
    seen = 0
    for gname, s, roles, root in _groups(c, example):
        if "container_runtime" not in roles or s.container_default_runtime != "nvidia":
            continue
        seen += 1
        dpkg = installed_packages(root)
        assert len(s.container_toolkit_packages) == 4
        for spec in s.container_toolkit_packages:
            name, version = _spec(spec)  # an apt version pattern (1.19.1-*): the repository's own revision
            assert name in dpkg and dpkg[name][1] == "hold", (gname, name, dpkg.get(name))
            assert fnmatch.fnmatchcase(dpkg[name][0], version), (gname, name, dpkg[name], version)
        assert _enabled(root, "clusterforge-cdi-refresh.service")
        cdi_unit = _keyvals((root / "etc/systemd/system/clusterforge-cdi-refresh.service").read_text())
        assert cdi_unit["After"].split() == [f"{nvidia_services()['persistenced']}.service", "systemd-modules-load.service"]
        # the refresh script regenerates the CDI spec when the loaded driver changes, and only then
        version_file = root / "tmp/nvidia-version"
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CLUSTERFORGE_NVIDIA_VERSION_FILE": "/tmp/nvidia-version"}

        def refresh(root: Path = root, env: dict[str, str] = env) -> str:
            return subprocess.run(["chroot", str(root), "/usr/local/sbin/clusterforge-cdi-refresh"], env=env,
                                  capture_output=True, text=True, check=True).stdout

        assert refresh().startswith("skipped: the nvidia module is not loaded")
        version_file.write_text(f"{s.driver_version}\n")
        assert refresh().startswith("regenerated")
        assert refresh().startswith("unchanged")
        other = next(r for r in catalog().driver_releases(s.driver_branch) if r != s.driver_version)
        version_file.write_text(f"{other}\n")
        assert refresh().startswith(f"regenerated: /etc/cdi/nvidia.yaml for driver {other}")
        assert (root / "etc/cdi/nvidia.yaml").read_text().startswith("cdiVersion")
        for f in (version_file, root / "etc/cdi/nvidia.yaml", root / "etc/cdi/.nvidia-driver-version"):
            f.unlink()
    if example != "onprem-sandbox-kata":
        assert seen


@pytest.mark.parametrize(("example", "os_name"), _params([p for p in CONVERGES if p[0] == "onprem-sandbox-kata"]))
def test_kata_release_is_unpacked_from_the_versioned_tarball(converges, example, os_name):
    from blueprints.vendor import kata_tarball

    c = converges.get(example, os_name)
    bp = _bp(example, os_name)
    root = c.root("kata")
    name = kata_tarball(bp.software.kata)
    assert name.endswith(".tar.zst")  # Kata >= 3.21.0 publishes zstd tarballs
    assert (root / "var/cache/clusterforge" / name).is_file()
    assert {"zstd", "xz-utils"} <= _installed(root)
    shim = subprocess.run(["chroot", str(root), "/opt/kata/bin/containerd-shim-kata-v2"], capture_output=True,
                          text=True, check=True).stdout
    assert bp.software.kata in shim
    assert (root / "etc/kata-containers/configuration-qemu-nvidia-gpu.toml").is_file()


@pytest.mark.parametrize(("example", "os_name"), _gpu_params())
def test_kernel_updates_hold_or_verify_the_out_of_tree_modules(converges, example, os_name):
    c = converges.get(example, os_name)
    seen = 0
    for gname, s, roles, root in _groups(c, example):
        if "kernel_updates" not in roles:
            assert not (s.out_of_tree_modules or s.kernel_hold_packages), gname
            continue
        seen += 1
        dpkg = installed_packages(root)
        kernel = {n: sel for n, (_, sel) in dpkg.items() if n.startswith(("linux-image-", "linux-headers-"))}
        blacklist = root / "etc/apt/apt.conf.d/51clusterforge-kernel"
        if s.kernel_updates == "hold":
            # every installed kernel package is held (GPU hosts have the headers the DKMS build needs; a root
            # filesystem without a kernel has nothing to hold but still gets the blacklist)
            assert all(sel == "hold" for sel in kernel.values()), (gname, kernel)
            assert kernel or "nvidia_driver" not in roles, (gname, "the DKMS headers are installed")
            assert all(f'"{p}";' in blacklist.read_text() for p in s.kernel_hold_blacklist)
        else:  # dkms-verify: the kernel keeps updating, the boot check catches a failed rebuild
            assert "hold" not in kernel.values() and not blacklist.exists(), (gname, kernel)
        if not s.out_of_tree_modules:
            assert not (root / "usr/local/sbin/clusterforge-module-check").exists(), gname
            continue
        assert _enabled(root, "clusterforge-module-check.service"), gname
        # ordered before the NVIDIA daemons and Lustre's LNet unit (the catalog's unit names)
        before = _keyvals((root / "etc/systemd/system/clusterforge-module-check.service").read_text())["Before"].split()
        assert before == [f"{vendor_units()[d]}.service" for d in ("persistenced", "fabricmanager", "lnet")]
        check = (root / "usr/local/sbin/clusterforge-module-check").read_text()
        assert all(f" {m}" in check for m in s.out_of_tree_modules), check
        # the check itself: a module missing for the running kernel fails the unit, naming it
        r = subprocess.run(["chroot", str(root), "/usr/local/sbin/clusterforge-module-check"], check=False,
                           capture_output=True, text=True)
        assert r.returncode == 1 and f"kernel module {s.out_of_tree_modules[0]} is not built for kernel" in r.stderr
    assert seen, "every GPU example decides its kernel updates"
