"""A Slurm cluster on EC2, from the user's side: what ``pulumi up`` of ``blueprints/examples/aws-p5-slurm.yaml`` would
create (the program under the mock engine) and what its nodes run at first boot.

The plan: each instance carries its Slurm NodeName in a tag that IMDS serves, a private zone resolves every NodeAddr
of slurm.conf, the munge key secret has no value in the stack and only the controller's role may store it, the
controller's state volume is encrypted and outlives the instance, Slurm traffic stays inside the node security
group, and the user data and file bundles carry the cluster's files and the steps in order, with no secret.
The boot helper (``stacks/files/clusterforge-slurm-aws.py``) runs for real against a stand-in instance metadata
service, S3 and Secrets Manager served on 127.0.0.1, with the munge role's own key tool writing the key.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulumi
import pytest

from blueprints import load_blueprint
from blueprints.catalog import catalog
from blueprints.role_templates import ROLES_DIR
from blueprints.settings import node_settings
from blueprints.slurm import aws_dns_zone, slurm_files, slurm_settings
from clusterforge.plan import PlannedResource
from stacks.slurm_boot import AWS_HELPER, KEY_TOOL, NODE_NAME_TAG, slurm_bundle
from tests.conftest import EXAMPLES

from .aws_standin import load
from .conftest import INGRESS, INSTANCE, LT, plan_example, rules_of, sg_named, user_data

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

EXAMPLE = "aws-p5-slurm"
HELPER = Path(__file__).resolve().parents[2] / "stacks" / "files" / "clusterforge-slurm-aws.py"
"""The helper as in the repository; it imports IMDSv2 and SigV4 from clusterforge_aws.py beside it."""
ZONE = "aws:route53/zone:Zone"
RECORD = "aws:route53/record:Record"
SECRET = "aws:secretsmanager/secret:Secret"
POLICY = "aws:iam/policy:Policy"
ATTACH = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
PROFILE = "aws:iam/instanceProfile:InstanceProfile"
VOLUME = "aws:ebs/volume:Volume"
VOLUME_ATTACHMENT = "aws:ec2/volumeAttachment:VolumeAttachment"
OBJECT = "aws:s3/bucketObjectv2:BucketObjectv2"


def _bp():
    return load_blueprint(EXAMPLES / f"{EXAMPLE}.yaml").blueprint


def _lt_of(plan, group: str) -> PlannedResource:
    (lt,) = [r for r in plan.of_type(LT) if r.name == f"{_bp().name}-{group}-lt"]
    return lt


def _instances(plan, group: str) -> list[PlannedResource]:
    return [i for i in plan.of_type(INSTANCE) if i.inputs["tags"]["clusterforge:node-group"] == group]


def _bundle(plan, group: str) -> dict[str, Any]:
    (obj,) = [o for o in plan.of_type(OBJECT) if o.inputs["key"] == f"slurm/{group}.json"]
    return json.loads(obj.inputs["content"])


def _boot_script(plan, group: str) -> str:
    text = user_data(_lt_of(plan, group))
    m = re.search(r"path: /usr/local/sbin/clusterforge-slurm\.sh\n(?:.*\n)*?\s+content: \|\n((?:\s{6}.*\n|\n)+)", text)
    assert m, f"{group}: no Slurm boot script in the user data"
    return "".join(line[6:] + "\n" for line in m.group(1).splitlines())


# ---------------------------------------------------------------------------------------------
# the plan
# ---------------------------------------------------------------------------------------------

def test_each_instance_is_tagged_with_its_slurm_node_name_and_imds_serves_tags() -> None:
    plan = plan_example(EXAMPLE)
    s = slurm_settings(_bp())
    assert s is not None and s.controller == "controller-0"
    assert [i.inputs["tags"][NODE_NAME_TAG] for i in _instances(plan, "gpu")] == [n.name for n in s.nodes]
    assert [i.inputs["tags"][NODE_NAME_TAG] for i in _instances(plan, "controller")] == [s.controller]
    for lt in plan.of_type(LT):
        assert lt.inputs["metadataOptions"]["instanceMetadataTags"] == "enabled", lt.urn
        assert lt.inputs["metadataOptions"]["httpTokens"] == "required", lt.urn
    # a cluster without Slurm keeps tags out of the instance metadata
    other = plan_example("aws-p5-efa-lustre")
    assert {lt.inputs["metadataOptions"]["instanceMetadataTags"] for lt in other.of_type(LT)} == {"disabled"}
    assert not any(NODE_NAME_TAG in i.inputs["tags"] for i in other.of_type(INSTANCE))


def test_every_node_address_of_slurm_conf_resolves_in_the_private_zone_of_the_vpc() -> None:
    plan = plan_example(EXAMPLE)
    (zone,) = plan.of_type(ZONE)
    (vpc,) = plan.of_type("aws:ec2/vpc:Vpc")
    assert zone.inputs["name"] == aws_dns_zone(_bp().name) == "p5-slurm.clusterforge.internal"
    assert zone.inputs["vpcs"] == [{"vpcId": vpc.id}], f"{zone.urn}: not private to the cluster's VPC"
    conf = _bundle(plan, "controller")
    slurm_conf = next(f["content"] for f in conf["files"] if f["path"] == "/etc/slurm/slurm.conf")
    addrs = dict(re.findall(r"^NodeName=(\S+) NodeAddr=(\S+)", slurm_conf, re.MULTILINE))
    ctl = re.search(r"^SlurmctldHost=(\S+)\((\S+)\)$", slurm_conf, re.MULTILINE)
    assert ctl and ctl.group(1) == "controller-0", slurm_conf
    addrs[ctl.group(1)] = ctl.group(2)
    ips = {i.inputs["tags"][NODE_NAME_TAG]: i for i in plan.of_type(INSTANCE)}
    records = {r.inputs["name"]: r for r in plan.of_type(RECORD)}
    assert sorted(records) == sorted(addrs.values()), "one A record per node, named as slurm.conf's NodeAddr"
    for name, addr in addrs.items():
        rec = records[addr]
        assert rec.inputs["zoneId"] == zone.id and rec.inputs["type"] == "A", rec.urn
        # the mock engine's private IP of that very instance
        ip = [o for o in plan.outputs["nodePrivateIps"][ips[name].inputs["tags"]["clusterforge:node-group"]]]
        assert rec.inputs["records"][0] in ip, rec.urn
    # short names (AccountingStorageHost, the configless server) resolve through the zone as search domain
    assert f"Domains=%s\\n' {zone.inputs['name']}" in _boot_script(plan, "gpu")


def _policy(plan, resource: PlannedResource) -> dict[str, Any]:
    return json.loads(resource.inputs["policy"])


def test_only_the_controller_role_may_store_the_munge_key_and_nodes_may_only_read_it() -> None:
    plan = plan_example(EXAMPLE)
    (secret,) = plan.of_type(SECRET)
    secret_arn = f"arn:aws:secretsmanager:us-east-1:123456789012:{secret.name}"  # the mock engine's ARN
    actions: dict[str, set[str]] = {}
    for pol in plan.of_type(POLICY):
        for st in _policy(plan, pol)["Statement"]:
            assert st["Effect"] == "Allow" and st["Resource"] != "*", f"{pol.urn}: {st}"
            if pol.name == "p5-slurm-node-status-policy":  # the boot status records and the nodes' programs
                resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
                assert all(a.startswith("ssm:") for a in st["Action"])  # (tests/stacks/test_node_status.py)
                assert resources and all(":parameter/clusterforge/" in r for r in resources)
                continue
            if st["Resource"] == secret_arn:
                actions[pol.name] = set(st["Action"])
            else:
                assert st["Action"] == ["s3:GetObject"] and st["Resource"].endswith("/slurm/*"), f"{pol.urn}: {st}"
    assert actions == {
        "p5-slurm-slurm-controller-policy": {"secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"},
        "p5-slurm-slurm-node-policy": {"secretsmanager:GetSecretValue"},
    }
    # which role gets which policy, and which launch template which role (through its instance profile)
    role_policies: dict[str, set[str]] = {}
    for a in plan.of_type(ATTACH):  # the mock engine's ARN of a policy ends with its name
        role_policies.setdefault(a.inputs["role"], set()).add(a.inputs["policyArn"].rsplit(":", 1)[1])
    profiles = {p.name: p.inputs["role"] for p in plan.of_type(PROFILE)}  # auto-named after the logical name
    for group, policy in (("controller", "p5-slurm-slurm-controller-policy"), ("gpu", "p5-slurm-slurm-node-policy")):
        role = profiles[_lt_of(plan, group).inputs["iamInstanceProfile"]["name"]]
        slurm_policies = {p for p in role_policies[role] if p.startswith("p5-slurm-slurm-")}
        assert slurm_policies == {policy}, f"{group}: its role has {slurm_policies}"


def test_the_secret_has_no_value_in_the_stack_and_no_secret_is_in_any_rendered_output() -> None:
    plan = plan_example(EXAMPLE)
    (secret,) = plan.of_type(SECRET)
    assert "secretString" not in secret.inputs and "secretBinary" not in secret.inputs, secret.urn
    assert not [r for r in plan.resources if "secretVersion" in r.type], "the stack must not set the key"
    assert "kmsKeyId" not in secret.inputs  # encrypted with the account's aws/secretsmanager key
    everything = json.dumps([r.inputs for r in plan.resources]) + "".join(user_data(lt) for lt in plan.of_type(LT))
    everything += "".join(json.dumps(_bundle(plan, g)) for g in ("controller", "gpu"))
    assert not re.search(r"StoragePass=[^%]", everything), "a database password was rendered"
    assert "munge.key" not in json.dumps([i.inputs["tags"] for i in plan.of_type(INSTANCE)])
    for r in plan.resources:  # tags carry names, never values of secrets
        for k, v in (r.inputs.get("tags") or {}).items():
            assert "secret" not in k.lower() and "arn:aws:secretsmanager" not in str(v), f"{r.urn}: tag {k}"


def test_controller_state_volume_is_encrypted_and_outlives_the_instance() -> None:
    plan = plan_example(EXAMPLE)
    (vol,) = plan.of_type(VOLUME)
    (att,) = plan.of_type(VOLUME_ATTACHMENT)
    (ctl,) = _instances(plan, "controller")
    assert vol.inputs["encrypted"] is True and vol.inputs["type"] == "gp3", vol.urn
    assert vol.inputs["finalSnapshot"] is True, f"{vol.urn}: destroying the stack must keep a snapshot"
    assert vol.inputs["availabilityZone"] == _bp().target.availability_zone
    assert vol.parent != ctl.parent, "the volume is not part of the controller's node group (it survives a replace)"
    assert all(len(lt.inputs["blockDeviceMappings"]) == 1 for lt in plan.of_type(LT)), "no state disk in a template"
    assert att.inputs["volumeId"] == vol.id and att.inputs["instanceId"] == ctl.id, att.urn
    assert att.inputs["stopInstanceBeforeDetaching"] is True, f"{att.urn}: detach from a running slurmctld"
    script = _boot_script(plan, "controller")
    assert f"VOL={vol.id};" in script
    for bind in ("slurmctld:/var/spool/slurmctld", "mysql:/var/lib/mysql"):
        assert bind in script, f"controller state not on the volume: {bind}"


def test_slurm_ports_and_srun_ports_are_open_only_within_the_node_security_group() -> None:
    plan = plan_example(EXAMPLE)
    nodes = sg_named(plan, "-nodes")
    ports = list(catalog().extras["slurm"]["ports"].values()) + [32768, 60999]  # srun: the kernel's ephemeral range
    assert sorted(ports[:3]) == [6817, 6818, 6819]
    for port in ports:
        allowed = [r for r in rules_of(plan, nodes, INGRESS)
                   if r.inputs["ipProtocol"] in ("-1", "tcp")
                   and r.inputs.get("fromPort", 0) <= port <= r.inputs.get("toPort", 65535)]
        assert any(r.inputs.get("referencedSecurityGroupId") == nodes.id for r in allowed), f"port {port} closed"
        for r in allowed:
            assert r.inputs.get("referencedSecurityGroupId") == nodes.id, f"{r.urn}: port {port} from {r.inputs}"
    for lt in plan.of_type(LT):
        assert all(nic["securityGroups"] == [nodes.id] for nic in lt.inputs["networkInterfaces"]), lt.urn


def test_controller_user_data_and_bundle_carry_the_cluster_files_and_start_the_daemons_in_order() -> None:
    plan = plan_example(EXAMPLE)
    bp = _bp()
    s = slurm_settings(bp)
    assert s is not None
    bundle = {f["path"]: f for f in _bundle(plan, "controller")["files"]}
    for path, text in slurm_files(s).items():
        if path == "/etc/slurm/slurmdbd.conf":
            assert bundle["/etc/clusterforge/slurmdbd.conf.base"]["content"] == text
            assert bundle["/etc/clusterforge/slurmdbd.conf.base"]["mode"] == "0600"
        else:
            assert bundle[path]["content"] == text and bundle[path]["mode"] == "0644", path
    assert "/etc/slurm/slurmdbd.conf" not in bundle, "slurmdbd.conf is assembled on the node, with its password"
    for path in ("/usr/local/sbin/clusterforge-slurmdbd-db", "/etc/systemd/system/clusterforge-slurmdbd-db.service",
                 "/etc/mysql/mariadb.conf.d/60-clusterforge-slurmdbd.cnf", KEY_TOOL):
        assert path in bundle, f"controller bundle lacks {path}"
    assert bundle[KEY_TOOL]["content"] == (ROLES_DIR / "munge" / "files" / "munge-key.py").read_text()
    script = _boot_script(plan, "controller")
    steps = ["hostname clusterforge:slurm-node", "fetch-bundle", "mount \"$STATE\"", "pkg_install munge slurmctld",
             "munge-key controller", "restart munge.service", "StoragePass=", "enable --now mariadb.service",
             "enable --now clusterforge-slurmdbd-db.service", "enable --now slurmdbd.service",
             "sacctmgr --immediate add cluster p5-slurm", "restart slurmctld.service"]
    at = [script.find(x) for x in steps]
    assert all(i >= 0 for i in at), [x for x, i in zip(steps, at, strict=True) if i < 0]
    assert at == sorted(at), f"controller steps out of order: {steps}"
    assert "slurmdbd mariadb-server" in script and "slurmd" not in script.replace("slurmdbd", "")


def test_p5_node_user_data_and_bundle_run_a_configless_slurmd_after_the_gpu_devices() -> None:
    plan = plan_example(EXAMPLE)
    bundle = {f["path"]: f for f in _bundle(plan, "gpu")["files"]}
    assert "/etc/slurm/slurm.conf" not in bundle, "configless nodes fetch slurm.conf from slurmctld"
    assert bundle["/etc/default/slurmd"]["content"].splitlines()[-1] == 'SLURMD_OPTIONS="--conf-server controller-0:6817"'
    dropin = bundle["/etc/systemd/system/slurmd.service.d/clusterforge.conf"]["content"]
    assert "ExecStartPre=/usr/local/sbin/clusterforge-wait-devices 300 " + " ".join(
        f"/dev/nvidia{i}" for i in range(8)) in dropin
    assert "ConditionPathExists=\n" in dropin and "Delegate=yes" in dropin
    assert bundle["/usr/local/sbin/clusterforge-wait-devices"]["mode"] == "0755"
    health = json.loads(bundle["/etc/clusterforge/slurm-health.json"]["content"])
    assert health["gpu_count"] == 8 and health["gpu_model"] == "h100-sxm" and "/fsx" in health["mounts"]
    for path in ("/usr/sbin/clusterforge-slurm-health", "/etc/slurm/prolog.sh", "/etc/slurm/epilog.sh"):
        assert bundle[path]["mode"] == "0755", path  # slurm.conf's HealthCheckProgram, Prolog, Epilog exist
    assert any(p.startswith("/etc/slurm/prolog.d/") for p in bundle) and any(p.startswith("/etc/slurm/epilog.d/") for p in bundle)
    script = _boot_script(plan, "gpu")
    steps = ["hostname clusterforge:slurm-node", "fetch-bundle", "pkg_install munge slurmd", "munge-key node",
             "restart munge.service", "restart slurmd.service"]
    at = [script.find(x) for x in steps]
    assert all(i >= 0 for i in at) and at == sorted(at), script
    assert "slurmctld" not in script and "PutSecretValue" not in script and "STATE" not in script
    # the p5 user data still fits EC2's limit (gzip'd as sent)
    sent = base64.b64decode(_lt_of(plan, "gpu").inputs["userData"])
    assert len(sent) <= 16 * 1024, f"p5 Slurm user data is {len(sent)} bytes"


def test_user_data_pins_the_sha256_of_the_bundle_the_stack_stores() -> None:
    plan = plan_example(EXAMPLE)
    bp = _bp()
    for group in ("controller", "gpu"):
        (obj,) = [o for o in plan.of_type(OBJECT) if o.inputs["key"] == f"slurm/{group}.json"]
        assert obj.inputs["content"] == slurm_bundle(node_settings(bp, bp.group(group)))
        m = re.search(r"fetch-bundle (https://\S+) ([0-9a-f]{64})", _boot_script(plan, group))
        assert m and m.group(2) == hashlib.sha256(obj.inputs["content"].encode()).hexdigest(), group
        assert m.group(1).endswith(f".s3.us-east-1.amazonaws.com/slurm/{group}.json")
        (inst,) = _instances(plan, group)[:1]
        assert obj.urn in inst.depends_on, f"{inst.urn} boots before its bundle exists"


PINS = {"enroot_4.1.2-1_amd64.deb": "a" * 64, "enroot+caps_4.1.2-1_amd64.deb": "b" * 64,
        "pyxis-0.24.0.tar.gz": "c" * 64}


def test_with_pyxis_the_nodes_install_pinned_enroot_and_build_pyxis_before_slurmd(plan_variant) -> None:
    plan = plan_variant(EXAMPLE, {"orchestrator": {"pyxis": True, "container_pins": PINS}})
    bundle = {f["path"]: f for f in _bundle(plan, "gpu")["files"]}
    script = bundle["/usr/local/sbin/clusterforge-enroot-pyxis"]
    assert script["mode"] == "0755"
    for url, pin in (("enroot_4.1.2-1_amd64.deb", "a" * 64), ("enroot+caps_4.1.2-1_amd64.deb", "b" * 64)):
        assert f"https://github.com/NVIDIA/enroot/releases/download/v4.1.2/{url} {pin}" in script["content"]
    assert "c" * 64 in script["content"] and "arm64" not in script["content"]  # p5 is x86_64: amd64 packages only
    assert "ENROOT_DATA_PATH /var/lib/enroot/data/user-$(id -u)" in bundle["/etc/enroot/enroot.conf"]["content"]
    boot = _boot_script(plan, "gpu")
    steps = ["libslurm-dev", "clusterforge-enroot-pyxis && /usr/local/sbin/clusterforge-enroot-pyxis --dirs",
             "restart slurmd.service"]
    at = [boot.find(x) for x in steps]
    assert all(i >= 0 for i in at) and at == sorted(at), boot
    assert "clusterforge-enroot-pyxis" not in _boot_script(plan, "controller")


def test_a_tag_key_imds_cannot_serve_stops_the_program_with_one_line(plan_variant) -> None:
    with pytest.raises(pulumi.RunError) as e:
        plan_variant(EXAMPLE, {"target": {"tags": {"team/owner": "ml"}}})
    # check's rule stops it first, at the tag's line (the stack keeps its own one-line refusal behind it)
    assert "slurm-aws-tag-keys" in str(e.value) and "`team/owner`" in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------
# the boot helper, for real, against stand-ins on 127.0.0.1
# ---------------------------------------------------------------------------------------------

def _helper_module():
    return load("clusterforge-slurm-aws.py")


def test_sigv4_signature_is_the_one_aws_documents() -> None:
    """AWS's signed-request example: https://docs.aws.amazon.com/general/latest/gr/sigv4-signed-request-examples.html
    (IAM ListUsers, AKIDEXAMPLE, 2011-09-09T23:36:00Z)."""
    h = _helper_module().sign("POST", "http://iam.amazonaws.com/", "us-east-1", "iam",
                              {"Content-type": "application/x-www-form-urlencoded; charset=utf-8"},
                              b"Action=ListUsers&Version=2010-05-08",
                              ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None),
                              datetime.datetime(2011, 9, 9, 23, 36, 0))
    assert h["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20110909/us-east-1/iam/aws4_request, "
        "SignedHeaders=content-type;host;x-amz-date, "
        "Signature=ced6826de92d2bdeed8f846f0bf508e8559e98e4b0199114b84c54174deb456c")


def _run_helper(aws: dict[str, Any], tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ["PATH"], "CLUSTERFORGE_IMDS": aws["url"], "CLUSTERFORGE_AWS_ENDPOINT": aws["url"],
            "CLUSTERFORGE_ROOT": str(tmp / "root"), **env}
    (tmp / "root" / "etc" / "munge").mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, str(HELPER), *args], capture_output=True, text=True, env=full, check=False,
                          timeout=60)


def test_hostname_comes_from_the_instance_tag_through_imdsv2(aws, tmp_path: Path) -> None:
    record = tmp_path / "set-hostname"
    record.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/named\n")
    record.chmod(0o755)
    res = _run_helper(aws, tmp_path, "hostname", NODE_NAME_TAG, CLUSTERFORGE_SET_HOSTNAME=str(record))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "named").read_text() == "gpu-1\n"
    assert (tmp_path / "root" / "etc" / "hostname").read_text() == "gpu-1\n"
    aws["tag"] = "gpu-1; reboot"
    res = _run_helper(aws, tmp_path, "hostname", NODE_NAME_TAG, CLUSTERFORGE_SET_HOSTNAME=str(record))
    assert res.returncode == 1 and "not a host name" in res.stderr and len(res.stderr.splitlines()) == 1
    assert (tmp_path / "named").read_text() == "gpu-1\n", "a bad tag value must not reach hostnamectl"


def test_the_p5_bundle_is_fetched_signed_checked_and_written_with_its_modes(aws, tmp_path: Path) -> None:
    bp = _bp()
    text = slurm_bundle(node_settings(bp, bp.group("gpu")))
    assert text is not None
    aws["objects"]["/cf-bucket/slurm/gpu.json"] = text.encode()
    url = "https://cf-bucket.s3.us-east-1.amazonaws.com/slurm/gpu.json"
    wrong = hashlib.sha256(b"other").hexdigest()
    res = _run_helper(aws, tmp_path, "fetch-bundle", url, wrong)
    assert res.returncode == 1 and "pinned" in res.stderr
    assert not (tmp_path / "root" / "etc" / "default").exists(), "nothing is written from an unpinned bundle"
    res = _run_helper(aws, tmp_path, "fetch-bundle", url, hashlib.sha256(text.encode()).hexdigest())
    assert res.returncode == 0, res.stderr
    for f in json.loads(text)["files"]:
        p = tmp_path / "root" / f["path"].lstrip("/")
        assert p.read_text() == f["content"], f["path"]
        assert oct(p.stat().st_mode & 0o777) == oct(int(f["mode"], 8)), f["path"]


def test_munge_key_is_made_once_on_the_controller_stored_and_read_by_the_nodes(aws, tmp_path: Path) -> None:
    tool = str(ROLES_DIR / "munge" / "files" / "munge-key.py")
    if os.geteuid() != 0:
        pytest.skip("munge-key.py writes the key owned by munge: needs root")
    ctl, node = tmp_path / "ctl", tmp_path / "node"
    ctl.mkdir()
    node.mkdir()
    # a node that starts first waits, bounded, and says what to look at
    res = _run_helper(aws, node, "munge-key", "node", aws["arn"], tool,
                      CLUSTERFORGE_KEY_WAIT_S="1", CLUSTERFORGE_POLL_S="0.2")
    assert res.returncode == 1 and "no munge key" in res.stderr and "controller" in res.stderr
    res = _run_helper(aws, ctl, "munge-key", "controller", aws["arn"], tool)
    assert res.returncode == 0, res.stderr
    key = (ctl / "root" / "etc" / "munge" / "munge.key").read_bytes()
    assert len(key) == 1024 and base64.b64decode(aws["value"]) == key
    assert aws["calls"][-2:] == ["GetSecretValue", "PutSecretValue"]
    res2 = _run_helper(aws, node, "munge-key", "node", aws["arn"], tool)
    assert res2.returncode == 0, res2.stderr
    got = node / "root" / "etc" / "munge" / "munge.key"
    assert got.read_bytes() == key
    st = got.stat()
    assert oct(st.st_mode & 0o777) == "0o400" and st.st_uid == __import__("pwd").getpwnam("munge").pw_uid
    # a replaced controller keeps the stored key instead of making another
    again = tmp_path / "ctl2"
    again.mkdir()
    res3 = _run_helper(aws, again, "munge-key", "controller", aws["arn"], tool)
    assert res3.returncode == 0 and (again / "root" / "etc" / "munge" / "munge.key").read_bytes() == key
    assert aws["calls"].count("PutSecretValue") == 1
    for r in (res, res2, res3):  # the key is never printed
        out = r.stdout + r.stderr
        assert aws["value"] not in out and base64.b64encode(key[:48]).decode() not in out
    assert AWS_HELPER.endswith("clusterforge-slurm-aws")


@pytest.mark.parametrize("group", ["controller", "gpu"])
def test_boot_scripts_parse_as_bash(group: str) -> None:
    script = _boot_script(plan_example(EXAMPLE), group)
    res = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
