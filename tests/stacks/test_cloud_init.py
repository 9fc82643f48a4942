"""Cloud-init user data: rendered from the shared NodeSettings, valid cloud-config / MIME, shell
scripts that parse, instance-store discovery by model, and the EC2 size limit."""

from __future__ import annotations

import base64
import email
import gzip
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from blueprints import load_blueprint
from blueprints.catalog import catalog
from blueprints.role_templates import role_file
from blueprints.role_vars import node_role_vars
from blueprints.settings import node_settings
from stacks.cloud_init import (
    INSTANCE_STORE_MODEL,
    SANDBOX_SCRIPT,
    USER_DATA_LIMIT_BYTES,
    LustreEndpoint,
    cloud_role_vars,
    encode_user_data,
    placeholder_endpoints,
    render_cloud_config,
    render_user_data,
    scratch_script,
)
from stacks.node_status import NODE_COMMAND
from tests.conftest import EXAMPLES

from .conftest import AWS_EXAMPLES, variant_yaml

BASH = shutil.which("bash")


def cloud_config(text: str) -> dict:
    """The cloud-config as data, with ``gz+b64``-encoded files decoded the way cloud-init does."""
    assert text.startswith("#cloud-config\n")
    doc = YAML(typ="safe", pure=True).load(text)
    for f in doc.get("write_files", []):
        if f.get("encoding") == "gz+b64":
            f["content"] = gzip.decompress(base64.b64decode(f.pop("encoding") and f["content"])).decode()
    return doc


def mime_cloud_config(text: str) -> str:
    """The cloud-config part of an EKS MIME document, decoded the way cloud-init does (a part of type
    ``application/x-gzip`` is base64-decoded and decompressed)."""
    part = email.message_from_string(text).get_payload()[-1]
    if part.get_content_type() == "application/x-gzip":
        return gzip.decompress(part.get_payload(decode=True)).decode()
    assert part.get_content_type() == "text/cloud-config"
    return part.get_payload()


def settings_of(example: str, group: str):
    bp = load_blueprint(EXAMPLES / f"{example}.yaml").blueprint
    return node_settings(bp, group)


def all_groups() -> list[tuple[str, str]]:
    out = []
    for ex in AWS_EXAMPLES:
        bp = load_blueprint(EXAMPLES / f"{ex}.yaml").blueprint
        out += [(ex, g.name) for g in bp.node_groups]
    return out


@pytest.mark.parametrize(("example", "group"), all_groups())
def test_user_data_is_the_shared_node_settings(example: str, group: str) -> None:
    s = settings_of(example, group)
    doc = cloud_config(render_cloud_config(s, placeholder_endpoints(s)))
    files = {f["path"]: f for f in doc["write_files"]}
    recorded = json.loads(files["/etc/clusterforge/node-settings.json"]["content"])
    # the shared NodeSettings, unset (None) values left out: EC2's 16 KiB (a p5 group with FSx, scratch and gVisor)
    assert recorded == json.loads(s.model_dump_json(exclude_none=True)), "user data must carry the shared NodeSettings"
    sysctl = files["/etc/sysctl.d/90-clusterforge.conf"]["content"]
    for k, v in s.sysctls.items():
        assert f"{k} = {v}\n" in sysctl
    nccl = files.get("/etc/nccl.conf", {}).get("content", "")
    exports = files.get("/etc/profile.d/clusterforge-nccl.sh", {}).get("content", "")
    for k, v in s.nccl_env.items():
        if k != "LD_LIBRARY_PATH":  # the linker reads it at process start only: environment, not nccl.conf
            assert f"{k}={v}\n" in nccl
        assert f"export {k}={shlex.quote(v)}" in exports, f"{k} not in the node environment"
    assert ("/var/lib/cloud/scripts/per-boot/10-clusterforge-scratch.sh" in files) == (s.scratch is not None)
    assert ("/usr/local/sbin/clusterforge-lustre.sh" in files) == bool(s.lustre)
    assert doc["runcmd"][0] == f"{NODE_COMMAND} step sysctl sysctl --system", "each step reports to the node's status"


@pytest.mark.parametrize(("example", "group"), all_groups())
def test_every_embedded_script_parses(example: str, group: str, tmp_path: Path) -> None:
    if BASH is None:
        pytest.fail("bash is required")
    s = settings_of(example, group)
    doc = cloud_config(render_cloud_config(s, placeholder_endpoints(s)))
    scripts = [f for f in doc["write_files"] if f["content"].startswith("#!/bin/bash")]
    assert scripts, "no scripts rendered"
    for f in scripts:
        path = tmp_path / Path(f["path"]).name
        path.write_text(f["content"])
        res = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True, check=False)
        assert res.returncode == 0, f"{f['path']}: {res.stderr}"
        assert f["permissions"] == "0755"


