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
import itertools
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
from blueprints.role_templates import each_task
from blueprints.settings import node_settings
from blueprints.vendor import (
    CUDA_KEY_FINGERPRINTS,
    DOCA_KEY_FINGERPRINTS,
    FSX_KEY_FINGERPRINTS,
    TOOLKIT_KEY_FINGERPRINTS,
    apt_key_fingerprints,
    efa_installer_pins,
    kata_sha256,
    mpi_operator_manifest_ref,
)

from .conftest import node_file

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "blueprints" / "examples"
BASH = shutil.which("bash") or "/bin/bash"
EFA = "/usr/local/sbin/clusterforge-efa.sh"


UNPINNED = "1.99.0"
"""An EFA installer version the catalog pins no SHA-256 for (the signature path)."""


def _efa_script(tmp: Path, version: str = "1.34.0") -> str:
    s = node_settings(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "gpu")
    s = s.model_copy(update={"efa_installer": version})
    # the EC2 node's EFA script: one of its group's programs, fetched by the step runner (pinned in the user data)
    return node_file(s, EFA).replace("/opt/amazon/ofi-nccl", str(tmp / "opt/amazon/ofi-nccl"))


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


# --- APT signing keys: the roles trust a downloaded key only with the primary key fingerprints the catalog pins ----

KEY_ROLES = {
    "nvidia_driver": ("roles/nvidia_driver/tasks/install-Debian.yml", CUDA_KEY_FINGERPRINTS),
    "container_runtime": ("roles/container_runtime/tasks/install-Debian.yml", TOOLKIT_KEY_FINGERPRINTS),
    "rdma": ("roles/rdma/tasks/doca-ofed-Debian.yml", DOCA_KEY_FINGERPRINTS),
}
"""The roles that add a vendor APT repository, with their task file and the catalog key of the key's pin."""


PROGRAM = REPO / "roles/clusterforge_common/files/openpgp-fingerprints.py"
"""The one program that reads a key file's primary key fingerprints."""


def _fingerprint_scripts() -> dict[str, str]:
    """The Python each role (and the Lustre script) runs to read a key file's primary key fingerprints."""
    lookup = "lookup('ansible.builtin.file', role_path ~ '/../clusterforge_common/files/openpgp-fingerprints.py')"
    out = {}
    for role, (path, _) in KEY_ROLES.items():
        tasks = list(each_task(YAML(typ="safe", pure=True).load((REPO / path).read_text())))
        argv = next(t["ansible.builtin.command"]["argv"] for t in tasks
                    if str(t.get("name", "")).startswith("Read the primary key fingerprints"))
        assert argv[:2] == ["python3", "-c"] and argv[2] == "{{ " + lookup + " }}", role
        out[role] = PROGRAM.read_text()
    from blueprints.role_templates import render_role_template

    lustre = render_role_template("lustre_client", "lustre-client-install.sh.j2", {
        "lustre_client_apt_repo_url": "https://x.invalid/", "lustre_client_apt_repo_key_url": "https://x.invalid/k",
        "lustre_client_apt_repo_suite": "./", "lustre_client_apt_repo_components": [],
        "lustre_client_packages": ["lustre-client-utils"], "lustre_client_apt_repo_key_fingerprints": "AB"}, "Debian")
    out["lustre_client"] = lustre.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0] + "\n"
    return out


