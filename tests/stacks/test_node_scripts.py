"""The first-boot scripts of the rendered cloud-init really run here, against a fake node: the EFA
check keeps what the AMI ships and finds the OFI plugin in either layout, and the scratch script
uses the Deep Learning AMI's own instance-store volume or fails loudly. Commands that would touch
the machine (curl, mount, mountpoint, mdadm, modinfo) are stubs on ``PATH`` that log their calls."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import shlex
import shutil
import socketserver
import subprocess
import threading
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from blueprints import load_blueprint
from blueprints.catalog import catalog
from blueprints.settings import node_settings
from blueprints.vendor import kata_sha256, kata_tarball, pins_word
from stacks.cloud_init import (
    SANDBOX_SCRIPT,
    placeholder_endpoints,
    render_cloud_config,
    render_user_data,
    scratch_script,
)
from tests.conftest import EXAMPLES

from .conftest import node_file, variant_yaml

BASH = shutil.which("bash") or "/bin/bash"
SW = catalog().aws["efa_software"]


def _settings(example: str, group: str, patch: dict | None = None, tmp: Path | None = None):
    if patch is None:
        bp = load_blueprint(EXAMPLES / f"{example}.yaml").blueprint
    else:
        assert tmp is not None
        path = tmp / "bp.yaml"
        path.write_text(variant_yaml(example, patch))
        bp = load_blueprint(path).blueprint
    return node_settings(bp, group)


def _script(settings, path: str, platform: str = "ubuntu") -> str:
    return node_file(settings, path, platform)  # from the user data, or the program the runner fetches


def _stubs(tmp: Path, **exit_codes: int) -> tuple[Path, Path]:
    """A bin directory of logging stubs; ``exit_codes`` maps a command to its exit status (default 0).
    ``mountpoint`` succeeds only for paths listed in $MOUNTED."""
    bindir, log = tmp / "bin", tmp / "calls.log"
    bindir.mkdir()
    for cmd in ("curl", "mount", "mdadm", "modinfo", "tar", "mkfs.xfs", "blkid", "ldconfig", "apt-get", "dnf"):
        (bindir / cmd).write_text(f'#!/bin/bash\necho "{cmd} $*" >> {log}\nexit {exit_codes.get(cmd.replace(".", "_"), 0)}\n')
    (bindir / "mountpoint").write_text(
        f'#!/bin/bash\necho "mountpoint $*" >> {log}\nfor m in $MOUNTED; do [ "$m" = "${{@: -1}}" ] && exit 0; done\nexit 1\n')
    for f in bindir.iterdir():
        f.chmod(0o755)
    return bindir, log


def _run(script: str, tmp: Path, bindir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    path = tmp / "script.sh"
    path.write_text(script)
    full = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp), **env}
    return subprocess.run([BASH, str(path)], capture_output=True, text=True, env=full, check=False, cwd=tmp)


def _relocate(script: str, tmp: Path) -> str:
    """The script with the OFI plugin directories moved under ``tmp`` (same layouts)."""
    return script.replace("/opt/amazon/ofi-nccl", str(tmp / "opt/amazon/ofi-nccl"))


# --- EFA -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", SW["ofi_nccl_plugin_dirs"])
def test_efa_check_keeps_the_amis_stack_and_finds_the_plugin_in_any_layout(layout: str, tmp_path: Path) -> None:
    """A DLAMI with a newer EFA than the pinned one: nothing is downloaded or reinstalled, and the
    plugin directory actually holding libnccl-net-ofi.so goes into the linker configuration."""
    s = _settings("aws-p5-efa-lustre", "gpu")
    script = _relocate(_script(s, "/usr/local/sbin/clusterforge-efa.sh"), tmp_path)
    plugin_dir = tmp_path / layout.lstrip("/")
    plugin_dir.mkdir(parents=True)
    (plugin_dir / SW["ofi_nccl_plugin_library"]).write_text("")
    record = tmp_path / "efa_installed_packages"
    record.write_text("# EFA installer version: 1.47.0\n# Debug packages installed: no\n")
    bindir, log = _stubs(tmp_path, modinfo=1)
    ldconf = tmp_path / "ofi.conf"
    res = _run(script, tmp_path, bindir, RECORD=str(record), LDCONF=str(ldconf))
    assert res.returncode == 0, res.stderr
    calls = log.read_text() if log.exists() else ""
    assert "curl" not in calls and "efa_installer" not in calls, f"EFA reinstalled over the AMI's: {calls}"
    assert "1.47.0" in res.stderr and s.efa_installer in res.stderr
    assert ldconf.read_text().split() == [str(plugin_dir)]


def test_efa_check_fails_loudly_when_the_plugin_is_nowhere(tmp_path: Path) -> None:
    s = _settings("aws-p5-efa-lustre", "gpu")
    script = _relocate(_script(s, "/usr/local/sbin/clusterforge-efa.sh"), tmp_path)
    record = tmp_path / "efa_installed_packages"
    record.write_text("# EFA installer version: 1.47.0\n")
    bindir, _ = _stubs(tmp_path, modinfo=1)
    res = _run(script, tmp_path, bindir, RECORD=str(record), LDCONF=str(tmp_path / "ofi.conf"))
    assert res.returncode == 1
    assert "ERROR" in res.stderr and "sockets" in res.stderr
    for d in SW["ofi_nccl_plugin_dirs"]:
        assert d.rsplit("/", 1)[-1] in res.stderr


def test_efa_installs_the_pinned_version_only_on_a_node_without_efa(tmp_path: Path) -> None:
    if Path("/sys/module/efa").exists():
        pytest.skip("this machine has the efa module loaded")
    s = _settings("aws-p5-efa-lustre", "gpu")
    script = _relocate(_script(s, "/usr/local/sbin/clusterforge-efa.sh"), tmp_path)
    bindir, log = _stubs(tmp_path, modinfo=1, curl=7)
    res = _run(script, tmp_path, bindir, RECORD=str(tmp_path / "none"), LDCONF=str(tmp_path / "ofi.conf"))
    assert res.returncode != 0, "the stub download fails, so the script must stop"
    assert (f"curl -fsSLo i.tgz https://efa-installer.amazonaws.com/aws-efa-installer-"
            f"{s.efa_installer}.tar.gz") in log.read_text()
    assert "efa_installer.sh" not in log.read_text()


def test_eks_al2023_minimal_efa_counts_as_installed_and_needs_no_host_plugin(tmp_path: Path) -> None:
    """AL2023 EKS AMIs install EFA with --minimal (kernel module + rdma-core): the module is there,
    libfabric and the plugin are not, and that is correct for the host."""
    s = _settings("aws-eks-p4d", "gpu")
    script = _script(s, "/usr/local/sbin/clusterforge-efa.sh", platform="al2023")
    bindir, log = _stubs(tmp_path, modinfo=0)
    res = _run(script, tmp_path, bindir, RECORD=str(tmp_path / "none"), LDCONF=str(tmp_path / "ofi.conf"))
    assert res.returncode == 0, res.stderr
    assert "curl" not in (log.read_text() if log.exists() else "")
    assert "--minimal" in script, "a node without EFA on AL2023 gets the minimal install the AMI family uses"
    assert not (tmp_path / "ofi.conf").exists()


# --- scratch on the Deep Learning AMI -------------------------------------------------------------

def test_scratch_binds_the_dlami_volume_at_the_declared_mount(tmp_path: Path) -> None:
    s = _settings("aws-p5-efa-lustre", "gpu")
    assert s.scratch is not None
    mount = tmp_path / "scratch"
    script = scratch_script(s.scratch).replace(f"MOUNT={s.scratch.mount};", f"MOUNT={mount};")
    ami = catalog().aws["dlami"]["nvme_location"]
    bindir, log = _stubs(tmp_path)
    fstab = tmp_path / "fstab"
    fstab.write_text("")
    res = _run(script, tmp_path, bindir, MOUNTED=ami, FSTAB=str(fstab))
    assert res.returncode == 0, res.stderr
    assert f"mount --bind {ami} {mount}" in log.read_text()
    assert fstab.read_text() == f"{ami} {mount} none bind,nofail 0 0\n"
    assert "mdadm" not in log.read_text(), "the AMI's RAID must not be rebuilt"
    res = _run(script, tmp_path, bindir, MOUNTED=ami, FSTAB=str(fstab))  # every boot: the fstab line stays single
    assert len(fstab.read_text().splitlines()) == 1


def test_scratch_without_drives_or_ami_volume_fails_and_leaves_no_mount_point(tmp_path: Path) -> None:
    s = _settings("aws-p5-efa-lustre", "gpu")
    assert s.scratch is not None
    mount = tmp_path / "scratch"
    wrapper = scratch_script(s.scratch).replace(f"MOUNT={s.scratch.mount};", f"MOUNT={mount};")
    role_script = tmp_path / "clusterforge-nvme-scratch"
    role_script.write_text(_script(s, "/usr/local/sbin/clusterforge-nvme-scratch").replace(
        f"MOUNT={s.scratch.mount};", f"MOUNT={mount};"))
    role_script.chmod(0o755)
    (tmp_path / "by-id").mkdir()
    (tmp_path / "block").mkdir()
    bindir, _ = _stubs(tmp_path)
    res = _run(wrapper, tmp_path, bindir, MOUNTED="", BYID=str(tmp_path / "by-id"), SYSBLOCK=str(tmp_path / "block"),
               FSTAB=str(tmp_path / "fstab"), SCRIPT=str(role_script), MDADM_CONF=str(tmp_path / "mdadm/mdadm.conf"))
    assert res.returncode == 1, "a declared scratch that cannot be built is an error on the node"
    assert "ERROR" in res.stderr and str(mount) in res.stderr
    assert not mount.exists(), "validation jobs must not find an empty directory where the scratch should be"
    assert not (tmp_path / "fstab").exists() and not (tmp_path / "mdadm").exists(), "nothing is written"


# --- scratch from the instance store: the nvme_scratch role's own script --------------------------

class _Node:
    """A fake instance: instance-store drives as image files behind ``by-id`` links, a sysfs tree,
    fstab and mdadm.conf under ``tmp``; mdadm/mkfs/blkid/mount/mountpoint are logging stubs (the md
    driver is not available here), ``wipefs`` is the real one, reading the images."""

    def __init__(self, tmp: Path, n: int, settings, *, model: str = "Amazon EC2 NVMe Instance Storage") -> None:
        self.tmp, self.s = tmp, settings
        self.byid, self.block, self.dev = tmp / "by-id", tmp / "block", tmp / "dev"
        for d in (self.byid, self.block, self.dev):
            d.mkdir(exist_ok=True)
        self.drives = []
        for i in range(n):
            img = self.dev / f"nvme{i + 1}n1"
            with img.open("wb") as f:
                f.truncate(8 * 1024 * 1024)
            (self.byid / f"nvme-{model.replace(' ', '_')}_AWS{i:04d}").symlink_to(img)
            (self.block / img.name / "holders").mkdir(parents=True)
            self.drives.append(img)
        self.mount, self.md = tmp / "scratch", tmp / "md-scratch"
        self.fstab, self.conf = tmp / "fstab", tmp / "mdadm" / "mdadm.conf"
        self.conf.parent.mkdir()
        self.fstab.write_text("UUID=root / ext4 defaults 0 1\n")
        self.bindir, self.log = tmp / "bin", tmp / "calls.log"
        self.bindir.mkdir()
        stubs = {
            "mdadm": f'echo "mdadm $*" >> {self.log}; [ "$1" = --create ] && touch "$2"; exit 0',
            "mkfs.xfs": f'echo "mkfs.xfs $*" >> {self.log}; echo xfs > "${{@: -1}}.fs"',
            "blkid": f'echo "blkid $*" >> {self.log}; f="${{@: -1}}.fs"; [ -e "$f" ] || exit 2; '
                     '[[ " $* " == *" UUID "* ]] && echo 1234-abcd || cat "$f"',
            "mount": f'echo "mount $*" >> {self.log}; touch {tmp}/mounted',
            "mountpoint": f'[ -e {tmp}/mounted ]',
        }
        for name, body in stubs.items():
            (self.bindir / name).write_text(f"#!/bin/bash\n{body}\n")
            (self.bindir / name).chmod(0o755)
        text = _script(settings, "/usr/local/sbin/clusterforge-nvme-scratch")
        for old, new in ((f"MOUNT={settings.scratch.mount};", f"MOUNT={self.mount};"),
                         (f"MD={settings.scratch.md_device};", f"MD={self.md};"),
                         (f"EXPECTED={settings.scratch.expected_drives}\n", f"EXPECTED={n}\n")):
            assert old in text
            text = text.replace(old, new)
        self.script = tmp / "clusterforge-nvme-scratch"
        self.script.write_text(text)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": f"{self.bindir}:/usr/sbin:/sbin:/usr/bin:/bin", "HOME": str(self.tmp), "BYID": str(self.byid),
               "SYSBLOCK": str(self.block), "FSTAB": str(self.fstab), "MDADM_CONF": str(self.conf)}
        return subprocess.run([BASH, str(self.script), *args], capture_output=True, text=True, env=env, check=False)

    def calls(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


def _need_wipefs() -> None:
    if shutil.which("wipefs") is None and not Path("/usr/sbin/wipefs").exists() and not Path("/sbin/wipefs").exists():
        pytest.fail("wipefs (util-linux) is required")


@pytest.mark.parametrize("drives", [2, 4, 8])
def test_instance_store_first_boot_builds_raid0_and_a_reboot_changes_nothing(tmp_path: Path, drives: int) -> None:
    _need_wipefs()
    s = _settings("aws-p5-efa-lustre", "gpu")
    node = _Node(tmp_path, drives, s)
    res = node.run("--require")
    assert res.returncode == 0, res.stderr
    create = next(line for line in node.calls().splitlines() if line.startswith("mdadm --create"))
    assert "--level=0" in create and f"--raid-devices={drives}" in create and "--homehost=any" in create
    assert "--run" not in create.split(), "mdadm's own prompt stays as a second guard"
    assert sorted(create.split()[-drives:]) == sorted(str(d) for d in node.drives)
    assert f"mkfs.xfs -q -K {node.md}" in node.calls()
    assert node.fstab.read_text() == (f"UUID=root / ext4 defaults 0 1\n# clusterforge nvme_scratch\n"
                                      f"{node.md} {node.mount} xfs defaults,noatime,nofail 0 0\n")
    assert f"ARRAY {node.md} metadata=1.2 name=any:scratch" in node.conf.read_text()
    assert (node.mount.stat().st_mode & 0o7777) == 0o1777
    # a reboot: the array and the filesystem exist, fstab and mdadm.conf are right; nothing changes
    before = (node.fstab.read_text(), node.conf.read_text())
    res = node.run("--require")
    assert res.returncode == 0 and "changed:" not in res.stdout, res.stdout
    assert (node.fstab.read_text(), node.conf.read_text()) == before
    assert node.calls().count("mdadm --create") == 1


def test_instance_store_after_stop_start_rebuilds_on_the_blank_drives(tmp_path: Path) -> None:
    """After a stop/start the instance store is blank and the array gone; fstab still holds our entry."""
    _need_wipefs()
    s = _settings("aws-p5-efa-lustre", "gpu")
    node = _Node(tmp_path, 2, s)
    assert node.run("--require").returncode == 0
    fstab = node.fstab.read_text()
    node.md.unlink()
    (tmp_path / "md-scratch.fs").unlink()
    (tmp_path / "mounted").unlink()
    res = node.run("--require")
    assert res.returncode == 0, res.stderr
    assert node.calls().count("mdadm --create") == 2 and node.fstab.read_text() == fstab


@pytest.mark.parametrize("signature", ["ext4", "gpt"])
def test_instance_store_drive_with_a_signature_is_refused_on_the_cloud_too(tmp_path: Path, signature: str) -> None:
    _need_wipefs()
    s = _settings("aws-p5-efa-lustre", "gpu")
    node = _Node(tmp_path, 2, s)
    tool = shutil.which("mkfs.ext4", path="/usr/sbin:/sbin:/usr/bin") if signature == "ext4" else \
        shutil.which("sfdisk", path="/usr/sbin:/sbin:/usr/bin")
    if tool is None:
        pytest.fail(f"{signature}: mkfs.ext4 / sfdisk (e2fsprogs, fdisk) are required")
    if signature == "ext4":
        subprocess.run([tool, "-q", "-F", str(node.drives[1])], check=True, capture_output=True)
    else:
        subprocess.run([tool, "-q", str(node.drives[1])], input="label: gpt\n,,L\n", text=True, check=True,
                       capture_output=True)
    digest = node.drives[1].read_bytes()
    fstab = node.fstab.read_text()
    res = node.run("--require")
    assert res.returncode == 2
    assert "refusing to build the scratch array:" in res.stderr and f"{node.drives[1]}: " in res.stderr
    assert "Nothing was written" in res.stderr
    assert "mdadm --create" not in node.calls() and "mkfs" not in node.calls()
    assert node.drives[1].read_bytes() == digest and node.fstab.read_text() == fstab
    assert not node.conf.exists() and not node.mount.exists()


def test_an_fstab_entry_for_another_device_on_the_mount_point_is_kept(tmp_path: Path) -> None:
    _need_wipefs()
    s = _settings("aws-p5-efa-lustre", "gpu")
    node = _Node(tmp_path, 2, s)
    node.fstab.write_text(f"/dev/md0 {node.mount} xfs defaults,nofail 0 0\n")
    res = node.run("--require")
    assert res.returncode == 2 and f"already mounts /dev/md0 on {node.mount}" in res.stderr
    assert node.fstab.read_text() == f"/dev/md0 {node.mount} xfs defaults,nofail 0 0\n"
    assert "mdadm --create" not in node.calls()


def test_drives_of_another_model_or_in_use_are_not_taken(tmp_path: Path) -> None:
    _need_wipefs()
    s = _settings("aws-p5-efa-lustre", "gpu")
    node = _Node(tmp_path, 3, s)
    (node.block / "nvme2n1" / "holders" / "md127").mkdir()  # a member of another array
    ebs = tmp_path / "dev" / "nvme9n1"
    ebs.touch()
    (node.byid / "nvme-Amazon_Elastic_Block_Store_vol0123").symlink_to(ebs)
    text = node.script.read_text().replace("EXPECTED=3\n", "EXPECTED=2\n")
    node.script.write_text(text)
    res = node.run("--require")
    assert res.returncode == 0, res.stderr
    create = next(line for line in node.calls().splitlines() if line.startswith("mdadm --create"))
    assert create.split()[-2:] == [str(node.drives[0]), str(node.drives[2])]
    assert "nvme2n1 is in use, skipped" in res.stderr


# --- what each group's hardware has ---------------------------------------------------------------

def test_efa_and_nccl_files_only_on_groups_that_have_efa(tmp_path: Path) -> None:
    s = _settings("aws-eks-p4d", "system")
    text = render_user_data(s, placeholder_endpoints(s), eks=True)
    for needle in ("FI_", "clusterforge-efa.sh", "NCCL_NET_PLUGIN", "ofi-nccl"):
        assert needle not in text, f"non-EFA group `system` gets {needle}"


def test_no_device_rdma_variable_where_the_efa_lacks_rdma_read_or_gdr_is_off(tmp_path: Path) -> None:
    g5 = _settings("aws-p5-efa-lustre", "gpu", {"node_groups": [
        {"name": "gpu", "count": 2, "instance_type": "g5.48xlarge", "local_nvme": {"mount": "/scratch"}}],
        "software": {"aws_ofi_nccl": "1.6.0"}}, tmp_path)
    assert "FI_EFA_USE_DEVICE_RDMA" not in g5.nccl_env, "g5 has no EFA RDMA read: libfabric aborts with it"
    old = _settings("aws-p5-efa-lustre", "gpu", {"software": {"aws_ofi_nccl": "1.6.0"}}, tmp_path)
    assert old.nccl_env["FI_EFA_USE_DEVICE_RDMA"] == "1", "aws-ofi-nccl 1.6.x on p5 needs it (plugin guide)"
    off = _settings("aws-p5-efa-lustre", "gpu", {"network": {"gpudirect_rdma": {"enabled": False}}}, tmp_path)
    assert off.nccl_env.get("FI_EFA_USE_DEVICE_RDMA") == "0", "gpudirect_rdma.enabled: false must turn it off"
    new = _settings("aws-p5-efa-lustre", "gpu")
    assert not {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "NCCL_PROTO"} & set(new.nccl_env), (
        "aws-ofi-nccl >= 1.7 needs none of them (plugin guide)")
    legacy = _settings("aws-p5-efa-lustre", "gpu", {"software": {"aws_ofi_nccl": "1.5.0"}}, tmp_path)
    assert legacy.nccl_env["FI_PROVIDER"] == "efa" and legacy.nccl_env["NCCL_PROTO"] == "simple"


def test_plugin_directories_of_every_layout_are_on_the_library_path() -> None:
    s = _settings("aws-p5-efa-lustre", "gpu")
    dirs = s.nccl_env["LD_LIBRARY_PATH"].split(":")
    for d in SW["ofi_nccl_plugin_dirs"]:
        assert d in dirs
    conf = _script(s, "/etc/ld.so.conf.d/clusterforge-nccl.conf")
    assert all(d in conf.split() for d in SW["ofi_nccl_plugin_dirs"])



# --- sandbox runtimes: the sandbox role's own script ------------------------------------------------

class _Releases:
    """The vendors' release files served on 127.0.0.1 from ``root`` (gVisor's bucket, Kata's releases)."""

    def __init__(self, root: Path) -> None:
        handler = functools.partial(_Quiet, directory=str(root))
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def releases(tmp_path: Path):
    root = tmp_path / "releases"
    root.mkdir()
    srv = _Releases(root)
    yield root, srv.url
    srv.close()