def test_instance_store_discovery_by_model_not_by_name(tmp_path: Path) -> None:
    """The scratch script's discover() finds instance-store drives by their NVMe model (by-id links,
    then the sysfs controller model), skips partitions and EBS volumes."""
    dev, byid, sysblock = tmp_path / "dev", tmp_path / "by-id", tmp_path / "block"
    for d in (dev, byid, sysblock):
        d.mkdir()
    for name in ("nvme0n1", "nvme1n1", "nvme1n1p1", "nvme3n1"):
        (dev / name).touch()
    links = {
        "nvme-Amazon_EC2_NVMe_Instance_Storage_AWS1F2A": "nvme1n1",
        "nvme-Amazon_EC2_NVMe_Instance_Storage_AWS1F2A_1": "nvme1n1",
        "nvme-Amazon_EC2_NVMe_Instance_Storage_AWS1F2A-part1": "nvme1n1p1",
        "nvme-Amazon_EC2_NVMe_Instance_Storage_AWS9B7C": "nvme3n1",
        "nvme-Amazon_Elastic_Block_Store_vol0123456789": "nvme0n1",
    }
    for link, target in links.items():
        (byid / link).symlink_to(dev / target)
    for name, model in (("nvme0n1", "Amazon Elastic Block Store"), ("nvme2n1", "Amazon EC2 NVMe Instance Storage")):
        (sysblock / name / "device").mkdir(parents=True)
        (sysblock / name / "device" / "model").write_text(model.ljust(40) + "\n")
    s = settings_of("aws-p5-efa-lustre", "gpu")
    assert s.scratch is not None
    script = _role_script(s)
    func = re.search(r"^discover\(\) \{.*?^\}$", script, re.DOTALL | re.MULTILINE)
    assert func, "discover() not found"
    prog = (f"DISCOVERY=instance-store; INSTANCE_STORE_MODEL={shlex.quote(INSTANCE_STORE_MODEL)}; BYID={byid}; "
            f"SYSBLOCK={sysblock}\n{func.group(0)}\ndiscover | sort -u\n")
    res = subprocess.run([BASH or "bash", "-c", prog], capture_output=True, text=True, check=True)
    assert res.stdout.split() == sorted([str(dev / "nvme1n1"), str(dev / "nvme3n1"), "/dev/nvme2n1"])


def _role_script(s) -> str:
    doc = cloud_config(render_cloud_config(s, placeholder_endpoints(s)))
    return next(f["content"] for f in doc["write_files"] if f["path"] == "/usr/local/sbin/clusterforge-nvme-scratch")


def test_scratch_script_settings_come_from_the_blueprint() -> None:
    s = settings_of("aws-p5-efa-lustre", "gpu")
    assert s.scratch is not None
    script = _role_script(s)
    assert "MOUNT=/scratch; FS=xfs; RAID=raid0\nCHUNK=512; OPTS=defaults,noatime,nofail; MODE=1777\n" in script
    assert "MD=/dev/md/scratch; MD_NAME=scratch; EXPECTED=8\n" in script, "p5.48xlarge has 8 instance-store drives (catalog)"
    assert "DISCOVERY=instance-store; WIPE=0\n" in script and f"INSTANCE_STORE_MODEL='{INSTANCE_STORE_MODEL}'" in script
    assert "MKFS=(mkfs.xfs -q -K)" in script, "instance store is trimmed at launch: no discard pass"
    assert 'exec "$SCRIPT" --require' in scratch_script(s.scratch), "the per-boot script runs the role's script"


