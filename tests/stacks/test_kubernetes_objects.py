"""Every Kubernetes object the EKS stack creates validates against the Kubernetes schemas of the
blueprint's Kubernetes version (kubernetes-validate, strict); Helm releases are pinned charts
from their official repositories with the values the cluster relies on."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from blueprints.naming import LABEL_EFA, LABEL_SANDBOX
from clusterforge.plan import PlannedResource, PlanResult
from stacks.components.k8s_addons import EFA_PLUGIN_REPO, FSX_CSI_REPO, GPU_OPERATOR_REPO

from .conftest import plan_example, user_data

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

NOT_OBJECTS = ("kubernetes:helm.sh/v3:Release", "kubernetes:yaml/v2:ConfigFile")
SANDBOX_PATCH = {"node_groups": [
    {"name": "system", "role": "controller", "count": 2, "instance_type": "m6i.xlarge"},
    {"name": "gpu", "role": "compute", "count": 2, "instance_type": "p4d.24xlarge", "local_nvme": {"mount": "/scratch"}},
    {"name": "untrusted", "role": "compute", "count": 1, "instance_type": "p4d.24xlarge", "sandbox": "gvisor"},
]}


def k8s_objects(plan: PlanResult) -> list[PlannedResource]:
    return [r for r in plan.resources if r.type.startswith("kubernetes:") and r.custom and r.type not in NOT_OBJECTS]


def validate(obj: PlannedResource, version: str) -> None:
    manifest: dict[str, Any] = dict(obj.inputs)
    assert manifest["apiVersion"] and manifest["kind"], obj.urn
    try:
        kubernetes_validate.validate(manifest, f"{version}.0", strict=True)
    except kubernetes_validate.ValidationError as e:  # pragma: no cover - the failure message is the point
        pytest.fail(f"{obj.urn}: {e.message} at {list(e.path)}")


def test_every_kubernetes_object_validates() -> None:
    plan = plan_example("aws-eks-p4d")
    objects = k8s_objects(plan)
    kinds = {o.inputs["kind"] for o in objects}
    assert {"Namespace", "PersistentVolume", "PersistentVolumeClaim"} <= kinds
    assert "StorageClass" not in kinds, "a dynamic FSx StorageClass without throughput and controller IAM leaves claims Pending"
    for obj in objects:
        validate(obj, "1.31")


def test_fsx_volume_is_statically_provisioned_from_the_stack_file_system() -> None:
    plan = plan_example("aws-eks-p4d")
    (pv,) = plan.of_type("kubernetes:core/v1:PersistentVolume")
    (pvc,) = plan.of_type("kubernetes:core/v1:PersistentVolumeClaim")
    fs = plan.outputs["fsx"]["datasets"]
    csi = pv.inputs["spec"]["csi"]
    assert csi == {"driver": "fsx.csi.aws.com", "volumeHandle": fs["fileSystemId"],
                   "volumeAttributes": {"dnsname": fs["dnsName"], "mountname": fs["mountName"]}}, pv.urn
    assert pv.inputs["spec"]["capacity"] == {"storage": "4800Gi"}
    assert pvc.inputs["spec"]["volumeName"] == pv.inputs["metadata"]["name"], f"{pvc.urn}: not bound to {pv.urn}"
    assert pvc.inputs["metadata"]["namespace"] == "clusterforge"


def test_helm_releases_are_pinned_official_charts() -> None:
    plan = plan_example("aws-eks-p4d")
    releases = {r.inputs["chart"]: r for r in plan.of_type("kubernetes:helm.sh/v3:Release")}
    assert set(releases) == {"gpu-operator", "aws-efa-k8s-device-plugin", "aws-fsx-csi-driver"}
    repos = {"gpu-operator": GPU_OPERATOR_REPO, "aws-efa-k8s-device-plugin": EFA_PLUGIN_REPO,
             "aws-fsx-csi-driver": FSX_CSI_REPO}
    for chart, rel in releases.items():
        assert rel.inputs["repositoryOpts"]["repo"] == repos[chart], rel.urn
        assert rel.inputs["version"], f"{rel.urn}: unpinned chart"
    # the example pins no operator: Kubernetes 1.35 gets GPU Operator 26.7 (its newest patch v26.7.0), the supported
    # release NVIDIA's platform-support page lists for Amazon EKS 1.33-1.36 (24.9, the old default, lists 1.25-1.28)
    assert releases["gpu-operator"].inputs["version"] == "v26.7.0"
    gpu_values = releases["gpu-operator"].inputs["values"]
    assert gpu_values["driver"]["enabled"] is False and gpu_values["toolkit"]["enabled"] is False, (
        "the EKS AL2023 NVIDIA AMI ships driver and toolkit; the operator must not install them again")
    efa = releases["aws-efa-k8s-device-plugin"].inputs
    assert efa["version"] == "v0.5.6"
    assert efa["values"]["nodeSelector"] == {LABEL_EFA: "true"}, "plugin must follow the EFA label"
    assert efa["values"]["supportedInstanceLabels"]["values"] == ["p4d.24xlarge"]
    (mpi,) = plan.of_type("kubernetes:yaml/v2:ConfigFile")
    # an immutable reference: the v0.6.0 tag's commit (catalog kubernetes_addons.mpi_operator), never the movable tag
    assert mpi.inputs["file"] == ("https://raw.githubusercontent.com/kubeflow/mpi-operator/"
                                  "c983759cfa87fd32ed5711804021ea47eb8d712c/deploy/v2beta1/mpi-operator.yaml")


def test_runtime_classes_for_declared_sandboxes(plan_variant) -> None:
    plan = plan_variant("aws-eks-p4d", SANDBOX_PATCH)
    rcs = plan.of_type("kubernetes:node.k8s.io/v1:RuntimeClass")
    assert [(r.inputs["metadata"]["name"], r.inputs["handler"]) for r in rcs] == [("gvisor", "runsc")]
    (rc,) = rcs
    assert rc.inputs["scheduling"]["nodeSelector"] == {LABEL_SANDBOX: "gvisor"}
    for obj in k8s_objects(plan):
        validate(obj, "1.31")
    ngs = {ng.inputs["tags"]["clusterforge:node-group"]: ng for ng in plan.of_type("aws:eks/nodeGroup:NodeGroup")}
    assert ngs["untrusted"].inputs["labels"][LABEL_SANDBOX] == "gvisor", "RuntimeClass must find its nodes"
    lts = {lt.id: lt for lt in plan.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    text = user_data(lts[ngs["untrusted"].inputs["launchTemplate"]["id"]])
    assert f"containerd.runtimes.{rc.inputs['handler']}]" in text, "nodes must register the RuntimeClass handler"


def test_validation_catches_a_broken_object() -> None:
    """The schema check is real: an unknown field in a planned object is rejected."""
    plan = plan_example("aws-eks-p4d")
    (pv,) = plan.of_type("kubernetes:core/v1:PersistentVolume")
    broken = dict(pv.inputs, spec={**pv.inputs["spec"], "capacitty": {"storage": "1Gi"}})
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.31.0", strict=True)
