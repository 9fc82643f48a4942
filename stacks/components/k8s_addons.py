"""``clusterforge:k8s:Addons``: what an EKS GPU cluster needs inside Kubernetes.

* **NVIDIA GPU Operator** (Helm, https://helm.ngc.nvidia.com/nvidia) at the blueprint's version, by default the
  release NVIDIA's platform-support matrix lists for the cluster's Kubernetes version on Amazon EKS (catalog
  ``kubernetes_addons.gpu_operator``, :func:`blueprints.vendor.gpu_operator_for_kubernetes`): the EKS AL2023 NVIDIA AMI
  already ships the driver and container toolkit, so the operator runs with ``driver`` and
  ``toolkit`` off (device plugin, GPU feature discovery, DCGM exporter on); sandbox workloads
  (Kata / VM passthrough) are enabled when a node group declares them
  (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/amazon-eks.html);
* **AWS EFA device plugin** (Helm, https://aws.github.io/eks-charts) scheduled by the
  ``clusterforge.io/efa=true`` label that only EFA node groups carry, and limited to their
  instance types;
* **FSx for Lustre CSI driver** (Helm) and, for every FSx file system of the stack, a statically
  provisioned PersistentVolume + PersistentVolumeClaim bound by name with the empty storage class
  (``volumeHandle`` = the file system id, ``dnsname`` / ``mountname`` attributes)
  (https://github.com/kubernetes-sigs/aws-fsx-csi-driver/blob/master/docs/static-provisioning.md).
  No dynamic StorageClass: it would need a throughput value and FSx permissions for the CSI
  controller, and a claim against it would stay Pending without them;
* a **RuntimeClass** per declared Kata / gVisor sandbox, scheduled onto the node groups that
  configured that runtime (GPU pods need the right runtime);
* the **Kubeflow MPI operator** (its release manifest, server-side) for the validation jobs;
* the validation **Namespace**.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from blueprints.naming import LABEL_EFA, LABEL_SANDBOX, Naming
from blueprints.vendor import fsx_csi_chart

__all__ = [
    "EFA_PLUGIN_REPO",
    "FSX_CSI_CHART_VERSION",
    "FSX_CSI_REPO",
    "GPU_OPERATOR_REPO",
    "STATIC_STORAGE_CLASS",
    "AddonsArgs",
    "FsxVolume",
    "KubernetesAddons",
    "SandboxClass",
    "mpi_operator_manifest",
]

GPU_OPERATOR_REPO = "https://helm.ngc.nvidia.com/nvidia"
EFA_PLUGIN_REPO = "https://aws.github.io/eks-charts"
FSX_CSI_REPO = "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"
FSX_CSI_CHART_VERSION = fsx_csi_chart()
"""aws-fsx-csi-driver chart version (catalog ``kubernetes_addons.fsx_csi_driver``, with its Kubernetes minimum)."""
FSX_CSI_DRIVER = "fsx.csi.aws.com"
STATIC_STORAGE_CLASS = ""
"""Storage class of the static FSx volumes: the empty class, so no provisioner acts on the claims."""


def mpi_operator_manifest(version: str) -> str:
    """URL of the Kubeflow MPI operator release manifest (v2beta1 API) for ``version``, at the release's commit
    pinned in the catalog (``kubernetes_addons.mpi_operator``: an immutable reference, never the tag, which can
    be moved). Raises ``KeyError`` naming the catalog key to fill for a release the catalog does not pin."""
    from blueprints.vendor import mpi_operator_manifest_ref

    return mpi_operator_manifest_ref(version)[0]


@dataclass(frozen=True)
class FsxVolume:
    """An FSx file system to expose as a PV/PVC: storage ``name``, ``capacity_gib`` and the deployed
    ``file_system_id`` / ``dns_name`` / ``mount_name``."""

    name: str
    capacity_gib: int
    file_system_id: pulumi.Input[str]
    dns_name: pulumi.Input[str]
    mount_name: pulumi.Input[str]
    mount_options: Sequence[str] = ("flock",)


@dataclass(frozen=True)
class SandboxClass:
    """A RuntimeClass to create: its ``name``, the containerd ``handler`` and the sandbox ``runtime``
    (the ``clusterforge.io/sandbox`` node label value)."""

    name: str
    handler: str
    runtime: str


@dataclass(frozen=True)
class AddonsArgs:
    """Inputs of :class:`KubernetesAddons`.

    ``namespace``: validation namespace; ``gpu_operator_version`` / ``efa_device_plugin_version`` /
    ``mpi_operator_version``: pinned versions from the blueprint (``gpu_operator_version`` ``None``: no release is
    listed for the cluster's Kubernetes version, refused with ``gpu`` set); ``gpu``: any GPU node group;
    ``efa_instance_types``: instance types of the node groups with EFA attached (empty: no plugin);
    ``sandbox_workloads``: some node group passes GPUs into Kata / VMs; ``sandboxes``: RuntimeClasses;
    ``fsx``: file systems for PV/PVCs.
    """

    naming: Naming
    namespace: str
    gpu_operator_version: str | None
    efa_device_plugin_version: str
    mpi_operator_version: str
    gpu: bool
    efa_instance_types: Sequence[str] = ()
    sandbox_workloads: bool = False
    sandboxes: Sequence[SandboxClass] = ()
    fsx: Sequence[FsxVolume] = ()
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)


class KubernetesAddons(pulumi.ComponentResource):
    """The add-ons. Pass the EKS cluster's Kubernetes provider in ``opts.providers``. Raises
    :class:`pulumi.RunError` when GPU nodes need the operator and ``args.gpu_operator_version`` is unset."""

    def __init__(self, name: str, args: AddonsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("clusterforge:k8s:Addons", name, None, opts)
        n = args.naming
        labels = n.labels()
        child = pulumi.ResourceOptions(parent=self)
        after_nodes = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        ns = k8s.core.v1.Namespace(f"{name}-namespace",
                                   metadata=k8s.meta.v1.ObjectMetaArgs(name=args.namespace, labels=labels), opts=child)
        if args.gpu:
            if not args.gpu_operator_version:  # check's gpu-operator-kubernetes refuses such a blueprint first
                raise pulumi.RunError("no NVIDIA GPU Operator release is listed for this Kubernetes version on EKS "
                                      "(catalog kubernetes_addons.gpu_operator): set `orchestrator.gpu_operator_version`")
            k8s.helm.v3.Release(
                f"{name}-gpu-operator", name="gpu-operator", chart="gpu-operator", version=args.gpu_operator_version,
                namespace="gpu-operator", create_namespace=True,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=GPU_OPERATOR_REPO),
                values={
                    "driver": {"enabled": False},
                    "toolkit": {"enabled": False},
                    "dcgmExporter": {"enabled": True},
                    "sandboxWorkloads": {"enabled": bool(args.sandbox_workloads)},
                },
                opts=after_nodes)
        if args.efa_instance_types:
            k8s.helm.v3.Release(
                f"{name}-efa-device-plugin", name="aws-efa-k8s-device-plugin", chart="aws-efa-k8s-device-plugin",
                version=args.efa_device_plugin_version, namespace="kube-system",
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=EFA_PLUGIN_REPO),
                values={
                    "nodeSelector": {LABEL_EFA: "true"},
                    "supportedInstanceLabels": {"keys": ["node.kubernetes.io/instance-type"],
                                                "values": sorted(set(args.efa_instance_types))},
                    "tolerations": [{"operator": "Exists"}],
                },
                opts=after_nodes)
        if args.fsx:
            csi = k8s.helm.v3.Release(
                f"{name}-fsx-csi-driver", name="aws-fsx-csi-driver", chart="aws-fsx-csi-driver",
                version=FSX_CSI_CHART_VERSION, namespace="kube-system",
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=FSX_CSI_REPO),
                values={"node": {"tolerateAllTaints": True}},
                opts=after_nodes)
            for v in args.fsx:
                pv = k8s.core.v1.PersistentVolume(
                    f"{name}-{v.name}-pv",
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        name=n.name(v.name), labels={**labels, "clusterforge.io/storage": v.name}),
                    spec=k8s.core.v1.PersistentVolumeSpecArgs(
                        capacity={"storage": f"{v.capacity_gib}Gi"},
                        volume_mode="Filesystem",
                        access_modes=["ReadWriteMany"],
                        persistent_volume_reclaim_policy="Retain",
                        storage_class_name=STATIC_STORAGE_CLASS,
                        mount_options=list(v.mount_options),
                        csi=k8s.core.v1.CSIPersistentVolumeSourceArgs(
                            driver=FSX_CSI_DRIVER, volume_handle=v.file_system_id,
                            volume_attributes={"dnsname": v.dns_name, "mountname": v.mount_name}),
                    ),
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[csi]))
                k8s.core.v1.PersistentVolumeClaim(
                    f"{name}-{v.name}-pvc",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name=v.name, namespace=args.namespace, labels=labels),
                    spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
                        access_modes=["ReadWriteMany"],
                        storage_class_name=STATIC_STORAGE_CLASS,
                        volume_name=pv.metadata.apply(lambda m: str(m.name)),
                        resources=k8s.core.v1.VolumeResourceRequirementsArgs(
                            requests={"storage": f"{v.capacity_gib}Gi"}),
                    ),
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]))
        for sb in args.sandboxes:
            k8s.node.v1.RuntimeClass(
                f"{name}-runtimeclass-{sb.name}", metadata=k8s.meta.v1.ObjectMetaArgs(name=sb.name, labels=labels),
                handler=sb.handler, scheduling=k8s.node.v1.SchedulingArgs(node_selector={LABEL_SANDBOX: sb.runtime}),
                opts=child)
        k8s.yaml.v2.ConfigFile(f"{name}-mpi-operator", file=mpi_operator_manifest(args.mpi_operator_version),
                               opts=after_nodes)
        self.register_outputs({"namespace": args.namespace})