def test_eks_user_data_is_mime_multipart_with_cloud_config_and_nodeconfig(tmp_path: Path) -> None:
    path = tmp_path / "bp.yaml"
    path.write_text(variant_yaml("aws-eks-p4d", {"node_groups": [
        {"name": "gpu", "role": "compute", "count": 1, "instance_type": "p4d.24xlarge", "sandbox": "gvisor"}]}))
    bp = load_blueprint(path).blueprint
    s = node_settings(bp, "gpu")
    text = render_user_data(s, {"datasets": LustreEndpoint("fs-1.fsx.us-west-2.amazonaws.com", "abcd1234")}, eks=True)
    msg = email.message_from_string(text)
    assert msg.is_multipart()
    parts = {p.get_content_type(): p.get_payload() for p in msg.get_payload()}
    # the cloud-config part travels gzip'd when the text would pass the 16 KB limit (gVisor's runtime script)
    assert set(parts) in ({"application/node.eks.aws", "text/cloud-config"}, {"application/node.eks.aws", "application/x-gzip"})
    assert len(text.encode()) <= USER_DATA_LIMIT_BYTES
    nodeconfig = YAML(typ="safe", pure=True).load(parts["application/node.eks.aws"])
    assert nodeconfig["kind"] == "NodeConfig" and "io.containerd.runsc.v1" in nodeconfig["spec"]["containerd"]["config"]
    doc = cloud_config(mime_cloud_config(text))
    lustre = next(f for f in doc["write_files"] if f["path"].endswith("clusterforge-lustre.sh"))["content"]
    assert lustre.rstrip().endswith("/usr/local/sbin/clusterforge-lustre-mounts"), "the client install runs the mounts"
    # the client install is the lustre_client role's script, its source Amazon's (catalog aws.fsx_client)
    install = next(f for f in doc["write_files"] if f["path"] == "/usr/local/sbin/clusterforge-lustre-client-install")
    want = role_file("lustre_client", "lustre-client-install.sh.j2",
                     cloud_role_vars(s, "lustre_client", {"datasets": LustreEndpoint("fs-1.fsx.us-west-2.amazonaws.com",
                                                                                     "abcd1234")}), "RedHat")
    assert want is not None and (install["content"], install["permissions"]) == (want.content, want.mode)
    fsx = catalog().aws["fsx_client"]
    assert f"REPO_URL={fsx['apt']['repo_url']}" in install["content"]
    assert "DNF_PACKAGES=(" + " ".join(fsx["dnf"]["packages"]) + ")" in install["content"]
    assert "modinfo lustre >/dev/null 2>&1 || /usr/local/sbin/clusterforge-lustre-client-install" in lustre
    mounts = next(f for f in doc["write_files"] if f["path"] == "/usr/local/sbin/clusterforge-lustre-mounts")
    assert mounts["permissions"] == "0755"
    assert "lustre_mount /fsx fs-1.fsx.us-west-2.amazonaws.com@tcp:/abcd1234 noatime,flock,_netdev" in mounts["content"]


def test_container_runtime_on_ec2_sets_nvidia_default_runtime() -> None:
    s = settings_of("aws-p5-efa-lustre", "gpu")
    doc = cloud_config(render_cloud_config(s, placeholder_endpoints(s)))
    sandbox = next(f for f in doc["write_files"] if f["path"].endswith("clusterforge-sandbox.sh"))["content"]
    assert "nvidia-ctk runtime configure --runtime=docker --set-as-default" in sandbox


def test_fsx_mount_needs_its_endpoint() -> None:
    s = settings_of("aws-p5-efa-lustre", "gpu")
    with pytest.raises(KeyError):
        render_cloud_config(s, {})


def test_user_data_limit_is_enforced() -> None:
    assert encode_user_data("x" * USER_DATA_LIMIT_BYTES)
    with pytest.raises(ValueError, match="16384"):
        encode_user_data("x" * (USER_DATA_LIMIT_BYTES + 1))


@pytest.mark.parametrize("stripes", [40, 120])
def test_a_cloud_config_over_the_limit_travels_gzipped(stripes: int) -> None:
    """Many declared stripe layouts push the EC2 cloud-config past 16 KiB: it is sent gzip'd (cloud-init
    unpacks it) and decodes to the very text; the EKS MIME document is never compressed and is refused. (120 layouts
    still fit gzip'd beside the step runner; 150 no longer do: the preflight refuses them.)"""
    s = settings_of("aws-p5-efa-lustre", "gpu")
    m = s.lustre[0]
    many = m.model_copy(update={"stripes": [{"path": f"ckpt/run-{i:04d}", "count": 1 + i % 16, "size": "4M"}
                                            for i in range(stripes)]})
    s = s.model_copy(update={"lustre": [many]})
    text = render_user_data(s, placeholder_endpoints(s))
    raw = base64.b64decode(encode_user_data(text))
    if len(text.encode()) <= USER_DATA_LIMIT_BYTES:
        assert raw == text.encode()
    else:
        assert raw[:2] == b"\x1f\x8b" and len(raw) <= USER_DATA_LIMIT_BYTES
        assert gzip.decompress(raw) == text.encode()
    mime = render_user_data(s, placeholder_endpoints(s), eks=True)
    if len(mime.encode()) > USER_DATA_LIMIT_BYTES:
        with pytest.raises(ValueError, match="16384"):
            encode_user_data(mime)
    assert stripes < 120 or len(text.encode()) > USER_DATA_LIMIT_BYTES, "the case must exceed the limit"


