"""What nodes download and run as root is checked against pins in the catalog (issue 33, part 4).

The EFA installer step of the cloud user data really runs here against a stand-in of
efa-installer.amazonaws.com served on 127.0.0.1: a tarball signed with a key made for the test, its
detached signature and the public key, as AWS publishes them. The script is pointed at the stand-in
and given the stand-in key's fingerprint and the tarball's SHA-256 as the catalog pins AWS's; each
broken link (another key, a tampered tarball, a digest that differs) must stop it before the installer
runs."""

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


def _efa_script(tmp: Path) -> str:
    s = node_settings(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "gpu")
    doc = YAML(typ="safe", pure=True).load(render_cloud_config(s, placeholder_endpoints(s), platform="ubuntu"))  # type: ignore[arg-type]
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    return files[EFA].replace("/opt/amazon/ofi-nccl", str(tmp / "opt/amazon/ofi-nccl"))


def test_user_data_pins_the_efa_key_fingerprint_and_the_installers_sha256(tmp_path: Path) -> None:
    script = _efa_script(tmp_path)
    pins = efa_installer_pins("1.34.0")
    assert pins.key_fingerprint == "4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC"  # AWS's documented fingerprint
    assert f"KEY_FPR={pins.key_fingerprint}" in script and f"SHA256={pins.sha256}" in script
    assert "gpg --batch" in script and "VALIDSIG" in script and "sha256sum -c" in script
    assert "cd /tmp" not in script, "the installer is unpacked in a private mktemp -d directory"
    # the verification comes before the installer runs
    assert script.index("sha256sum -c") < script.index("efa_installer.sh")
    assert script.index("VALIDSIG") < script.index("efa_installer.sh")


@pytest.fixture(scope="module")
def efa_origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str, str]]:
    """``(root, url, fingerprint, gnupghome)``: a signed stand-in installer served on 127.0.0.1."""
    if shutil.which("gpg") is None:
        pytest.fail("gpg is required (the EFA installer's signature is checked with it)")
    root = tmp_path_factory.mktemp("efa-origin")
    home = tmp_path_factory.mktemp("signer")
    home.chmod(0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "EFA stand-in <efa@example.invalid>",
                    "ed25519", "sign", "never"], env=env, check=True, capture_output=True)
    out = subprocess.run(["gpg", "--batch", "--with-colons", "--list-keys"], env=env, check=True, capture_output=True,
                         text=True).stdout
    fpr = next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))
    yield root, "", fpr, str(home)


def _publish(root: Path, home: str, version: str, body: str) -> str:
    """Write the stand-in installer tarball, its signature and the key; returns the tarball's SHA-256."""
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
    key = subprocess.run(["gpg", "--batch", "--armor", "--export"], env=env, check=True, capture_output=True).stdout
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


def _pointed(script: str, url: str, fpr: str, sha: str) -> str:
    pins = efa_installer_pins("1.34.0")
    assert pins.sha256 is not None
    return (script.replace("https://efa-installer.amazonaws.com", url)
            .replace(f"KEY_FPR={pins.key_fingerprint}", f"KEY_FPR={fpr}")
            .replace(f"SHA256={pins.sha256}", f"SHA256={sha}"))


def test_efa_installer_runs_only_when_signature_key_and_digest_all_check_out(served, tmp_path: Path) -> None:
    root, url, fpr, home = served
    sha = _publish(root, home, "1.34.0", INSTALLER)
    base = _efa_script(tmp_path)
    # everything as published: the installer runs, and its download directory is gone afterwards
    ok = _run(_pointed(base, url, fpr, sha), tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "installer-ran").exists()
    assert not list(tmp_path.glob("clusterforge-efa.*"))
    (tmp_path / "installer-ran").unlink()
    # the key served is not the pinned one (AWS's fingerprint in the catalog): refused before anything runs
    other = _run(_pointed(base, url, "0" * 40, sha), tmp_path)
    assert other.returncode == 1 and "is not AWS's EFA installer key" in other.stderr, other.stderr
    assert not (tmp_path / "installer-ran").exists()
    # a digest that differs from the catalog's pin
    wrong = _run(_pointed(base, url, fpr, "f" * 64), tmp_path)
    assert wrong.returncode == 1 and "does not match its pinned SHA-256" in wrong.stderr, wrong.stderr
    assert "aws.efa_software.installer_sha256" in wrong.stderr and not (tmp_path / "installer-ran").exists()
    # a tarball changed after it was signed (the digest pin updated to it: only the signature can catch it)
    tar = root / "aws-efa-installer-1.34.0.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        evil = tmp_path / "evil" / "aws-efa-installer"
        evil.mkdir(parents=True)
        (evil / "efa_installer.sh").write_text(INSTALLER)
        (evil / "efa_installer.sh").chmod(0o755)
        t.add(evil, arcname="aws-efa-installer")
    tampered = _run(_pointed(base, url, fpr, hashlib.sha256(tar.read_bytes()).hexdigest()), tmp_path)
    assert tampered.returncode == 1 and "valid signature" in tampered.stderr, tampered.stderr
    assert not (tmp_path / "installer-ran").exists()


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
