"""NVMe scratch never destroys data: a drive with any signature is refused, and nothing is written to it.

Each case is a drive image (a file inside a Debian root filesystem, reached as ``/dev/disk/by-id/nvme-<case>``)
carrying one real signature made by the tool that makes it on a server — ``mkfs.ext4``, ``sfdisk`` (GPT and
DOS partition tables), ``pvcreate`` (an inactive LVM physical volume, through a loop device),
``cryptsetup luksFormat`` — or, for an unassembled md RAID member, an md 1.2 superblock with its checksum
(``mdadm --create`` needs the md kernel driver). libblkid (``wipefs``) must see each signature before the
role runs. The nvme_scratch preflight then runs for real through the chroot connection; the run must stop
with a message naming the signature, and the drive's bytes must be unchanged.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from .conftest import copy_rootfs, role_failures

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection and loop devices need root")]

SIZE = 64 * 1024 * 1024


def _tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        pytest.fail(f"{name} is not installed: `apt-get install mdadm lvm2 cryptsetup-bin fdisk` (.ci/run installs them)")
    return path


def _run(*argv: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, **kw)


def _md_member(img: Path) -> None:
    """An md 1.2 superblock (4 KiB into the drive, checksum as the kernel computes it): an unassembled member."""
    max_dev = 2
    sb = bytearray(256 + 2 * max_dev)
    struct.pack_into("<IIII", sb, 0, 0xA92B4EFC, 1, 0, 0)
    sb[16:32] = uuid.uuid4().bytes
    sb[32:32 + 10] = b"any:data01"
    struct.pack_into("<QIIQIIIIQIIIIQQQQI", sb, 64, 1_700_000_000, 0, 0, (SIZE // 512) - 2048, 1024, 2, 0, 0,
                     0, 0, 0, 0, 0, 2048, (SIZE // 512) - 2048, 8, 0, 0)
    sb[168:184] = uuid.uuid4().bytes
    struct.pack_into("<Q", sb, 200, 1)  # events
    struct.pack_into("<I", sb, 220, max_dev)
    struct.pack_into("<HH", sb, 256, 0, 1)
    total = sum(struct.unpack_from(f"<{len(sb) // 4}I", sb))
    struct.pack_into("<I", sb, 216, (total & 0xFFFFFFFF) + (total >> 32) & 0xFFFFFFFF)
    with img.open("r+b") as f:
        f.seek(4096)
        f.write(sb)


def _loop(img: Path, *cmd: str) -> None:
    dev = _run(_tool("losetup"), "-f", "--show", str(img)).stdout.strip()
    try:
        _run(*[c.replace("{dev}", dev) for c in cmd])
    finally:
        _run(_tool("losetup"), "-d", dev)


def _sign(case: str, img: Path, tmp: Path) -> None:
    if case == "ext4":
        _run(_tool("mkfs.ext4"), "-q", "-F", str(img))
    elif case in ("gpt", "dos"):
        _run(_tool("sfdisk"), "-q", str(img), input=f"label: {case}\n,,L\n")
    elif case == "lvm-pv":
        _loop(img, _tool("pvcreate"), "-ff", "-y", "-q", "--config", "devices { use_devicesfile = 0 }", "{dev}")
    elif case == "luks":
        key = tmp / "key"
        key.write_bytes(os.urandom(32))
        _run(_tool("cryptsetup"), "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2",
             "--pbkdf-force-iterations", "1000", "--key-file", str(key), str(img))
    elif case == "md-member":
        _md_member(img)
    else:
        raise AssertionError(case)


SIGNATURES = {"ext4": "ext4", "gpt": "gpt", "dos": "dos", "lvm-pv": "LVM2_member", "luks": "crypto_LUKS",
              "md-member": "linux_raid_member"}


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory) -> Path:
    return copy_rootfs(tmp_path_factory.mktemp("nvme-safety") / "root")


def _drive(root: Path, name: str) -> tuple[str, Path]:
    img = root / "srv/drives" / f"{name}.img"
    img.parent.mkdir(parents=True, exist_ok=True)
    img.unlink(missing_ok=True)
    with img.open("wb") as f:
        f.truncate(SIZE)
    link = root / "dev/disk/by-id" / f"nvme-{name}"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(f"/srv/drives/{name}.img")
    return f"/dev/disk/by-id/nvme-{name}", img


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _play(root: Path, tmp: Path, **extravars: Any) -> list[str]:
    """Run the nvme_scratch preflight in ``root``; returns the failure messages."""
    return role_failures(root, tmp, "nvme_scratch", "nvme_scratch_preflight",
                         {"nvme_scratch_mount": "/scratch", **extravars})


@pytest.mark.parametrize("case", list(SIGNATURES))
def test_a_drive_with_a_signature_is_refused_and_left_untouched(rootfs, tmp_path, case):
    blank_path, blank = _drive(rootfs, "blank0")
    path, img = _drive(rootfs, case)
    _sign(case, img, tmp_path)
    found = _run(_tool("wipefs"), "--no-act", "--parsable", "--noheadings", str(img)).stdout
    assert SIGNATURES[case] in found, f"libblkid does not see the {case} signature: {found!r}"
    before = {img: _digest(img), blank: _digest(blank)}
    failures = _play(rootfs, tmp_path, nvme_scratch_devices=[blank_path, path], nvme_scratch_expected_drives=2)
    assert len(failures) == 1, failures
    assert failures[0].startswith("refusing to build the scratch array:") and f"{path}: " in failures[0]
    assert SIGNATURES[case] in failures[0] and "Nothing was written" in failures[0]
    assert blank_path not in failures[0]
    assert {p: _digest(p) for p in before} == before, "a drive was written to"


def test_blank_drives_pass_and_an_explicit_wipe_is_honoured(rootfs, tmp_path):
    paths, imgs = zip(*(_drive(rootfs, f"blank{i}") for i in range(2)), strict=True)
    before = [_digest(i) for i in imgs]
    assert _play(rootfs, tmp_path / "a", nvme_scratch_devices=list(paths), nvme_scratch_expected_drives=2) == []
    path, img = _drive(rootfs, "old-ext4")
    _sign("ext4", img, tmp_path)
    signed = _digest(img)
    # the blueprint says to wipe: the preflight lets the drive through (an image build still writes nothing)
    assert _play(rootfs, tmp_path / "b", nvme_scratch_devices=[path], nvme_scratch_expected_drives=1,
                 nvme_scratch_wipe_signatures=True) == []
    assert [_digest(i) for i in imgs] == before and _digest(img) == signed


def test_an_fstab_entry_for_another_device_is_kept(rootfs, tmp_path):
    path, _ = _drive(rootfs, "blank9")
    fstab = rootfs / "etc/fstab"
    original = fstab.read_text() if fstab.exists() else ""
    fstab.write_text(original + "/dev/md0 /scratch xfs defaults,nofail 0 0\n")
    try:
        written = fstab.read_text()
        failures = _play(rootfs, tmp_path, nvme_scratch_devices=[path], nvme_scratch_expected_drives=1)
        assert len(failures) == 1 and "/etc/fstab already mounts /dev/md0 on /scratch" in failures[0]
        assert fstab.read_text() == written
        # our own entry (the scratch array) is not a conflict
        fstab.write_text(original + "/dev/md/scratch /scratch xfs defaults,nofail 0 0\n")
        assert _play(rootfs, tmp_path / "own", nvme_scratch_devices=[path], nvme_scratch_expected_drives=1) == []
    finally:
        fstab.write_text(original)