def _sandbox(runtime: str, tmp: Path, extra: dict | None = None, platform: str = "ubuntu"):
    patch = {"node_groups": [{"name": "gpu", "role": "compute", "count": 2, "instance_type": "p5.48xlarge",
                              "local_nvme": {"mount": "/scratch"}, "sandbox": runtime, **(extra or {})}]}
    s = _settings("aws-p5-efa-lustre", "gpu", patch, tmp)
    return s, _script(s, SANDBOX_SCRIPT, platform), _script(s, next(
        p for p in ("/usr/local/sbin/clusterforge-sandbox.sh", "/var/lib/cloud/scripts/per-boot/20-clusterforge-sandbox.sh")
        if p in _paths(s, platform)), platform)


def _paths(s, platform: str) -> set[str]:
    doc = YAML(typ="safe", pure=True).load(render_cloud_config(s, placeholder_endpoints(s), platform=platform))  # type: ignore[arg-type]
    return {f["path"] for f in doc["write_files"]}


def _sandbox_env(tmp: Path, bindir: Path, **env: str) -> dict[str, str]:
    return {"BIN": str(tmp / "usr-local-bin"), "CACHE": str(tmp / "cache"), "ROOT": str(tmp / "root"),
            "DAEMON_JSON": str(tmp / "docker/daemon.json"), "SYSPCI": str(tmp / "pci"),
            "IOMMU_GROUPS": str(tmp / "iommu_groups"), **env}