@pytest.mark.parametrize("runtime", ["container", "gvisor", "kata", "vm"])
@pytest.mark.parametrize("eks", [False, True])
def test_sandbox_runtimes_render_valid_scripts_within_the_size_limit(runtime: str, eks: bool, tmp_path: Path) -> None:
    path = tmp_path / "bp.yaml"
    # EKS user data comes from an EKS cluster's settings (no nccl_stack: the pods bring their own stack)
    path.write_text(variant_yaml("aws-p5-efa-lustre", {"node_groups": [
        {"name": "gpu", "role": "compute", "count": 2, "instance_type": "p5.48xlarge",
         "local_nvme": {"mount": "/scratch"}, "sandbox": runtime}],
        **({"orchestrator": {"kind": "kubernetes"}} if eks else {})}))
    s = node_settings(load_blueprint(path).blueprint, "gpu")
    text = render_user_data(s, placeholder_endpoints(s), eks=eks)
    sent = base64.b64decode(encode_user_data(text))  # raises over the limit
    assert len(sent) <= USER_DATA_LIMIT_BYTES, f"{runtime}: {len(sent)} bytes"
    if eks:
        assert sent == text.encode(), "EKS user data stays MIME text"
    body = mime_cloud_config(text) if eks else text
    doc = cloud_config(body)
    plain = cloud_config(render_cloud_config(s, placeholder_endpoints(s), platform="al2023" if eks else "ubuntu"))
    assert doc["write_files"] == plain["write_files"], "compressed files decode to the same files"
    for f in doc["write_files"]:
        if f["content"].startswith("#!/bin/bash"):
            script = tmp_path / Path(f["path"]).name
            script.write_text(f["content"])
            res = subprocess.run([BASH or "bash", "-n", str(script)], capture_output=True, text=True, check=False)
            assert res.returncode == 0, f"{runtime} {f['path']}: {res.stderr}"
    files = {f["path"]: f for f in doc["write_files"]}
    sandbox = next((f["content"] for f in doc["write_files"] if f["path"].endswith("sandbox.sh")), "")
    runtime_script = files.get(SANDBOX_SCRIPT)
    if runtime == "container" and not s.sandbox.gpu_passthrough:
        assert runtime_script is None, "plain containers need no sandbox runtime"
        return
    # the sandbox role's own script, byte for byte what the role's template task writes for the same settings
    plat = "al2023" if eks else "ubuntu"
    want = role_file("sandbox", "sandbox-runtime.sh.j2", cloud_role_vars(s, "sandbox", placeholder_endpoints(s)),
                     "RedHat" if eks else "Debian")
    assert want is not None and runtime_script is not None
    assert (runtime_script["content"], runtime_script["permissions"]) == (want.content, want.mode)
    assert f"exec {SANDBOX_SCRIPT}{'' if eks else ' --docker'}\n" in sandbox, (plat, sandbox)
    if s.sandbox.gpu_passthrough:
        assert "/var/lib/cloud/scripts/per-boot/20-clusterforge-sandbox.sh" in files, "vfio binding at every boot"
        assert doc["power_state"]["condition"] == "test -f /run/clusterforge-reboot-required"
    # the release files come from where bare metal gets them (the sandbox role's variables, one catalog entry)
    metal = node_role_vars(s, "sandbox")
    body = runtime_script["content"]
    if runtime == "kata":
        assert f"KATA_TARBALL={shlex.quote(metal['sandbox_kata_tarball'])}" in body
        assert metal["sandbox_kata_tarball"].endswith(".tar.zst") and "{arch}" in metal["sandbox_kata_tarball"]
        assert f"KATA_URL={metal['sandbox_kata_release_url']}" in body
    if runtime == "gvisor":
        assert f"GVISOR_RELEASE={metal['sandbox_gvisor_release']}; GVISOR_URL={metal['sandbox_gvisor_release_url']}" in body
        runsc = files["/etc/containerd/runsc.toml"]["content"]
        assert 'nvproxy = "true"' in runsc


@pytest.mark.parametrize("example", AWS_EXAMPLES)
def test_node_settings_name_the_os_of_the_image_the_stack_boots(example: str) -> None:
    """``node-settings.json`` on a cloud node says which OS it runs: AL2023 on EKS managed node groups
    (the EKS-optimized AMIs), else the Ubuntu release of the SSM parameter the launch template reads."""
    from blueprints.hardware import instance_spec
    from blueprints.models import KubernetesOrchestrator
    from stacks.components.nodes import ami_parameter

    loaded = load_blueprint(EXAMPLES / f"{example}.yaml")
    eks = isinstance(loaded.blueprint.orchestrator, KubernetesOrchestrator)
    for r in loaded.cluster.groups:
        if eks:
            assert r.settings.os == "al2023"
            continue
        release = r.settings.os.removeprefix("ubuntu-")
        assert r.settings.os.startswith("ubuntu-") and f"/{release}/" in ami_parameter(
            str(r.group.instance_type), instance_spec(r.group)).replace("-ubuntu-", "/")
