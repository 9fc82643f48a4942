"""What nodes download and run as root is checked against pins in the catalog (issue 33, part 4).

The EFA installer step of the cloud user data really runs here against a stand-in of
efa-installer.amazonaws.com served on 127.0.0.1: a tarball signed with a key made for the test, its
detached signature and the public key, as AWS publishes them. The user data carries only the check
that applies (it is limited to 16 KB): for a version whose SHA-256 the catalog pins, that digest (from a
trusted source, so sufficient); for any other version, AWS's signature by the key whose fingerprint
the catalog pins. The script is pointed at the stand-in and given the stand-in's digest or key
fingerprint as the catalog pins AWS's; each broken link (a digest that differs, a tampered tarball,
another key, a signature by another key) must stop it before the installer runs."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import shutil
import socketserver
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from blueprints import load_blueprint
from blueprints.catalog import catalog
from blueprints.settings import node_settings
from blueprints.vendor import efa_installer_pins, kata_sha256, mpi_operator_manifest_ref
from stacks.cloud_init import render_cloud_config
from stacks.render import placeholder_endpoints

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "blueprints" / "examples"
BASH = shutil.which("bash") or "/bin/bash"
EFA = "/usr/local/sbin/clusterforge-efa.sh"


UNPINNED = "1.99.0"
"""An EFA installer version the catalog pins no SHA-256 for (the signature path)."""


def _efa_script(tmp: Path, version: str = "1.34.0") -> str:
    s = node_settings(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "gpu")
    s = s.model_copy(update={"efa_installer": version})
    doc = YAML(typ="safe", pure=True).load(render_cloud_config(s, placeholder_endpoints(s), platform="ubuntu"))  # type: ignore[arg-type]
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    return files[EFA].replace("/opt/amazon/ofi-nccl", str(tmp / "opt/amazon/ofi-nccl"))


def test_user_data_pins_the_installers_sha256_or_else_the_efa_key_fingerprint(tmp_path: Path) -> None:
    # a version with a pinned digest: the digest alone, checked before the installer runs
    script = _efa_script(tmp_path)
    pins = efa_installer_pins("1.34.0")
    assert pins.sha256 is not None and len(pins.sha256) == 64
    assert f"echo '{pins.sha256}  i.tgz' | sha256sum -c" in script
    assert "gpg" not in script and "VALIDSIG" not in script, "only the check that applies is in the user data"
    assert "cd /tmp" not in script and "mktemp -d" in script, "unpacked in a private mktemp -d directory"
    assert script.index("sha256sum -c") < script.index("efa_installer.sh")
    # a version with none: AWS's signature, by the key whose fingerprint the catalog pins
    unpinned = _efa_script(tmp_path, UNPINNED)
    pins = efa_installer_pins(UNPINNED)
    assert pins.sha256 is None
    assert pins.key_fingerprint == "4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC"  # AWS's documented fingerprint
    assert f"F={pins.key_fingerprint}" in unpinned and "gpg --batch" in unpinned and "VALIDSIG" in unpinned
    assert "sha256sum" not in unpinned
    assert unpinned.index("VALIDSIG") < unpinned.index("efa_installer.sh")


def _signer(home: Path, name: str) -> str:
    """A signing key made for the test in GNUPGHOME ``home``; returns its fingerprint."""
    home.chmod(0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", f"{name} <efa@example.invalid>",
                    "ed25519", "sign", "never"], env=env, check=True, capture_output=True)
    out = subprocess.run(["gpg", "--batch", "--with-colons", "--list-keys"], env=env, check=True, capture_output=True,
                         text=True).stdout
    return next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))


@pytest.fixture(scope="module")
def efa_origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str, str]]:
    """``(root, url, fingerprint, gnupghome)``: a signed stand-in installer served on 127.0.0.1."""
    if shutil.which("gpg") is None:
        pytest.fail("gpg is required (the EFA installer's signature is checked with it)")
    root = tmp_path_factory.mktemp("efa-origin")
    home = tmp_path_factory.mktemp("signer")
    yield root, "", _signer(home, "EFA stand-in"), str(home)


def _publish(root: Path, home: str, version: str, body: str, key_home: str | None = None) -> str:
    """Write the stand-in installer tarball, its signature (by the key in ``home``) and the public key (of
    ``key_home``, by default the signer's); returns the tarball's SHA-256."""
    stage = root / ".stage" / "aws-efa-installer"
    stage.mkdir(parents=True, exist_ok=True)
    inst = stage / "efa_installer.sh"
    inst.write_text(body)
    inst.chmod(0o755)
    tar = root / f"aws-efa-installer-{version}.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        t.add(stage, arcname="aws-efa-installer")
    env = {**os.environ, "GNUPGHOME": home}
    sig = root / f"{tar.name}.sig"
    sig.unlink(missing_ok=True)
    subprocess.run(["gpg", "--batch", "--detach-sign", "-o", str(sig), str(tar)], env=env, check=True, capture_output=True)
    key = subprocess.run(["gpg", "--batch", "--armor", "--export"], env={**os.environ, "GNUPGHOME": key_home or home},
                         check=True, capture_output=True).stdout
    (root / "aws-efa-installer.key").write_bytes(key)
    return hashlib.sha256(tar.read_bytes()).hexdigest()


@pytest.fixture()
def served(efa_origin) -> Iterator[tuple[Path, str, str, str]]:
    root, _, fpr, home = efa_origin
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined, method-assign]
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield root, f"http://127.0.0.1:{srv.server_address[1]}", fpr, home
    finally:
        srv.shutdown()
        srv.server_close()


def _run(script: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    for cmd in ("modinfo", "ldconfig"):
        (bindir / cmd).write_text("#!/bin/sh\nexit 1\n" if cmd == "modinfo" else "#!/bin/sh\nexit 0\n")
        (bindir / cmd).chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp), "TMPDIR": str(tmp), "RECORD": str(tmp / "none"),
           "LDCONF": str(tmp / "ofi.conf"), "MARKER": str(tmp / "installer-ran"),
           "PLUGIN_OUT": str(tmp / "opt/amazon/ofi-nccl/lib")}
    return subprocess.run([BASH, "-c", script], capture_output=True, text=True, env=env, check=False, cwd=tmp)


INSTALLER = ('#!/bin/sh\ntouch "$MARKER"\nmkdir -p "$PLUGIN_OUT" && touch "$PLUGIN_OUT/libnccl-net-ofi.so"\n')


def _pointed(script: str, url: str, *, sha: str | None = None, fpr: str | None = None) -> str:
    """The user data's EFA script pointed at the stand-in origin, with the stand-in's digest or key fingerprint in
    place of the catalog's pins for AWS's files."""
    out = script.replace("https://efa-installer.amazonaws.com", url)
    if sha is not None:
        pinned = efa_installer_pins("1.34.0").sha256
        assert pinned is not None and f"echo '{pinned}  i.tgz'" in out
        out = out.replace(pinned, sha)
    if fpr is not None:
        pinned = efa_installer_pins(UNPINNED).key_fingerprint
        assert f"F={pinned};" in out
        out = out.replace(f"F={pinned};", f"F={fpr};")
    return out


def _tamper(tar: Path, tmp: Path) -> None:
    """Replace the served tarball by another one with the same installer (its signature and pin no longer match)."""
    evil = tmp / "evil" / "aws-efa-installer"
    evil.mkdir(parents=True, exist_ok=True)
    (evil / "efa_installer.sh").write_text(INSTALLER + "echo tampered\n")
    (evil / "efa_installer.sh").chmod(0o755)
    with tarfile.open(tar, "w:gz") as t:
        t.add(evil, arcname="aws-efa-installer")


def test_pinned_efa_installer_runs_only_with_its_pinned_digest(served, tmp_path: Path) -> None:
    root, url, _, home = served
    sha = _publish(root, home, "1.34.0", INSTALLER)
    base = _efa_script(tmp_path)
    # the file as pinned: the installer runs, and its download directory is gone afterwards
    ok = _run(_pointed(base, url, sha=sha), tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "installer-ran").exists()
    assert not list(tmp_path.glob("clusterforge-efa.*"))
    (tmp_path / "installer-ran").unlink()
    # a digest that differs from the catalog's pin
    wrong = _run(_pointed(base, url, sha="f" * 64), tmp_path)
    assert wrong.returncode == 1 and "does not match its pinned SHA-256" in wrong.stderr, wrong.stderr
    assert "aws.efa_software.installer_sha256.1.34.0" in wrong.stderr and not (tmp_path / "installer-ran").exists()
    # a tarball changed after it was pinned (its signature and key still served beside it)
    _tamper(root / "aws-efa-installer-1.34.0.tar.gz", tmp_path)
    tampered = _run(_pointed(base, url, sha=sha), tmp_path)
    assert tampered.returncode == 1 and "does not match its pinned SHA-256" in tampered.stderr, tampered.stderr
    assert not (tmp_path / "installer-ran").exists() and not list(tmp_path.glob("clusterforge-efa.*"))


def test_unpinned_efa_installer_runs_only_when_signed_by_the_pinned_key(served, tmp_path: Path,
                                                                         tmp_path_factory: pytest.TempPathFactory) -> None:
    root, url, fpr, home = served
    _publish(root, home, UNPINNED, INSTALLER)
    base = _efa_script(tmp_path, UNPINNED)
    # signed by the key whose fingerprint is pinned: the installer runs
    ok = _run(_pointed(base, url, fpr=fpr), tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "installer-ran").exists() and not list(tmp_path.glob("clusterforge-efa.*"))
    (tmp_path / "installer-ran").unlink()
    # the key served is not the pinned one (AWS's fingerprint in the catalog): refused before anything runs
    other = _run(_pointed(base, url, fpr="0" * 40), tmp_path)
    assert other.returncode == 1 and "is not AWS's EFA installer key" in other.stderr, other.stderr
    assert "aws.efa_software.installer_key_fingerprint" in other.stderr
    assert not (tmp_path / "installer-ran").exists()
    # another key signs and is served in place of the pinned one (a compromised origin): refused
    mallory = tmp_path_factory.mktemp("mallory")
    mallory_fpr = _signer(mallory, "Mallory")
    _publish(root, str(mallory), UNPINNED, INSTALLER)
    swapped = _run(_pointed(base, url, fpr=fpr), tmp_path)
    assert swapped.returncode == 1 and f"({mallory_fpr}; pinned {fpr}" in swapped.stderr, swapped.stderr
    assert not (tmp_path / "installer-ran").exists()
    # the pinned key served, but the signature is another key's: refused
    _publish(root, str(mallory), UNPINNED, INSTALLER, key_home=home)
    forged = _run(_pointed(base, url, fpr=fpr), tmp_path)
    assert forged.returncode == 1 and "valid signature" in forged.stderr, forged.stderr
    assert not (tmp_path / "installer-ran").exists()
    # the pinned key's signature, over a tarball changed after it was signed: refused
    _publish(root, home, UNPINNED, INSTALLER)
    _tamper(root / f"aws-efa-installer-{UNPINNED}.tar.gz", tmp_path)
    tampered = _run(_pointed(base, url, fpr=fpr), tmp_path)
    assert tampered.returncode == 1 and "valid signature" in tampered.stderr, tampered.stderr
    assert not (tmp_path / "installer-ran").exists() and not list(tmp_path.glob("clusterforge-efa.*"))


def test_catalog_pins_carry_their_sources() -> None:
    sw = catalog().aws["efa_software"]
    assert sw["field_sources"]["installer_key_fingerprint"].startswith("https://docs.aws.amazon.com/")
    for v in sw["installer_sha256"]:
        assert sw["field_sources"][f"installer_sha256_{v}"].startswith("https://github.com/aws/")
    kata = catalog().bare_metal["kata"]
    for v in kata["sha256"]:
        assert kata["field_sources"][f"sha256_{v}"].startswith("https://github.com/kata-containers/")
        assert set(kata_sha256(v)) == {"amd64", "arm64"} and all(len(h) == 64 for h in kata_sha256(v).values())


def test_mpi_operator_manifest_is_referenced_by_commit_not_tag() -> None:
    url, sha = mpi_operator_manifest_ref("v0.6.0")
    assert "/v0.6.0/" not in url and "/c983759cfa87fd32ed5711804021ea47eb8d712c/" in url and len(sha) == 64
    with pytest.raises(KeyError, match="kubernetes_addons.mpi_operator.releases.v9.9.9"):
        mpi_operator_manifest_ref("v9.9.9")