def _sandbox_stubs(tmp: Path) -> tuple[Path, Path]:
    """:func:`_stubs` with the real ``curl`` and ``tar`` (the release files are served on 127.0.0.1) and a
    logging ``systemctl``."""
    bindir, log = _stubs(tmp)
    (bindir / "curl").unlink()
    (bindir / "tar").unlink()
    (bindir / "systemctl").write_text(f'#!/bin/bash\necho "systemctl $*" >> {log}\nexit 0\n')
    (bindir / "systemctl").chmod(0o755)
    return bindir, log


def _changed(res: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in res.stdout.splitlines() if line.startswith("changed:")]


def test_gvisor_runsc_is_installed_checked_and_registered_with_docker_once(tmp_path: Path, releases) -> None:
    root, url = releases
    s, script, wrapper = _sandbox("gvisor", tmp_path)
    assert wrapper.rstrip().endswith(f"exec {SANDBOX_SCRIPT} --docker"), "Ubuntu EC2 nodes run Docker"
    sb = s.sandbox
    rel = root / sb.gvisor_release / os.uname().machine
    rel.mkdir(parents=True)
    for f in ("runsc", "containerd-shim-runsc-v1"):
        (rel / f).write_text(f"#!/bin/sh\necho {f} stand-in\n")
        digest = hashlib.sha512((rel / f).read_bytes()).hexdigest()
        (rel / f"{f}.sha512").write_text(f"{digest}  {f}\n")
    assert f"GVISOR_URL={sb.gvisor_release_url}" in script
    script = script.replace(f"GVISOR_URL={sb.gvisor_release_url}", f"GVISOR_URL={url}")
    bindir, log = _sandbox_stubs(tmp_path)
    (tmp_path / "usr-local-bin").mkdir()
    env = _sandbox_env(tmp_path, bindir)
    # the catalog pins no SHA-512 for this release: the script refuses to install (fail closed), naming the key
    assert "GVISOR_SHA512=''" in script
    unpinned = subprocess.run([BASH, "-c", script, "clusterforge-sandbox-runtime"], capture_output=True, text=True,
                              env={"PATH": f"{bindir}:/usr/bin:/bin", **env}, check=False)
    assert unpinned.returncode == 1 and "bare_metal.gvisor.sha512" in unpinned.stderr, unpinned.stderr
    assert not (tmp_path / "usr-local-bin" / "runsc").exists()
    # pinned as the catalog would pin them (here: the stand-ins' digests)
    pins = " ".join(f"{rel.name}/{f}={hashlib.sha512((rel / f).read_bytes()).hexdigest()}"
                    for f in ("runsc", "containerd-shim-runsc-v1"))
    script = script.replace("GVISOR_SHA512=''", f"GVISOR_SHA512='{pins}'")
    res = subprocess.run([BASH, "-c", script, "clusterforge-sandbox-runtime", "--docker"], capture_output=True,
                         text=True, env={"PATH": f"{bindir}:/usr/bin:/bin", **env}, check=False)
    assert res.returncode == 0, res.stderr
    assert len(_changed(res)) == 3, res.stdout  # two binaries, one Docker runtime
    for f in ("runsc", "containerd-shim-runsc-v1"):
        installed = tmp_path / "usr-local-bin" / f
        assert installed.read_bytes() == (rel / f).read_bytes() and installed.stat().st_mode & 0o777 == 0o755
    daemon = json.loads((tmp_path / "docker/daemon.json").read_text())
    assert daemon["runtimes"]["runsc"] == {"path": f"{tmp_path}/usr-local-bin/runsc", "runtimeArgs": ["--nvproxy=true"]}
    assert "systemctl restart docker" in log.read_text()
    again = subprocess.run([BASH, "-c", script, "clusterforge-sandbox-runtime", "--docker"], capture_output=True,
                           text=True, env={"PATH": f"{bindir}:/usr/bin:/bin", **env}, check=False)
    assert again.returncode == 0 and _changed(again) == [], again.stdout
    # a release file that does not match its pinned SHA-512 is never installed, even with a matching .sha512
    # beside it (same origin as the binary: it proves nothing)
    (rel / "runsc").write_text("#!/bin/sh\necho tampered\n")
    (rel / "runsc.sha512").write_text(f"{hashlib.sha512((rel / 'runsc').read_bytes()).hexdigest()}  runsc\n")
    (tmp_path / "usr-local-bin" / "runsc").unlink()
    bad = subprocess.run([BASH, "-c", script, "clusterforge-sandbox-runtime"], capture_output=True, text=True,
                         env={"PATH": f"{bindir}:/usr/bin:/bin", **env}, check=False)
    assert bad.returncode == 1 and "does not match its pinned SHA-512" in bad.stderr
    assert not (tmp_path / "usr-local-bin" / "runsc").exists()