def _gpg_primary(path: Path) -> list[str]:
    out = subprocess.run(["gpg", "--batch", "--with-colons", "--show-keys", str(path)], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    return [b.split(":")[9] for a, b in itertools.pairwise(out) if a.startswith("pub:") and b.startswith("fpr:")]


@pytest.fixture(scope="module")
def key_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Public key files as vendors publish them: one armoured RSA key, one binary, two keys in one armoured file
    (RSA and Ed25519), each made for the test."""
    d = tmp_path_factory.mktemp("keys")
    homes = {}
    for name, algo in (("rsa", "rsa3072"), ("ed", "ed25519"), ("other", "rsa2048")):
        home = d / f"home-{name}"
        home.mkdir(mode=0o700)
        subprocess.run(["gpg", "--homedir", str(home), "--batch", "--passphrase", "", "--quick-gen-key",
                        f"{name} <{name}@example.invalid>", algo, "sign", "never"], check=True, capture_output=True)
        homes[name] = home

    def export(home: Path, *args: str) -> bytes:
        return subprocess.run(["gpg", "--homedir", str(home), "--batch", "--export", *args], check=True,
                              capture_output=True).stdout

    files = {"armoured": d / "rsa.asc", "binary": d / "rsa.gpg", "two": d / "two.asc", "other": d / "other.asc"}
    files["armoured"].write_bytes(export(homes["rsa"], "--armor"))
    files["binary"].write_bytes(export(homes["rsa"]))
    both = d / "both.gpg"
    both.write_bytes(export(homes["rsa"]) + export(homes["ed"]))
    files["two"].write_bytes(subprocess.run(["gpg", "--batch", "--enarmor"], input=both.read_bytes(), check=True,
                                            capture_output=True).stdout.replace(b"PGP ARMORED FILE", b"PGP PUBLIC KEY BLOCK"))
    files["other"].write_bytes(export(homes["other"], "--armor"))
    return files


def test_every_key_check_reads_the_primary_fingerprints_gpg_shows(key_files: dict[str, Path]) -> None:
    scripts = _fingerprint_scripts()
    assert len(set(scripts.values())) == 1, "the roles and the Lustre script read fingerprints with one program"
    script = scripts["nvidia_driver"]
    for name, path in key_files.items():
        want = _gpg_primary(path)
        assert want, name
        got = subprocess.run(["python3", "-c", script, str(path)], check=True, capture_output=True, text=True).stdout
        assert got.split() == want, name
    assert len(_gpg_primary(key_files["two"])) == 2
    junk = key_files["other"].with_name("junk")
    junk.write_text("<html>not found</html>\n")
    bad = subprocess.run(["python3", "-c", script, str(junk)], capture_output=True, text=True, check=False)
    assert bad.returncode != 0 and not bad.stdout, "a file that is no key is refused, never read as one"


def test_roles_trust_a_downloaded_key_only_after_checking_the_catalogs_fingerprints() -> None:
    for role, (path, catalog_key) in KEY_ROLES.items():
        tasks = list(each_task(YAML(typ="safe", pure=True).load((REPO / path).read_text())))
        names = [str(t.get("name", "")) for t in tasks]
        download = next(t for t in tasks if "ansible.builtin.get_url" in t)
        install = next(t for t in tasks if str(t.get("name", "")).startswith("Install the checked"))
        check = next(t for t in tasks if "ansible.builtin.assert" in t and "catalog's fingerprints" in str(t["name"]))
        # downloaded beside the keyring, checked, and only then copied to the file apt's Signed-By names
        assert download["ansible.builtin.get_url"]["dest"].endswith(".asc.download"), role
        assert install["ansible.builtin.copy"]["src"] == download["ansible.builtin.get_url"]["dest"], role
        assert names.index(check["name"]) < names.index(install["name"]), role
        assert catalog_key in check["ansible.builtin.assert"]["fail_msg"], role
        pin_var = f"{role}_" + {"nvidia_driver": "cuda_repo", "container_runtime": "nvidia_toolkit",
                                "rdma": "doca"}[role] + "_key_fingerprints"
        assert any(pin_var in c for c in check["ansible.builtin.assert"]["that"]), role


def test_catalog_pins_the_apt_keys_with_their_sources() -> None:
    cuda = catalog().bare_metal["nvidia_driver"]["cuda_repo"]
    assert apt_key_fingerprints(CUDA_KEY_FINGERPRINTS) == "EB693B3035CD5710E231E123A4B469963BF863CC"
    assert cuda["field_sources"]["key_fingerprints"].startswith("https://github.com/NVIDIA/")
    toolkit = catalog().bare_metal["container_toolkit"]
    assert apt_key_fingerprints(TOOLKIT_KEY_FINGERPRINTS) == "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
    assert toolkit["field_sources"]["key_fingerprints"].startswith("https://github.com/NVIDIA/")
    # no vendor-published value found yet: empty, so the key is installed unchecked (the catalog says so)
    assert apt_key_fingerprints(DOCA_KEY_FINGERPRINTS) == "" and apt_key_fingerprints(FSX_KEY_FINGERPRINTS) == ""
    # the node settings carry the pins the roles read: Amazon's FSx repository's on AWS, none for a site's repository
    aws = node_settings(load_blueprint(REPO / "blueprints/examples/aws-p5-efa-lustre.yaml").blueprint, "gpu")
    assert aws.lustre_client_repo is not None
    assert aws.lustre_client_repo.key_fingerprints == apt_key_fingerprints(FSX_KEY_FINGERPRINTS)
    dgx = node_settings(load_blueprint(REPO / "blueprints/examples/onprem-dgx-h100-ib.yaml").blueprint, "dgx")
    assert dgx.lustre_client_repo is not None and dgx.lustre_client_repo.key_fingerprints == "", "a site repository"
    assert dgx.gpu_packages is not None and dgx.gpu_packages.repo_key_fingerprints == apt_key_fingerprints(
        CUDA_KEY_FINGERPRINTS)
    assert dgx.container_toolkit_key_fingerprints == apt_key_fingerprints(TOOLKIT_KEY_FINGERPRINTS)


def _lustre_install(tmp: Path, key_url: str, pins: str) -> str:
    from blueprints.role_templates import render_role_template

    return render_role_template("lustre_client", "lustre-client-install.sh.j2", {
        "lustre_client_apt_repo_url": "https://lustre.example.invalid/ubuntu", "lustre_client_apt_repo_key_url": key_url,
        "lustre_client_apt_repo_suite": "jammy", "lustre_client_apt_repo_components": ["main"],
        "lustre_client_packages": ["lustre-client-utils"], "lustre_client_apt_repo_key_fingerprints": pins}, "Debian")


def test_lustre_client_script_trusts_only_a_pinned_key(tmp_path: Path, key_files: dict[str, Path]) -> None:
    # unpinned (a site repository; Amazon's while the catalog pins none): rendered without the check, as before
    assert "KEY_FPRS" not in _lustre_install(tmp_path, "file:///k.asc", "")
    pinned = _gpg_primary(key_files["armoured"])[0]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool, body in (("dpkg-query", 'echo -n "install ok installed"'), ("apt-get", "exit 0")):
        (bindir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bindir / tool).chmod(0o755)
    (tmp_path / "os-release").write_text("ID=ubuntu\nVERSION_CODENAME=jammy\n")
    keyring = tmp_path / "keyrings/lustre-client.asc"
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "KEYRING": str(keyring), "SOURCES": str(tmp_path / "lustre.sources"),
           "OS_RELEASE": str(tmp_path / "os-release")}

    def run(key: Path, pins: str) -> subprocess.CompletedProcess[str]:
        script = _lustre_install(tmp_path, f"file://{key}", pins)
        return subprocess.run([BASH, "-c", script, "x"], capture_output=True, text=True, env=env, check=False)

    # another key than the pinned one (a substituted file at the key URL): refused, nothing trusted or written
    other = run(key_files["other"], pinned.lower())
    assert other.returncode == 1 and "is not the key pinned for it" in other.stderr, other.stderr
    assert "aws.fsx_client.apt.key_fingerprints" in other.stderr and not keyring.exists()
    assert not (tmp_path / "lustre.sources").exists()
    # a file with the pinned key and one more: the unpinned one is refused
    two = run(key_files["two"], pinned)
    assert two.returncode == 1 and "is not the key pinned for it" in two.stderr, two.stderr
    assert not keyring.exists()
    # the pinned key: installed into the keyring
    ok = run(key_files["armoured"], pinned)
    assert ok.returncode == 0, ok.stderr
    assert keyring.read_bytes() == key_files["armoured"].read_bytes()


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")
def test_nvidia_driver_role_refuses_a_key_without_the_pinned_fingerprint(tmp_path: Path) -> None:
    """The real nvidia_driver role against the stand-in CUDA repository: pinned by another fingerprint than the
    stand-in key's, the converge fails at the check, naming the catalog key, and apt's keyring never gets the key;
    pinned by the stand-in key's own fingerprint (as the converge tests pin it), the key is installed."""
    from clusterforge.ansible.runner import chroot_connection, load_summary, run_site
    from clusterforge.blueprint_io import load_checked
    from tests.roles.conftest import copy_rootfs, dgx_variant, shape_as, vendor_mirror

    loaded = load_checked(dgx_variant(tmp_path, "dgx-default", "debian-12"))
    root = copy_rootfs(tmp_path / "root")
    shape_as(root, "debian-12")
    keyring = root / "etc/apt/keyrings/nvidia-cuda.asc"
    mirror = vendor_mirror()
    try:
        runs = {}
        for name, pin in (("other", "0" * 40), ("pinned", None)):
            extravars = {**mirror.extravars(), **({"nvidia_driver_cuda_repo_key_fingerprints": pin} if pin else {})}
            out = tmp_path / f"ansible-{name}"
            rc = run_site(loaded, out, tags=["nvidia_driver"], extravars=extravars,
                          connection_override=chroot_connection({"dgx-01": root}))
            runs[name] = (rc, load_summary(out), keyring.exists())
    finally:
        mirror.stop()
    rc, summary, trusted = runs["other"]
    assert rc != 0 and not trusted
    failed = [f for f in summary["failures"] if f["task"].startswith("Check the NVIDIA CUDA repository signing key")]
    assert failed and "catalog bare_metal.nvidia_driver.cuda_repo.key_fingerprints" in failed[0]["message"], summary["failures"]
    assert mirror.key_fingerprint() in failed[0]["message"]
    rc, summary, trusted = runs["pinned"]
    assert rc == 0 and trusted, summary["failures"]
