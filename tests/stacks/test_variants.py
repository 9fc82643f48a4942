"""Policy tests on variants of the examples: spot, capacity reservations, existing VPC, SSH CIDRs,
and blueprint errors that must stop the program with the blueprint's own file:line lines."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest

from clusterforge.plan import PlanResult, run_program
from clusterforge.plan import _stacks_program as stacks_program

from .conftest import INGRESS, LT, PG, SG, SUBNET, plan_example, rules_of, sg_named

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]


def test_spot_launch_template_requests_spot_without_reservation(plan_variant) -> None:
    plan: PlanResult = plan_variant("aws-p5-efa-lustre", {"target": {"capacity": {"type": "spot", "max_price": 60.5}}})
    (lt,) = plan.of_type(LT)
    market = lt.inputs["instanceMarketOptions"]
    assert market["marketType"] == "spot", lt.urn
    assert market["spotOptions"]["maxPrice"] == "60.5", f"{lt.urn}: max price is a string in USD/hour"
    assert "capacityReservationSpecification" not in lt.inputs, lt.urn
    assert plan.of_type(PG), "spot in a cluster placement group keeps its placement group"


def test_reservation_uses_its_own_placement_group_and_creates_none(plan_variant) -> None:
    plan = plan_variant("aws-p5-efa-lustre", {"target": {"capacity": {
        "type": "reservation", "reservation_id": "cr-0abc", "instance_count": 2, "placement_group": "odcr-pg"}}})
    assert not plan.of_type(PG), "a reservation must not get a new placement group"
    (lt,) = plan.of_type(LT)
    assert lt.inputs["placement"]["groupName"] == "odcr-pg", f"{lt.urn}: not in the reservation's group"
    assert lt.inputs["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": "cr-0abc"}}, lt.urn
    assert "instanceMarketOptions" not in lt.inputs, lt.urn


def test_existing_subnet_creates_no_vpc_and_puts_everything_in_it(plan_variant) -> None:
    plan = plan_variant("aws-p5-efa-lustre", {"target": {"vpc": {"subnet_id": "subnet-0existing"}}})
    assert not plan.of_type("aws:ec2/vpc:Vpc") and not plan.of_type(SUBNET), "existing subnet: nothing new"
    vpc_lookups = [a for t, a in plan.invokes if t == "aws:ec2/getSubnet:getSubnet"]
    assert vpc_lookups == [{"id": "subnet-0existing"}], "the VPC id is looked up from the subnet"
    (lt,) = plan.of_type(LT)
    assert {n["subnetId"] for n in lt.inputs["networkInterfaces"]} == {"subnet-0existing"}, lt.urn
    for fs in plan.of_type("aws:fsx/lustreFileSystem:LustreFileSystem"):
        assert fs.inputs["subnetIds"] == "subnet-0existing", fs.urn
    for sg in plan.of_type(SG):
        assert sg.inputs["vpcId"].startswith("vpc-"), f"{sg.urn}: security group outside the subnet's VPC"


def test_ssh_only_from_declared_cidrs(plan_variant) -> None:
    plan = plan_variant("aws-p5-efa-lustre", {"target": {"ssh_ingress_cidrs": ["203.0.113.0/24"]}})
    nodes = sg_named(plan, "-nodes")
    ssh = [r for r in rules_of(plan, nodes, INGRESS) if r.inputs.get("fromPort") == 22]
    assert [(r.inputs["cidrIpv4"], r.inputs["toPort"], r.inputs["ipProtocol"]) for r in ssh] == [
        ("203.0.113.0/24", 22, "tcp")], f"{nodes.urn}: SSH rules {ssh}"
    assert not [r for r in rules_of(plan_example("aws-p5-efa-lustre"), sg_named(plan_example("aws-p5-efa-lustre"),
                "-nodes"), INGRESS) if r.inputs.get("fromPort") == 22], "default: no SSH ingress at all"


def test_blueprint_errors_stop_the_program_with_file_line_findings(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: clusterforge/v1\nkind: Blueprint\nname: bad\ntarget:\n  provider: aws\n"
                   "  region: us-east-1\n  availability_zone: us-east-1a\n  colour: blue\n"
                   "node_groups:\n  - {name: gpu, count: 1, instance_type: p5.48xlarge}\n")
    with pytest.raises(pulumi.RunError) as e:
        run_program(stacks_program, stack="bad", config={"clusterforge:blueprint": str(bad)})
    assert str(e.value).startswith(f"{bad}:8:"), str(e.value)
    assert "colour" in str(e.value)


def test_missing_blueprint_setting_says_how_to_set_it() -> None:
    with pytest.raises(pulumi.RunError, match="pulumi config set clusterforge:blueprint"):
        run_program(stacks_program, stack="none", config={})


def test_onprem_blueprint_is_refused_by_the_pulumi_program(examples: Path) -> None:
    with pytest.raises(pulumi.RunError, match="on-prem|onprem"):
        run_program(stacks_program, stack="x",
                    config={"clusterforge:blueprint": str(examples / "onprem-dgx-h100-ib.yaml")})


def test_fsx_every_validated_argument_and_s3_association(plan_variant) -> None:
    plan = plan_variant("aws-p5-efa-lustre", {"storage": [{
        "kind": "lustre", "name": "shared", "mount": "/fsx", "fsx": {
            "deployment_type": "PERSISTENT_2", "storage_capacity_gib": 4800, "throughput_per_tib_mbps": 500,
            "metadata": {"mode": "USER_PROVISIONED", "iops": 6000}, "data_compression_type": "NONE",
            "kms_key_id": "arn:aws:kms:us-east-1:123456789012:key/abc", "automatic_backup_retention_days": 0,
            "s3": {"data_repository_path": "s3://datasets-bucket/train", "file_system_path": "/train",
                   "auto_export": True}}}]})
    (fs,) = plan.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    i = fs.inputs
    assert (i["deploymentType"], i["storageCapacity"], i["perUnitStorageThroughput"]) == ("PERSISTENT_2", 4800, 500)
    assert i["metadataConfiguration"] == {"mode": "USER_PROVISIONED", "iops": 6000}, fs.urn
    assert i["kmsKeyId"] == "arn:aws:kms:us-east-1:123456789012:key/abc", f"{fs.urn}: customer key not used"
    assert i["dataCompressionType"] == "NONE"
    # linked to S3: FSx takes no backups (https://docs.aws.amazon.com/fsx/latest/LustreGuide/using-backups-fsx.html)
    assert "automaticBackupRetentionDays" not in i and "skipFinalBackup" not in i
    (dra,) = plan.of_type("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert dra.inputs["fileSystemId"] == fs.id, f"{dra.urn}: not linked to {fs.urn}"
    assert dra.inputs["dataRepositoryPath"] == "s3://datasets-bucket/train"
    assert dra.inputs["fileSystemPath"] == "/train"
    assert dra.inputs["s3"]["autoImportPolicy"]["events"] == ["NEW", "CHANGED", "DELETED"]
    assert dra.inputs["s3"]["autoExportPolicy"]["events"] == ["NEW", "CHANGED", "DELETED"]


def test_scratch_file_system_gets_no_persistent_only_arguments(plan_variant) -> None:
    plan = plan_variant("aws-p5-efa-lustre", {"storage": [{
        "kind": "lustre", "name": "shared", "mount": "/fsx",
        "fsx": {"deployment_type": "SCRATCH_2", "storage_capacity_gib": 1200}}]})
    (fs,) = plan.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    for key in ("perUnitStorageThroughput", "kmsKeyId", "metadataConfiguration", "automaticBackupRetentionDays"):
        assert key not in fs.inputs, f"{fs.urn}: {key} is rejected for SCRATCH_2"