@pytest.mark.parametrize("platform", ["ubuntu", "al2023"])
def test_kata_release_is_unpacked_linked_and_registered_once(tmp_path: Path, releases, platform: str) -> None:
    if shutil.which("zstd") is None:
        pytest.fail("zstd is required (the Kata release is a .tar.zst)")
    root, url = releases
    s, script, wrapper = _sandbox("kata", tmp_path, platform=platform)
    docker = platform == "ubuntu"
    assert wrapper.rstrip().endswith(f"exec {SANDBOX_SCRIPT}" + (" --docker" if docker else ""))
    sb = s.sandbox
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=False).stdout.strip() or "amd64"
    name = kata_tarball(sb.kata_version, arch)
    tree = tmp_path / "tree"
    shim = tree / "opt/kata/bin/containerd-shim-kata-v2"
    shim.parent.mkdir(parents=True)
    shim.write_text(f"#!/bin/sh\necho kata {sb.kata_version}\n")
    shim.chmod(0o755)
    (root / sb.kata_version).mkdir()
    subprocess.run(["tar", "--zstd", "-cf", str(root / sb.kata_version / name), "-C", str(tree), "opt"], check=True)
    script = script.replace(f"KATA_URL={sb.kata_release_url}", f"KATA_URL={url}")
    bindir, _ = _sandbox_stubs(tmp_path)
    (tmp_path / "root").mkdir()
    env = {"PATH": f"{bindir}:/usr/bin:/bin", **_sandbox_env(tmp_path, bindir)}
    args = ["--docker"] if docker else []
    # the script carries the catalog's SHA-256 pins: the stand-in (not Kata's real file) is refused, nothing unpacked
    pinned = f"KATA_SHA256={shlex.quote(pins_word(kata_sha256(sb.kata_version)))}"
    assert pinned in script and len(kata_sha256(sb.kata_version)) == 2
    bad = subprocess.run([BASH, "-c", script, "x", *args], capture_output=True, text=True, env=env, check=False)
    assert bad.returncode == 1 and "does not match its pinned SHA-256" in bad.stderr, bad.stderr
    assert not (tmp_path / "cache" / name).exists() and not (tmp_path / "root/opt").exists()
    # pinned as the catalog would pin the stand-in
    digest = hashlib.sha256((root / sb.kata_version / name).read_bytes()).hexdigest()
    script = script.replace(pinned, f"KATA_SHA256={arch}={digest}")
    # no IOMMU groups (the first boot, before the reboot into the IOMMU command line): nothing is rebound
    res = subprocess.run([BASH, "-c", script, "x", *args], capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "cache" / name).is_file() and (tmp_path / "root/opt/kata/bin/containerd-shim-kata-v2").is_file()
    handler = sb.runtime_class or "kata-qemu-nvidia-gpu"
    for link in {"containerd-shim-kata-v2", f"containerd-shim-{handler}-v2"}:
        assert os.readlink(tmp_path / "usr-local-bin" / link) == "/opt/kata/bin/containerd-shim-kata-v2"
    daemon = tmp_path / "docker/daemon.json"
    assert daemon.exists() == docker
    if docker:
        assert json.loads(daemon.read_text())["runtimes"]["kata"] == {"runtimeType": "io.containerd.kata.v2"}
    if sb.gpu_passthrough:
        assert "IOMMU is off" in res.stderr
    again = subprocess.run([BASH, "-c", script, "x", *args], capture_output=True, text=True, env=env, check=False)
    assert again.returncode == 0 and _changed(again) == [], again.stdout


def _pci(tmp: Path, devices: dict[str, tuple[str, str, str]]) -> None:
    for bdf, (vendor, device, cls) in devices.items():
        d = tmp / "pci" / bdf
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text(device + "\n")
        (d / "class").write_text(cls + "\n")


PCI = {
    "0000:18:00.0": ("0x10de", "0x2330", "0x030200"),  # H100 SXM
    "0000:2a:00.0": ("0x10de", "0x2330", "0x030200"),
    "0000:05:00.0": ("0x10de", "0x22a3", "0x068000"),  # NVSwitch
    "0000:19:00.0": ("0x15b3", "0x1021", "0x020700"),  # ConnectX-7
    "0000:00:02.0": ("0x1234", "0x1111", "0x030000"),  # another vendor's VGA
}


@pytest.mark.parametrize("plan", ["full-passthrough", "shared-nvswitch"])
def test_passthrough_devices_are_found_and_bound_once_after_the_iommu_reboot(tmp_path: Path, plan: str) -> None:
    s, script, _ = _sandbox("kata", tmp_path, {"sandbox": {"runtime": "kata", "gpu_passthrough": True,
                                                                 "nvswitch": plan}})
    assert s.sandbox.gpu_passthrough
    assert "/var/lib/cloud/scripts/per-boot/20-clusterforge-sandbox.sh" in _paths(s, "ubuntu"), "bound at every boot"
    _pci(tmp_path, PCI)
    bindir, log = _sandbox_stubs(tmp_path)
    (bindir / "driverctl").write_text(
        f'#!/bin/bash\necho "driverctl $*" >> {log}\n[ "$1" = list-overrides ] && cat {tmp_path}/overrides 2>/dev/null\n'
        f'[ "$1" = set-override ] && echo "$2 $3" >> {tmp_path}/overrides\nexit 0\n')
    (bindir / "driverctl").chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", **_sandbox_env(tmp_path, bindir)}
    listed = subprocess.run([BASH, "-c", script, "x", "--list-devices"], capture_output=True, text=True, env=env, check=True)
    want = ["0000:18:00.0 10de:2330", "0000:2a:00.0 10de:2330"] + (["0000:05:00.0 10de:22a3"] if plan == "full-passthrough" else [])
    assert sorted(listed.stdout.split("\n")[:-1]) == sorted(want)
    (tmp_path / "iommu_groups" / "7").mkdir(parents=True)
    tail = script.replace('if [ "$VENDOR" = 1 ]; then', 'if false; then')  # the release install is tested above
    res = subprocess.run([BASH, "-c", tail, "x"], capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0, res.stderr
    bound = sorted(line.split()[-2] for line in log.read_text().splitlines() if line.startswith("driverctl set-override"))
    assert bound == sorted(w.split()[0] for w in want)
    again = subprocess.run([BASH, "-c", tail, "x"], capture_output=True, text=True, env=env, check=False)
    assert again.returncode == 0 and not [c for c in _changed(again) if "vfio-pci" in c], again.stdout


# --- Lustre client: the lustre_client role's install script with Amazon's source ---------------------

def test_fsx_client_comes_from_amazons_repository_for_the_running_kernel(tmp_path: Path, releases) -> None:
    """Ubuntu: the FSx repository's key and a deb822 entry for the node's codename, then the client modules
    built for the running kernel; a second run (packages installed) changes nothing."""
    root, url = releases
    s = _settings("aws-p5-efa-lustre", "gpu")
    fsx = catalog().aws["fsx_client"]["apt"]
    script = _script(s, "/usr/local/sbin/clusterforge-lustre-client-install")
    key = "-----BEGIN PGP PUBLIC KEY BLOCK-----\nstand-in\n-----END PGP PUBLIC KEY BLOCK-----\n"
    (root / "fsx-ubuntu-public-key.asc").write_text(key)
    assert f"KEY_URL={fsx['key_url']}" in script
    script = script.replace(f"KEY_URL={fsx['key_url']}", f"KEY_URL={url}/fsx-ubuntu-public-key.asc")
    bindir, log = _sandbox_stubs(tmp_path)
    installed = tmp_path / "installed"
    (bindir / "dpkg-query").write_text(f'#!/bin/bash\ngrep -qx "${{@: -1}}" {installed} 2>/dev/null && echo -n "install ok installed" || exit 1\n')
    (bindir / "apt-get").write_text(f'#!/bin/bash\necho "apt-get $*" >> {log}\n[ "$1" = install ] && for p in "$@"; do echo "$p" >> {installed}; done\nexit 0\n')
    for f in ("dpkg-query", "apt-get"):
        (bindir / f).chmod(0o755)
    (tmp_path / "os-release").write_text("ID=ubuntu\nVERSION_CODENAME=jammy\n")
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "KEYRING": str(tmp_path / "keyrings/lustre-client.asc"),
           "SOURCES": str(tmp_path / "sources/lustre-client.sources"), "OS_RELEASE": str(tmp_path / "os-release")}
    res = subprocess.run([BASH, "-c", script, "x"], capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0, res.stderr
    kernel = os.uname().release
    assert (tmp_path / "keyrings/lustre-client.asc").read_text() == key
    entry = _keyvals_colon((tmp_path / "sources/lustre-client.sources").read_text())
    assert entry == {"Types": "deb", "URIs": fsx["repo_url"], "Suites": "jammy", "Components": "main",
                     "Signed-By": str(tmp_path / "keyrings/lustre-client.asc")}
    calls = log.read_text().splitlines()
    assert calls[0].startswith("apt-get update"), "a new repository is indexed before the install"
    assert calls[1].endswith(f" lustre-client-modules-{kernel}") and calls[1].startswith("apt-get install")
    again = subprocess.run([BASH, "-c", script, "x"], capture_output=True, text=True, env=env, check=False)
    assert again.returncode == 0 and _changed(again) == [], again.stdout
    assert len(log.read_text().splitlines()) == 2, "nothing is installed or indexed again"


def test_al2023_installs_amazon_linuxs_lustre_client_with_dnf(tmp_path: Path) -> None:
    s = _settings("aws-eks-p4d", "gpu")
    if not s.lustre:
        pytest.fail("the EKS example declares an FSx file system")
    script = _script(s, "/usr/local/sbin/clusterforge-lustre-client-install", platform="al2023")
    bindir, log = _stubs(tmp_path)
    (bindir / "apt-get").unlink()
    (bindir / "rpm").write_text("#!/bin/bash\nexit 1\n")
    (bindir / "rpm").chmod(0o755)
    shim = tmp_path / "nobin"  # no apt-get anywhere on PATH: the dnf branch
    shim.mkdir()
    for tool in ("bash", "cat", "grep", "uname", "mktemp", "rm", "cmp", "ls"):
        if (p := shutil.which(tool)) is not None:
            (shim / tool).symlink_to(p)
    res = subprocess.run([BASH, "-c", script, "x"], capture_output=True, text=True,
                         env={"PATH": f"{bindir}:{shim}"}, check=False)
    assert res.returncode == 0, res.stderr
    assert "dnf install -y -q lustre-client" in log.read_text()
    assert _changed(res) == ["changed: installed lustre-client"]


def _keyvals_colon(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in text.splitlines() if ln and not ln.startswith("#"))}
