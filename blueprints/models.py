"""Typed blueprint models (``apiVersion: clusterforge/v1``, ``kind: Blueprint``).

Every model is strict (unknown keys are errors) and frozen; every field carries a description
(it becomes the JSON Schema and the README's blueprint reference); every "one of" is a
discriminated union on a ``Literal`` tag. Shorthand forms are accepted on input and stored in
canonical form: ``gpu: h100-sxm:8``, ``capacity: spot``, ``sandbox: kata``, ``suites: [nccl]``.

Cross-field checks that need the hardware catalog or several sections live in
:mod:`blueprints.rules`, not here, so that they report with a rule id, a fix and a source.
"""


import ipaddress
import re
from typing import Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from .values import DNS_LABEL_PATTERN, templated_strings
from .values import KINDS as VK

__all__ = [
    "API_VERSION",
    "Blueprint",
    "Network",
    "NodeGroup",
    "Storage",
]

API_VERSION = "clusterforge/v1"

DNS_LABEL = rf"^{DNS_LABEL_PATTERN}$"
"""RFC 1123 label, lower case: used for the blueprint and node group names (resource prefixes)."""



class StrictModel(BaseModel):
    """Base of every blueprint model: unknown keys are rejected, instances are immutable."""

    # defer_build: validators are built when a model first validates, not when this module is
    # imported; with annotations as objects (no `from __future__ import annotations` here, so
    # pydantic evaluates no strings) a cold `clusterforge check` costs 20-30 ms less CPU
    # (bench/bench_cli_startup.py). Defaults that are models are made with `model_construct()`, not
    # `Model()`: calling a deferred model builds its validator at import (22 of them, about 50 ms of a
    # cold `check`); tests/blueprints/test_models.py checks each such default equals the validated one.
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True, defer_build=True)


# ---------------------------------------------------------------------------------------------
# target
# ---------------------------------------------------------------------------------------------


class OnDemandCapacity(StrictModel):
    """Regular on-demand instances."""

    type: Annotated[Literal["on-demand"], Field(description="Capacity type tag.")]


class SpotCapacity(StrictModel):
    """EC2 Spot instances (interruptible)."""

    type: Annotated[Literal["spot"], Field(description="Capacity type tag.")]
    max_price: Annotated[
        float | None, Field(description="Maximum hourly price in USD; unset means the on-demand price.", gt=0)
    ] = None


class CapacityBlockCapacity(StrictModel):
    """An EC2 Capacity Block for ML (a targeted reservation in one AZ, placed in an UltraCluster)."""

    type: Annotated[Literal["capacity-block"], Field(description="Capacity type tag.")]
    reservation_id: Annotated[
        str,
        Field(description="Capacity Block reservation id (`cr-...`), required at launch.", pattern=r"^cr-[0-9a-f]+$"),
    ]
    instance_count: Annotated[
        int | None, Field(description="Instances in the block (for size checks); unset = not checked.", ge=1)
    ] = None
    node_groups: Annotated[
        list[Annotated[str, VK["node-group-name"]]] | None,
        Field(description="Node groups that launch into the block; unset = the `compute` groups. The others launch "
                          "on demand."),
    ] = None


class ReservationCapacity(StrictModel):
    """An On-Demand Capacity Reservation (ODCR) targeted by id."""

    type: Annotated[Literal["reservation"], Field(description="Capacity type tag.")]
    reservation_id: Annotated[
        str, Field(description="Capacity reservation id (`cr-...`).", pattern=r"^cr-[0-9a-f]+$")
    ]
    instance_count: Annotated[
        int | None, Field(description="Instances reserved (for size checks); unset = not checked.", ge=1)
    ] = None
    placement_group: Annotated[
        Annotated[str, VK["aws-name"]] | None,
        Field(description="Name of the cluster placement group the reservation was created in, if any."),
    ] = None
    node_groups: Annotated[
        list[Annotated[str, VK["node-group-name"]]] | None,
        Field(description="Node groups that launch into the reservation; unset = the `compute` groups. The others "
                          "launch on demand."),
    ] = None


Capacity = Annotated[
    Union[OnDemandCapacity, SpotCapacity, CapacityBlockCapacity, ReservationCapacity],
    Field(discriminator="type"),
]


class AwsVpc(StrictModel):
    """The VPC and subnet the cluster lives in: a new one (CIDRs) or an existing one (ids)."""

    cidr_block: Annotated[Annotated[str, VK["cidr"]], Field(description="CIDR of a new VPC.")] = "10.0.0.0/16"
    subnet_cidr_block: Annotated[Annotated[str, VK["cidr"]], Field(description="CIDR of the new private compute subnet.")] = "10.0.0.0/20"
    public_subnet_cidr_block: Annotated[
        Annotated[str, VK["cidr"]], Field(description="CIDR of the new public subnet that holds the NAT gateway.")
    ] = "10.0.16.0/24"
    vpc_id: Annotated[Annotated[str, VK["aws-id"]] | None, Field(description="Use this existing VPC (`vpc-...`) instead of creating one.")] = None
    subnet_id: Annotated[
        Annotated[str, VK["aws-id"]] | None, Field(description="Use this existing subnet (`subnet-...`) in `availability_zone`.")
    ] = None
    nat_gateway: Annotated[
        bool, Field(description="Create an internet gateway and a NAT gateway so private nodes reach the internet.")
    ] = True
    control_plane_subnet_cidr_block: Annotated[
        Annotated[str, VK["cidr"]], Field(description="CIDR of the new EKS control-plane subnet in a second AZ (EKS needs two AZs).")
    ] = "10.0.24.0/24"
    control_plane_subnet_ids: Annotated[
        list[Annotated[str, VK["aws-id"]]],
        Field(description="Existing subnets (`subnet-...`, two AZs) for the EKS control plane when `subnet_id` is set."),
    ] = []

    @field_validator("cidr_block", "subnet_cidr_block", "public_subnet_cidr_block", "control_plane_subnet_cidr_block")
    @classmethod
    def _cidr(cls, v: str) -> str:
        ipaddress.ip_network(v, strict=True)
        return v


class AwsTarget(StrictModel):
    """Deploy to AWS with Pulumi (EC2 instances or EKS)."""

    # ---- what differs per target in the node settings (``blueprints.settings``), fixed per provider
    scratch_discovery: ClassVar[Literal["instance-store", "nvme-data"]] = "instance-store"
    """Which NVMe drives the scratch array is built from on this target (``NodeSettings.scratch``):
    the EC2 instance-store model only (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ssd-instance-store.html)."""
    host_software: ClassVar[Literal["image", "roles"]] = "image"
    """Who installs the GPU driver packages, out-of-tree kernel modules, kernel holds and the DOCA
    repository: the node image the stack boots (catalog ``node_images``), not the roles."""
    lustre_client: ClassVar[Literal["fsx", "site"]] = "fsx"
    """Where the Lustre client comes from: Amazon's FSx client repository (catalog ``fsx_client``)."""
    instance_types: ClassVar[bool] = True
    """Node groups name an EC2 instance type (``NodeSettings.instance_type``)."""
    sandbox_handlers: ClassVar[Literal["user-data", "runtime-class"]] = "user-data"
    """The containerd handler of a Kata / gVisor sandbox is the one the cloud user data registers
    (``runsc``, or the RuntimeClass name, else ``kata``)."""

    def node_os(self, node_images: dict[str, Any], *, kubernetes: bool, gpus: bool) -> str:
        """The OS of the image the stack boots, from the catalog's ``aws.node_images``: EKS's AL2023
        image, else the Deep Learning AMI (GPU groups) or Ubuntu."""
        return str(node_images["eks" if kubernetes else "ec2_gpu" if gpus else "ec2_cpu"]["os"])

    provider: Annotated[Literal["aws"], Field(description="Target tag.")]
    region: Annotated[str, Field(description="AWS region, e.g. `us-east-1`.", pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$")]
    availability_zone: Annotated[
        str,
        Field(
            description="The one availability zone every node and file system is placed in (EFA is single-subnet).",
            pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$",
        ),
    ]
    capacity: Annotated[
        Capacity,
        Field(description="How instances are bought: `on-demand`, `spot`, `capacity-block` or `reservation`."),
    ] = OnDemandCapacity.model_construct(type="on-demand")
    vpc: Annotated[AwsVpc, Field(description="VPC and subnet settings.")] = AwsVpc.model_construct()
    ssh_ingress_cidrs: Annotated[
        list[Annotated[str, VK["cidr"]]],
        Field(description="CIDRs allowed to reach port 22. Empty (default): no SSH ingress, use SSM Session Manager."),
    ] = []
    key_name: Annotated[Annotated[str, VK["aws-name"]] | None, Field(description="EC2 key pair name for SSH; unset = none.")] = None
    ami_id: Annotated[
        Annotated[str, VK["aws-id"]] | None,
        Field(description="AMI id; unset = the latest AWS Deep Learning Base GPU AMI (Ubuntu 22.04) of the region."),
    ] = None
    root_volume_gib: Annotated[int, Field(description="Encrypted gp3 root volume size in GiB.", ge=30, le=16384)] = 200
    tags: Annotated[dict[Annotated[str, VK["aws-tag-key"]], Annotated[str, VK["aws-tag-value"]]], Field(description="Extra tags on every resource.")] = {}

    @model_validator(mode="before")
    @classmethod
    def _capacity_shorthand(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("capacity"), str):
            data = {**data, "capacity": {"type": data["capacity"]}}
        return data

    @field_validator("ssh_ingress_cidrs")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        for c in v:
            ipaddress.ip_network(c, strict=False)
        return v


class SshSettings(StrictModel):
    """How Ansible reaches on-prem hosts. Only a key *path* is stored, never key material."""

    user: Annotated[Annotated[str, VK["user-name"]], Field(description="Remote user.")] = "root"
    port: Annotated[int, Field(description="SSH port.", ge=1, le=65535)] = 22
    private_key_file: Annotated[
        Annotated[str, VK["file-path"]] | None, Field(description="Path to the private key on the control machine (never its contents).")
    ] = None
    become: Annotated[bool, Field(description="Use sudo for privileged tasks.")] = True


OnpremOs = Literal["debian-12", "ubuntu-22.04", "ubuntu-24.04"]
"""Operating systems the Ansible roles converge in the test suite (RHEL-family hosts are not supported yet)."""


class OnpremTarget(StrictModel):
    """Provision existing bare-metal servers with Ansible."""

    # ---- what differs per target in the node settings (``blueprints.settings``), fixed per provider
    scratch_discovery: ClassVar[Literal["instance-store", "nvme-data"]] = "nvme-data"
    """Which NVMe drives the scratch array is built from on this target: every NVMe namespace
    without partitions, filesystem or mount that is not the root disk."""
    host_software: ClassVar[Literal["image", "roles"]] = "roles"
    """The roles install the GPU driver packages, out-of-tree kernel modules, kernel holds and the DOCA repository."""
    lustre_client: ClassVar[Literal["fsx", "site"]] = "site"
    """The Lustre client comes from the site's packages (catalog ``bare_metal.lustre_client``)."""
    instance_types: ClassVar[bool] = False
    """Node groups declare their hosts' hardware; there is no instance type."""
    sandbox_handlers: ClassVar[Literal["user-data", "runtime-class"]] = "runtime-class"
    """The roles register a sandbox's containerd handler under its RuntimeClass name."""

    def node_os(self, node_images: dict[str, Any], *, kubernetes: bool, gpus: bool) -> str:
        """The declared ``os`` of every host."""
        return self.os

    provider: Annotated[Literal["onprem"], Field(description="Target tag.")]
    os: Annotated[OnpremOs, Field(description="Operating system on every host.")] = "ubuntu-22.04"
    ssh: Annotated[SshSettings, Field(description="SSH connection settings.")] = SshSettings.model_construct()


Target = Annotated[Union[AwsTarget, OnpremTarget], Field(discriminator="provider")]


# ---------------------------------------------------------------------------------------------
# node groups
# ---------------------------------------------------------------------------------------------


def _parse_model_count(v: Any, key: str) -> Any:
    """``"h100-sxm:8"`` -> ``{"model": "h100-sxm", "count": 8}``; other input unchanged.

    Raises ``PydanticCustomError`` (type ``shorthand``, with the fix in its context) when the part
    after ``:`` is not a whole number (``h100-sxm:eight``) or the model before it is missing.
    """
    if isinstance(v, str):
        model, sep, count = v.partition(":")
        model, count = model.strip(), count.strip()
        example = f"{model or 'h100-sxm'}:8"
        if sep and not model:
            raise PydanticCustomError("shorthand", "the shorthand `{value}` names no model before `:`",
                                      {"value": v, "fix": f"write the model first, e.g. `{example}`"})
        if sep and not re.fullmatch(r"\d+", count):
            raise PydanticCustomError(
                "shorthand", "the count in `{value}` must be a positive whole number, got `{count}`",
                {"value": v, "count": count, "fix": f"write the count in digits, e.g. `{example}`"})
        if model:
            return {key: model, "count": int(count or 1)}
    return v


class GpuHardware(StrictModel):
    """GPUs in one host. Shorthand: `h100-sxm:8`."""

    model: Annotated[
        Annotated[str, VK["gpu-name"]], Field(description="GPU catalog key (`h100-sxm`, `a100-40gb-sxm`, `l40s` ...) or an nvidia-smi name.")
    ]
    count: Annotated[int, Field(description="GPUs per host.", ge=1, le=72)] = 8
    nvswitch: Annotated[
        bool | None,
        Field(description="GPUs joined by NVSwitch (needs Fabric Manager). Unset = SXM parts with 8 GPUs."),
    ] = None


class Nic(StrictModel):
    """One fabric network adapter port."""

    device: Annotated[Annotated[str, VK["rdma-device"]], Field(description="RDMA device name, e.g. `mlx5_0`.")]
    port: Annotated[int, Field(description="Port number on the device.", ge=1, le=2)] = 1
    netdev: Annotated[Annotated[str, VK["interface-name"]] | None, Field(
        description="Kernel network interface, e.g. `ibp12s0` or `ens1f0np0`. Needed on RoCE (QoS is set per interface; "
                    "a rule asks) and on InfiniBand with IPoIB or Lustre, which bind to the first InfiniBand port's "
                    "netdev: without one the host gets no IPoIB address and LNet no `o2ib` interface (no interface "
                    "name is guessed). Also what `network.nccl.socket_ifname` is checked against.")] = None
    speed_gbps: Annotated[float, Field(description="Line rate in Gbit/s (1e9 bit/s).", gt=0)]
    numa_node: Annotated[int | None, Field(description="NUMA node the adapter is attached to.", ge=0)] = None
    link_layer: Annotated[
        Literal["infiniband", "ethernet"], Field(description="Link layer of the port.")
    ] = "infiniband"


class NvmeHardware(StrictModel):
    """NVMe data drives in one host (not the OS drive). Devices are discovered, never named."""

    count: Annotated[int, Field(description="Number of data drives.", ge=1, le=64)]
    model: Annotated[
        Annotated[str, VK["catalog-key"]] | None, Field(description="Drive catalog key (`samsung-pm1743` ...) for throughput expectations.")
    ] = None
    size_gb: Annotated[float | None, Field(description="Capacity per drive in GB.", gt=0)] = None
    seq_read_mb_s: Annotated[
        float | None, Field(description="Per-drive sequential read MB/s (1e6 bytes/s), overrides the catalog.", gt=0)
    ] = None
    seq_write_mb_s: Annotated[
        float | None, Field(description="Per-drive sequential write MB/s, overrides the catalog.", gt=0)
    ] = None
    by_id: Annotated[
        list[Annotated[str, VK["abs-path"]]],
        Field(description="Optional `/dev/disk/by-id/...` paths to restrict discovery to; never `/dev/nvmeXn1`."),
    ] = []


class CpuTopology(StrictModel):
    """CPU topology of one host, as `slurmd -C` prints it (https://slurm.schedmd.com/slurm.conf.html#OPT_Sockets)."""

    sockets: Annotated[int, Field(description="CPU sockets (packages) per host.", ge=1, le=16)]
    cores_per_socket: Annotated[int, Field(description="Physical cores per socket.", ge=1, le=1024)]
    threads_per_core: Annotated[int, Field(description="Hardware threads per core (2 with SMT on).", ge=1, le=8)] = 1

    @property
    def cpus(self) -> int:
        """Logical CPUs per host: sockets x cores per socket x threads per core."""
        return self.sockets * self.cores_per_socket * self.threads_per_core


class Hardware(StrictModel):
    """Hardware of on-prem hosts (cloud hosts take it from the instance type in the catalog)."""

    gpu: Annotated[GpuHardware | None, Field(description="GPUs per host; unset for CPU-only hosts.")] = None
    nics: Annotated[list[Nic], Field(description="Fabric adapters (one per rail on GPU nodes).")] = []
    nvme: Annotated[NvmeHardware | None, Field(description="Local NVMe data drives.")] = None
    cpu_vendor: Annotated[
        Literal["intel", "amd", "arm"] | None,
        Field(description="CPU vendor (selects `intel_iommu`/`amd_iommu`); unset = detected by Ansible facts."),
    ] = None
    system: Annotated[
        Annotated[str, VK["catalog-key"]] | None, Field(description="Informational system model from the catalog, e.g. `dgx-h100`.")
    ] = None
    cpu: Annotated[
        CpuTopology | None,
        Field(description="CPU topology of one host (what `slurmd -C` reports); unset = the catalog system's. "
                          "Slurm's node lines need it."),
    ] = None
    memory_gib: Annotated[
        float | None,
        Field(description="Installed memory of one host in GiB (2^30 bytes); unset = the catalog system's. Slurm's "
                          "`RealMemory` is 95 % of it.", gt=0),
    ] = None

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu_shorthand(cls, v: Any) -> Any:
        return _parse_model_count(v, "model")


class Host(StrictModel):
    """One on-prem server."""

    name: Annotated[str, Field(description="Inventory hostname.", pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")]
    address: Annotated[Annotated[str, VK["host-address"]], Field(description="IP address or DNS name Ansible connects to.")]
    connection: Annotated[
        Literal["ssh", "local"], Field(description="`local` runs on the control machine itself (no SSH).")
    ] = "ssh"


class LocalNvme(StrictModel):
    """Local NVMe scratch: all data drives in one RAID0 (or the single drive), formatted and mounted."""

    raid: Annotated[Literal["raid0", "none"], Field(description="`raid0` over all drives, `none` for one drive.")] = "raid0"
    filesystem: Annotated[Literal["xfs", "ext4"], Field(description="Filesystem.")] = "xfs"
    mount: Annotated[Annotated[str, VK["abs-path"]], Field(description="Mount point.")] = "/scratch"
    mount_options: Annotated[list[Annotated[str, VK["mount-option"]]], Field(description="Mount options.")] = ["defaults", "noatime", "nofail"]
    chunk_kib: Annotated[int, Field(description="RAID chunk size in KiB.", ge=4, le=65536)] = 512
    wipe_signatures: Annotated[
        bool,
        Field(description="Destroy existing signatures (filesystem, LVM PV, md superblock, partition table, LUKS) on "
                          "the data drives. Default false: a drive holding any of them is refused and left untouched."),
    ] = False


SandboxRuntime = Literal["container", "kata", "gvisor", "vm"]


class VmSettings(StrictModel):
    """Size of libvirt/QEMU VMs with passed-through GPUs (runtime `vm`)."""

    vcpus: Annotated[int, Field(description="vCPUs per VM.", ge=1)] = 16
    memory_gib: Annotated[int, Field(description="Memory per VM in GiB.", ge=1)] = 128
    gpus_per_vm: Annotated[int, Field(description="GPUs passed into each VM.", ge=1)] = 1
    image: Annotated[Annotated[str, VK["image-ref"]] | None, Field(description="Base image path or URL for the VM disk.")] = None


class NvswitchPlan(StrictModel):
    """How the NVSwitch fabric of an HGX/DGX baseboard is handled when its GPUs go into guests.

    ``full-passthrough``: every GPU and every NVSwitch of the host goes to one guest and Fabric
    Manager runs inside the guest (the host runs none); clusterforge binds the NVSwitches to
    vfio-pci with the GPUs and sizes the guest's PCIe root ports. ``shared-nvswitch``: the host keeps
    the NVSwitches; clusterforge installs the driver and Fabric Manager on the host and runs it in
    shared NVSwitch mode (``FABRIC_MODE=1``), and ``check`` accepts only the partition sizes Fabric
    Manager offers. Activating the partition of ``gpus_per_guest`` GPUs for each guest (Fabric
    Manager API, or NVIDIA's ``fmpm -a <partition id>``, before the guest starts; deactivating it
    after) is not rendered: the VM or Kata orchestrator must do it. Sources:
    https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html,
    https://github.com/NVIDIA/Fabric-Manager-Client
    """

    mode: Annotated[
        Literal["full-passthrough", "shared-nvswitch"],
        Field(description="`full-passthrough` (all GPUs + NVSwitches to one guest, Fabric Manager in the guest) or "
                          "`shared-nvswitch` (Fabric Manager on the host in shared NVSwitch mode; each guest's GPU partition "
                          "is activated by the VM/Kata orchestrator, not by clusterforge)."),
    ]
    gpus_per_guest: Annotated[
        int | None,
        Field(description="`shared-nvswitch`: GPUs in each guest's partition (1, 2, 4 or 8 on an 8-GPU baseboard); "
                          "unset = `vm.gpus_per_vm` for VMs, else all GPUs.", ge=1),
    ] = None


class Sandbox(StrictModel):
    """What workloads run in. Shorthand: `sandbox: kata`."""

    runtime: Annotated[
        SandboxRuntime,
        Field(description="`container` (runc + NVIDIA toolkit), `kata` (micro-VM), `gvisor` (runsc), `vm` (libvirt)."),
    ] = "container"
    gpu_passthrough: Annotated[
        bool | None,
        Field(description="Bind GPUs to vfio-pci and pass them whole into Kata / VMs. Unset = on for kata and vm."),
    ] = None
    runtime_class: Annotated[
        Annotated[str, VK["dns-subdomain"]] | None, Field(description="Kubernetes RuntimeClass name; unset = derived from the runtime.")
    ] = None
    vm: Annotated[VmSettings | None, Field(description="VM sizing (runtime `vm`).")] = None
    nvswitch: Annotated[
        NvswitchPlan | None,
        Field(description="Fabric plan for passing the SXM GPUs of an NVSwitch system into guests (`full-passthrough` "
                          "or `shared-nvswitch`). Required for passthrough on NVSwitch systems. Shorthand: the mode."),
    ] = None

    @field_validator("nvswitch", mode="before")
    @classmethod
    def _nvswitch_shorthand(cls, v: Any) -> Any:
        return {"mode": v} if isinstance(v, str) else v

    @property
    def passthrough(self) -> bool:
        """Whether GPUs are bound to vfio-pci for this sandbox."""
        if self.gpu_passthrough is not None:
            return self.gpu_passthrough
        return self.runtime in ("kata", "vm")

    @property
    def runtime_class_name(self) -> str | None:
        """RuntimeClass for Kubernetes pods (`None` for plain containers)."""
        if self.runtime_class:
            return self.runtime_class
        return {"kata": "kata-qemu-nvidia-gpu", "gvisor": "gvisor", "vm": None, "container": "nvidia"}[self.runtime]


NodeRole = Literal["compute", "login", "controller", "storage"]


class NodeGroup(StrictModel):
    """A set of identical nodes. AWS groups name an `instance_type` and `count`; on-prem groups
    list `hosts` and describe their `hardware`."""

    name: Annotated[str, Field(description="DNS-safe group name, used in resource names.", pattern=DNS_LABEL)]
    role: Annotated[NodeRole, Field(description="`compute` (GPU training), `login`, `controller`, `storage`.")] = "compute"
    count: Annotated[int | None, Field(description="Number of instances (AWS). On-prem: the hosts list.", ge=0, le=4096)] = None
    instance_type: Annotated[Annotated[str, VK["instance-type"]] | None, Field(description="AWS instance type, e.g. `p5.48xlarge`.")] = None
    hosts: Annotated[list[Host], Field(description="On-prem hosts of this group.")] = []
    hardware: Annotated[Hardware | None, Field(description="On-prem hardware of every host in the group.")] = None
    local_nvme: Annotated[LocalNvme | None, Field(description="Local NVMe scratch; unset = left alone.")] = None
    sandbox: Annotated[Sandbox, Field(description="Workload sandbox runtime.")] = Sandbox.model_construct()
    public_ip: Annotated[bool, Field(description="Give nodes public IPv4 addresses (AWS).")] = False
    labels: Annotated[dict[Annotated[str, VK["label-key"]], Annotated[str, VK["label-value"]]], Field(description="Labels: Kubernetes node labels, Ansible group vars, tags.")] = {}

    @field_validator("sandbox", mode="before")
    @classmethod
    def _sandbox_shorthand(cls, v: Any) -> Any:
        return {"runtime": v} if isinstance(v, str) else v

    @property
    def size(self) -> int:
        """Number of nodes: `count` for AWS groups, the number of hosts on-prem."""
        return self.count if self.count is not None else len(self.hosts)

    @property
    def compute(self) -> bool:
        """A compute group (``role: compute``): its nodes run jobs, are validated and use the hardware
        catalog's instance types. The one definition; :class:`blueprints.resolved.ResolvedGroup` and
        the rules read it."""
        return self.role == "compute"


# ---------------------------------------------------------------------------------------------
# network
# ---------------------------------------------------------------------------------------------

Placement = Literal["cluster", "partition", "spread", "none"]


class GpuDirectRdma(StrictModel):
    """GPUDirect RDMA: NICs read and write GPU memory directly."""

    enabled: Annotated[
        bool | None,
        Field(description="Enable GPUDirect RDMA. Unset = on for GPU groups, off for groups that pass their GPUs "
                          "into sandboxes (vfio-pci owns those GPUs, so host-side GPUDirect RDMA cannot apply)."),
    ] = None
    method: Annotated[
        Literal["nvidia-peermem", "dmabuf"] | None,
        Field(description="Peer-memory path: `nvidia-peermem` module or DMA-BUF (open kernel modules, kernel >= 5.12)."),
    ] = None

    def effective_method(self, open_kernel_modules: bool) -> Literal["nvidia-peermem", "dmabuf"]:
        """The peer-memory path in use: ``method`` when written, else DMA-BUF with the open GPU kernel
        modules (no peer-memory API needed) and ``nvidia-peermem`` with the proprietary ones.
        Source: https://docs.nvidia.com/cuda/gpudirect-rdma/index.html#linux-kernel-dma-buf-support"""
        return self.method or ("dmabuf" if open_kernel_modules else "nvidia-peermem")

    def on_for(self, passthrough: bool) -> bool:
        """Whether GPUDirect RDMA is on for a node group: ``enabled`` when written, else on unless the
        group passes its GPUs into sandbox guests (``passthrough``)."""
        return self.enabled if self.enabled is not None else not passthrough


class NcclSettings(StrictModel):
    """Extra NCCL environment written to `/etc/nccl.conf` and the node environment."""

    env: Annotated[dict[Annotated[str, VK["env-name"]], Annotated[str, VK["env-value"]]], Field(description="Extra `NCCL_*` / `FI_*` variables.")] = {}
    socket_ifname: Annotated[Annotated[str, VK["interface-list"]] | None, Field(description="`NCCL_SOCKET_IFNAME` for bootstrap traffic.")] = None
    debug: Annotated[Literal["", "WARN", "INFO", "TRACE"], Field(description="`NCCL_DEBUG` level.")] = ""


class _NetworkBase(StrictModel):
    display_name: ClassVar[str]
    """The fabric's name in prose (``InfiniBand``)."""
    rdma: ClassVar[bool] = False
    """NCCL should move data over RDMA on this fabric (a net plugin or IB verbs), never TCP sockets."""
    ib_verbs: ClassVar[bool] = False
    """NCCL reaches the NICs through IB verbs (``NCCL_IB_*``, GPUDirect RDMA via ``/GDRDMA`` channels)."""

    placement: Annotated[
        Placement | None,
        Field(description="AWS: EC2 placement group strategy (`none` = explicitly none); unset = not decided (a rule "
                          "asks). On-prem it has no effect (servers are placed by racking and cabling)."),
    ] = None
    gpudirect_rdma: Annotated[GpuDirectRdma, Field(description="GPUDirect RDMA settings.")] = GpuDirectRdma.model_construct()
    nccl: Annotated[NcclSettings, Field(description="NCCL settings.")] = NcclSettings.model_construct()
    mtu: Annotated[int | None, Field(description="Interface MTU on the fabric.", ge=576, le=9216)] = None


class EfaSettings(StrictModel):
    """Elastic Fabric Adapter layout."""

    interfaces: Annotated[
        int | Literal["max"],
        Field(description="EFA interfaces per instance: `max` = the instance type's maximum (one per network card)."),
    ] = "max"


class EfaNetwork(_NetworkBase):
    """AWS Elastic Fabric Adapter (libfabric `efa` provider, aws-ofi-nccl)."""

    display_name: ClassVar[str] = "EFA"
    rdma: ClassVar[bool] = True

    fabric: Annotated[Literal["efa"], Field(description="Fabric tag.")]
    efa: Annotated[EfaSettings, Field(description="EFA interface settings.")] = EfaSettings.model_construct()


class SubnetManager(StrictModel):
    """The InfiniBand subnet manager."""

    kind: Annotated[
        Literal["opensm", "ufm", "switch"] | None,
        Field(description="`opensm` on a host, `ufm` appliance or managed-`switch` SM. Unset = undeclared."),
    ] = None
    host: Annotated[Annotated[str, VK["host-name"]] | None, Field(description="Host that runs opensm (kind `opensm`).")] = None
    priority: Annotated[int, Field(description="SM priority 0-15.", ge=0, le=15)] = 14


class Ipoib(StrictModel):
    """IP over InfiniBand interfaces."""

    enabled: Annotated[bool, Field(description="Configure IPoIB.")] = True
    mode: Annotated[Literal["datagram", "connected"], Field(description="IPoIB mode.")] = "datagram"
    cidr: Annotated[Annotated[str, VK["cidr"]] | None, Field(description="IPoIB subnet; host addresses are assigned in host order.")] = None


class InfinibandSettings(StrictModel):
    """InfiniBand fabric settings."""

    generation: Annotated[
        Literal["EDR", "HDR", "NDR", "XDR"] | None, Field(description="Link generation (sets the expected rate).")
    ] = None
    subnet_manager: Annotated[SubnetManager, Field(description="Subnet manager.")] = SubnetManager.model_construct()
    ipoib: Annotated[Ipoib, Field(description="IPoIB settings.")] = Ipoib.model_construct()
    rail_optimized: Annotated[bool, Field(description="One leaf switch per rail (NIC index).")] = True


class InfinibandNetwork(_NetworkBase):
    """NVIDIA/Mellanox InfiniBand."""

    display_name: ClassVar[str] = "InfiniBand"
    rdma: ClassVar[bool] = True
    ib_verbs: ClassVar[bool] = True

    fabric: Annotated[Literal["infiniband"], Field(description="Fabric tag.")]
    placement: Annotated[
        Placement | None,
        Field(description="Not used: InfiniBand clusters are on-prem, where servers are placed by racking and cabling "
                          "(EC2 placement groups are AWS only); leave unset."),
    ] = None
    infiniband: Annotated[InfinibandSettings, Field(description="InfiniBand settings.")] = InfinibandSettings.model_construct()


class RoceSettings(StrictModel):
    """RoCEv2 lossless-Ethernet settings (must match the switches)."""

    flow_control: Annotated[
        Literal["pfc", "global-pause", "none"] | None,
        Field(description="Flow control: `pfc` on one priority (recommended), `global-pause`, `none`. Unset = undeclared."),
    ] = None
    trust: Annotated[Literal["dscp", "pcp"], Field(description="QoS trust mode on the NIC.")] = "dscp"
    pfc_priority: Annotated[int, Field(description="802.1p priority that carries RoCE and has PFC on.", ge=0, le=7)] = 3
    dscp: Annotated[int, Field(description="DSCP value of RoCE traffic.", ge=0, le=63)] = 26
    ecn: Annotated[bool, Field(description="Set ECN / DCQCN per priority on the hosts (bare metal: needs DOCA-OFED, "
                                           "whose sysfs tree has the per-priority switches). `false` leaves the NIC "
                                           "firmware's default congestion control as it is.")] = True
    gid_index: Annotated[
        Union[Annotated[int, Field(ge=0, le=255)], Literal["discover"]],
        Field(description="RoCEv2 GID index (`NCCL_IB_GID_INDEX`). `discover` (default): each node looks up the "
                          "RoCE v2 GID of its data-plane IPv4 address in the port's GID table; a fixed index can land "
                          "on a RoCE v1 or link-local entry."),
    ] = "discover"
    traffic_class: Annotated[
        int | None, Field(description="`NCCL_IB_TC`; unset = DSCP x 4 (the DSCP in the upper six bits).", ge=0, le=255)
    ] = None

    @property
    def effective_traffic_class(self) -> int:
        """`NCCL_IB_TC` value: the declared traffic class or `dscp << 2`."""
        return self.traffic_class if self.traffic_class is not None else self.dscp * 4


class RoceNetwork(_NetworkBase):
    """RDMA over Converged Ethernet v2."""

    display_name: ClassVar[str] = "RoCE"
    rdma: ClassVar[bool] = True
    ib_verbs: ClassVar[bool] = True

    fabric: Annotated[Literal["roce"], Field(description="Fabric tag.")]
    placement: Annotated[
        Placement | None,
        Field(description="Not used: RoCE clusters are on-prem, where servers are placed by racking and cabling "
                          "(EC2 placement groups are AWS only); leave unset."),
    ] = None
    roce: Annotated[RoceSettings, Field(description="RoCEv2 settings.")] = RoceSettings.model_construct()


class EthernetNetwork(_NetworkBase):
    """Plain TCP Ethernet (no RDMA): NCCL uses sockets."""

    display_name: ClassVar[str] = "Ethernet"

    fabric: Annotated[Literal["ethernet"], Field(description="Fabric tag.")]
    speed_gbps: Annotated[float | None, Field(description="Per-node line rate in Gbit/s.", gt=0)] = None


Network = Annotated[
    Union[EfaNetwork, InfinibandNetwork, RoceNetwork, EthernetNetwork], Field(discriminator="fabric")
]

NETWORK_MODELS: tuple[type[_NetworkBase], ...] = (EfaNetwork, InfinibandNetwork, RoceNetwork, EthernetNetwork)
"""Every fabric's network model, in the order of :data:`Network`."""


def fabric_tag(model: type[_NetworkBase]) -> str:
    """The ``fabric`` tag of a network model (``InfinibandNetwork`` -> ``infiniband``)."""
    return str(get_args(model.model_fields["fabric"].annotation)[0])


FABRICS: tuple[str, ...] = tuple(fabric_tag(m) for m in NETWORK_MODELS)
"""Fabric tags: ``efa``, ``infiniband``, ``roce``, ``ethernet``."""


# ---------------------------------------------------------------------------------------------
# storage
# ---------------------------------------------------------------------------------------------

FsxDeploymentType = Literal["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"]


class FsxMetadata(StrictModel):
    """FSx for Lustre metadata configuration (PERSISTENT_2 only)."""

    mode: Annotated[Literal["AUTOMATIC", "USER_PROVISIONED"], Field(description="Metadata IOPS mode.")] = "AUTOMATIC"
    iops: Annotated[
        int | None, Field(description="Metadata IOPS (USER_PROVISIONED only): 1500, 3000, 6000, 12000..192000.")
    ] = None


class FsxS3Repository(StrictModel):
    """An S3 data repository association."""

    data_repository_path: Annotated[Annotated[str, VK["s3-url"]], Field(description="`s3://bucket/prefix`.")]
    file_system_path: Annotated[Annotated[str, VK["abs-path"]], Field(description="Path inside the file system.")] = "/"
    auto_import: Annotated[bool, Field(description="Import new, changed and deleted S3 objects automatically.")] = True
    auto_export: Annotated[bool, Field(description="Export new, changed and deleted files automatically.")] = False


DEFAULT_BACKUP_RETENTION_DAYS = 7
"""Daily FSx backups kept when a blueprint does not say: clusterforge's choice (a week of restore points),
not an AWS default (the FSx API's is no backups)."""


class FsxLustre(StrictModel):
    """An FSx for Lustre file system created by the stack."""

    deployment_type: Annotated[FsxDeploymentType, Field(description="Deployment type.")] = "PERSISTENT_2"
    storage_capacity_gib: Annotated[int, Field(description="Storage capacity in GiB.", ge=1200)]
    throughput_per_tib_mbps: Annotated[
        int | None, Field(description="Per-unit storage throughput in MB/s per TiB (PERSISTENT_*).")
    ] = None
    storage_type: Annotated[Literal["SSD", "HDD"], Field(description="Storage type.")] = "SSD"
    drive_cache_type: Annotated[Literal["READ", "NONE"] | None, Field(description="HDD read cache.")] = None
    data_compression_type: Annotated[Literal["NONE", "LZ4"], Field(description="Data compression.")] = "LZ4"
    file_system_type_version: Annotated[
        Literal["2.10", "2.12", "2.15"], Field(description="Lustre version.")
    ] = "2.15"
    metadata: Annotated[FsxMetadata | None, Field(description="Metadata configuration (PERSISTENT_2).")] = None
    efa_enabled: Annotated[bool, Field(description="EFA + GPUDirect Storage (PERSISTENT_2 with metadata).")] = False
    kms_key_id: Annotated[Annotated[str, VK["aws-kms-key"]] | None, Field(description="Customer KMS key; unset = the AWS managed key.")] = None
    s3: Annotated[FsxS3Repository | None, Field(description="S3 data repository association.")] = None
    availability_zone: Annotated[
        Annotated[str, VK["aws-az"]] | None, Field(description="AZ of the file system; unset = the target's AZ (the only good choice).")
    ] = None
    automatic_backup_retention_days: Annotated[int | None, Field(
        description="Daily automatic backups kept, in days (0 = none). Unset: 7 where FSx takes backups "
                    "(PERSISTENT_* without an S3 link), none elsewhere.", ge=0, le=35)] = None
    final_backup: Annotated[bool, Field(
        description="`clusterforge down` takes a final backup before deleting the file system (FSx's own default is "
                    "none). `false` opts out: the data is gone with the file system. Only where FSx takes backups "
                    "(PERSISTENT_* without an S3 link).")] = True

    @property
    def backup_retention_days(self) -> int:
        """Days of daily backups the file system gets: ``automatic_backup_retention_days``, unset = 7
        (:data:`DEFAULT_BACKUP_RETENTION_DAYS`); only used where FSx takes backups."""
        d = self.automatic_backup_retention_days
        return DEFAULT_BACKUP_RETENTION_DAYS if d is None else d


class LustreServer(StrictModel):
    """An existing Lustre file system reached by its MGS NIDs."""

    mgs_nids: Annotated[
        list[Annotated[str, VK["lustre-nid"]]], Field(description="MGS NIDs, e.g. `10.0.0.5@o2ib` or `10.0.0.5@tcp`.", min_length=1)
    ]
    fsname: Annotated[str, Field(description="Lustre file system name.", pattern=r"^[A-Za-z0-9_]{1,8}$")]
    throughput_mb_s: Annotated[
        float | None,
        Field(description="Sequential throughput the servers deliver to this cluster, MB/s (1e6 bytes/s); the fio "
                          "expectation for the mount. Unset = fio results are judged for correctness only.", gt=0),
    ] = None


class StripeSetting(StrictModel):
    """`lfs setstripe` on a directory of the file system."""

    path: Annotated[Annotated[str, VK["rel-path"]], Field(description="Directory relative to the mount point.")]
    count: Annotated[int, Field(description="Stripe count; -1 = all OSTs.", ge=-1)] = -1
    size: Annotated[str, Field(description="Stripe size, e.g. `4M`.", pattern=r"^\d+[KMG]?$")] = "1M"


class LustreStorage(StrictModel):
    """A Lustre file system: managed FSx (`fsx`) or an existing server (`server`)."""

    kind: Annotated[Literal["lustre"], Field(description="Storage tag.")]
    name: Annotated[str, Field(description="DNS-safe name.", pattern=DNS_LABEL)]
    mount: Annotated[Annotated[str, VK["abs-path"]], Field(description="Mount point on every node.")]
    fsx: Annotated[FsxLustre | None, Field(description="Create an FSx for Lustre file system (AWS).")] = None
    server: Annotated[LustreServer | None, Field(description="Mount an existing Lustre server.")] = None
    mount_options: Annotated[list[Annotated[str, VK["mount-option"]]], Field(description="Mount options.")] = ["noatime", "flock", "_netdev"]
    stripes: Annotated[list[StripeSetting], Field(description="Stripe settings on directories.")] = []

    @model_validator(mode="after")
    def _one_source(self) -> "LustreStorage":
        if (self.fsx is None) == (self.server is None):
            raise ValueError("set exactly one of `fsx` (managed FSx for Lustre) or `server` (existing MGS NIDs)")
        return self


class NfsStorage(StrictModel):
    """An NFS export."""

    kind: Annotated[Literal["nfs"], Field(description="Storage tag.")]
    name: Annotated[str, Field(description="DNS-safe name.", pattern=DNS_LABEL)]
    mount: Annotated[Annotated[str, VK["abs-path"]], Field(description="Mount point on every node.")]
    server: Annotated[Annotated[str, VK["host-address"]], Field(description="NFS server address.")]
    export: Annotated[Annotated[str, VK["abs-path"]], Field(description="Exported path.")]
    version: Annotated[Literal["3", "4.1", "4.2"], Field(description="NFS version.")] = "4.2"
    mount_options: Annotated[list[Annotated[str, VK["mount-option"]]], Field(description="Extra mount options.")] = ["_netdev", "nconnect=8"]
    throughput_mb_s: Annotated[
        float | None,
        Field(description="Sequential throughput the NFS server delivers to one client node, MB/s (1e6 bytes/s); the "
                          "fio expectation for the mount. Unset = fio results are judged for correctness only.", gt=0),
    ] = None


Storage = Annotated[Union[LustreStorage, NfsStorage], Field(discriminator="kind")]


# ---------------------------------------------------------------------------------------------
# software, orchestrator, validation, workload
# ---------------------------------------------------------------------------------------------


def _bare_metal() -> dict[str, Any]:
    """The catalog's ``bare_metal`` section (software defaults live there with their sources)."""
    from .catalog import catalog

    return catalog().bare_metal


class LustreClientRepository(StrictModel):
    """Where on-prem hosts of one operating system get the Lustre client packages: a signed apt repository.

    Neither Debian nor Ubuntu ship a Lustre client; Whamcloud publishes client builds per distribution, one flat
    apt directory per release with the modules prebuilt per kernel (https://downloads.whamcloud.com/public/lustre/,
    e.g. ``lustre-2.15.1/ubuntu2204/client/``, packages ``lustre-client-utils`` and
    ``lustre-client-modules-<kernel>``), and sites serve those (or their own DKMS client build of lustre-release)
    from a signed apt repository. The
    ``lustre_client`` role adds it with its key (deb822 ``Signed-By``) and installs the client from it.
    """

    url: Annotated[Annotated[str, VK["url"]], Field(description="Repository URL (deb822 `URIs:`), e.g. "
                                          "`https://repo.example.com/lustre/2.15.7/ubuntu2204/`.",
                              )]
    key_url: Annotated[Annotated[str, VK["key-url"]], Field(description="URL of the repository's ASCII-armoured signing key (deb822 "
                                              "`Signed-By`); unsigned repositories are not used.",
                                  )]
    suite: Annotated[Annotated[str, VK["apt-suite"]], Field(description="`Suites:` of the sources entry: `./` for a flat repository, or a suite "
                                            "name; `{codename}` is replaced by the host's distribution codename.")] = "./"
    components: Annotated[list[Annotated[str, VK["apt-component"]]], Field(description="`Components:` of the sources entry (empty for a flat "
                                                       "repository).")] = []
    packages: Annotated[
        list[Annotated[str, VK["deb-package"]]] | None,
        Field(description="Client packages to install; `{kernel}` is the host's kernel release (Whamcloud's "
                          "`lustre-client-modules-{kernel}`). Unset: the catalog's DKMS client "
                          "(`lustre-client-utils`, `lustre-client-modules-dkms`)."),
    ] = None


class Software(StrictModel):
    """Pinned software versions."""

    driver_branch: Annotated[
        str, Field(description="NVIDIA driver branch, e.g. `580` (default: the current Long Term Support Branch).",
                   pattern=r"^\d{3}(\.\d+)*$")
    ] = Field(default_factory=lambda: _bare_metal()["nvidia_driver"]["default_branch"])
    driver_version: Annotated[
        str | None,
        Field(description="Exact NVIDIA driver version, e.g. `580.105.08`; driver, Fabric Manager and NSCQ are "
                          "installed and held at it. Unset: the catalog's release of `driver_branch` (LTS default).",
              pattern=r"^\d{3}\.\d+(\.\d+)?$"),
    ] = None
    kernel_updates: Annotated[
        Literal["hold", "dkms-verify"] | None,
        Field(description="How kernel drift under the out-of-tree modules (NVIDIA driver, DOCA-OFED, Lustre client) is "
                          "prevented: `hold` pins the installed kernel; `dkms-verify` lets it update, rebuilds the "
                          "modules with DKMS and verifies after boot that they load. Unset = not decided (check warns)."),
    ] = None
    driver_open_kernel_modules: Annotated[bool, Field(description="Use the open GPU kernel modules.")] = True
    cuda: Annotated[
        str | None,
        Field(description="CUDA toolkit version (`major.minor`). Unset: the newest catalogued CUDA the driver branch runs "
                          "and every declared GPU architecture supports (`software-catalog.yaml` `defaults`).",
              pattern=r"^\d+\.\d+(\.\d+)?$"),
    ] = None
    nccl: Annotated[
        str | None,
        Field(description="NCCL version. Unset: the catalog's default for the resolved CUDA (built for its major).",
              pattern=r"^\d+\.\d+\.\d+(-\d+)?$"),
    ] = None
    container_toolkit: Annotated[
        str, Field(description="NVIDIA Container Toolkit version.", pattern=r"^\d+\.\d+\.\d+$")
    ] = Field(default_factory=lambda: _bare_metal()["container_toolkit"]["default_version"])
    efa_installer: Annotated[
        str | None,
        Field(description="AWS EFA installer version. Unset: the newest release whose checksum the catalog pins.",
              pattern=r"^\d+\.\d+\.\d+$"),
    ] = None
    aws_ofi_nccl: Annotated[
        str | None,
        Field(description="aws-ofi-nccl plugin version. Unset: the catalog's default (newest release).",
              pattern=r"^\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?$"),
    ] = None
    cuda_compat: Annotated[
        bool,
        Field(description="Install NVIDIA's CUDA forward-compatibility package (`cuda-compat-<major>-<minor>`) so a CUDA "
                          "newer than the driver branch runs on it: data-centre GPUs and the base branches NVIDIA lists "
                          "only (https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html)."),
    ] = False
    pytorch: Annotated[
        str | None,
        Field(description="PyTorch release of the training environment (pip wheels), e.g. `2.12.0`. Unset: the catalog's "
                          "default for the resolved CUDA.", pattern=r"^\d+\.\d+\.\d+$"),
    ] = None
    pytorch_cuda: Annotated[
        str | None,
        Field(description="PyTorch wheel index tag (`https://download.pytorch.org/whl/<tag>`), e.g. `cu130`: the CUDA the "
                          "wheels are built with. Unset: the catalog's default for the resolved CUDA.",
              pattern=r"^cu\d{3,4}$"),
    ] = None
    container_image: Annotated[
        str | None,
        Field(description="NGC PyTorch container for jobs that run in containers, `nvcr.io/nvidia/pytorch:<YY.MM>-py3` "
                          "(a release the catalog lists with its CUDA, NCCL and Python). Unset: the newest catalogued "
                          "release the driver runs.",
              pattern=r"^nvcr\.io/nvidia/pytorch:\d{2}\.\d{2}-py3$"),
    ] = None
    doca_ofed: Annotated[Annotated[str, VK["version"]] | None, Field(description="DOCA-OFED version for ConnectX; unset = inbox rdma-core.")] = None
    lustre_client_repos: Annotated[
        dict[OnpremOs, LustreClientRepository],
        Field(description="On-prem Lustre client package source per operating system (`target.os`), e.g. "
                          "`{ubuntu-22.04: {url: ..., key_url: ...}}`: a signed apt repository with the client built "
                          "for that distribution (Whamcloud's per-distribution client builds, "
                          "https://downloads.whamcloud.com/public/lustre/, or a site DKMS build). Needed when an "
                          "on-prem host mounts a Lustre `server`; AWS nodes use Amazon's FSx client repository."),
    ] = {}
    kata: Annotated[Annotated[str, VK["version"]], Field(description="Kata Containers version.")] = "3.32.0"
    gvisor: Annotated[
        Annotated[str, VK["release"]], Field(description="gVisor runsc release (`YYYYMMDD.N`); its nvproxy must list the driver version. `latest` "
                               "floats (check warns).")
    ] = Field(default_factory=lambda: _bare_metal()["gvisor"]["default_release"])


class NoOrchestrator(StrictModel):
    """No scheduler: plain hosts."""

    kind: Annotated[Literal["none"], Field(description="Orchestrator tag.")]


class KubernetesOrchestrator(StrictModel):
    """Kubernetes: EKS on AWS, an existing cluster on-prem."""

    kind: Annotated[Literal["kubernetes"], Field(description="Orchestrator tag.")]
    version: Annotated[str, Field(description="Kubernetes minor version (EKS: one in standard support).", pattern=r"^1\.\d+$")] = "1.35"
    gpu_operator_version: Annotated[
        Annotated[str, VK["version"]] | None,
        Field(description="NVIDIA GPU Operator chart version (`v26.7.0`). Unset: the newest patch of the newest "
                          "release NVIDIA's platform-support matrix lists for `version` on Amazon EKS, supported "
                          "releases before deprecated ones (catalog `kubernetes_addons.gpu_operator`); `check` "
                          "refuses a release the matrix does not list for `version`."),
    ] = None
    efa_device_plugin_version: Annotated[Annotated[str, VK["version"]], Field(description="AWS EFA device plugin chart version.")] = "v0.5.6"
    mpi_operator_version: Annotated[Annotated[str, VK["version"]], Field(description="Kubeflow MPI operator version.")] = "v0.6.0"
    api_access_cidrs: Annotated[
        list[Annotated[str, VK["cidr"]]],
        Field(description="EKS: CIDRs allowed to reach the Kubernetes API endpoint from the internet (separate from "
                          "`target.ssh_ingress_cidrs`). Empty (default): the endpoint is private, reachable from inside "
                          "the VPC only — run `clusterforge up` from there (a VPN, a CI runner in the VPC), or list "
                          "the deploy machine's CIDR here."),
    ] = []
    namespace: Annotated[str, Field(description="Namespace for validation jobs.", pattern=DNS_LABEL)] = "clusterforge"
    node_selector: Annotated[
        dict[Annotated[str, VK["label-key"]], Annotated[str, VK["selector-value"]]] | None,
        Field(description="Node labels the validation pods select (`nodeSelector`); `{group}` in a value becomes the "
                          "node group's name. Unset = `clusterforge.io/node-group: {group}`, the label the EKS stack "
                          "puts on its nodes; nodes of an existing cluster do not carry it: label them "
                          "(`kubectl label node NODE clusterforge.io/node-group=GROUP`) or name labels they have, "
                          "e.g. `{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}`."),
    ] = None

    @model_validator(mode="before")
    @classmethod
    def _gpu_operator_for_version(cls, data: Any) -> Any:
        """An unset ``gpu_operator_version`` becomes the catalog's release for ``version``
        (:func:`blueprints.vendor.gpu_operator_for_kubernetes`); left unset when no listed release covers it (the
        rule ``gpu-operator-kubernetes`` then refuses the blueprint)."""
        if isinstance(data, dict) and data.get("gpu_operator_version") is None:
            from .vendor import gpu_operator_for_kubernetes

            chosen = gpu_operator_for_kubernetes(str(data.get("version") or cls.model_fields["version"].default))
            if chosen is not None:
                data = {**data, "gpu_operator_version": chosen}
        return data


class SlurmPartition(StrictModel):
    """One Slurm partition over some node groups (https://slurm.schedmd.com/slurm.conf.html#SECTION_PARTITION-CONFIGURATION)."""

    name: Annotated[Annotated[str, VK["slurm-partition"]], Field(description="Partition name.")]
    groups: Annotated[
        list[Annotated[str, Field(pattern=DNS_LABEL)]], Field(description="Node groups (role `compute`) whose nodes it holds.", min_length=1)
    ]
    default: Annotated[bool, Field(description="The partition jobs land in when they name none.")] = False
    max_time: Annotated[
        Annotated[str, VK["slurm-time"]] | None,
        Field(description="`MaxTime` (`UNLIMITED`, `MM`, `HH:MM:SS`, `D-HH`); unset = Slurm's default (UNLIMITED)."),
    ] = None
    exclusive: Annotated[
        bool, Field(description="`OverSubscribe=EXCLUSIVE`: every job gets whole nodes (the default for GPU training).")
    ] = True


class SlurmAccounting(StrictModel):
    """Job accounting: slurmdbd with a database (https://slurm.schedmd.com/accounting.html)."""

    enabled: Annotated[bool, Field(description="Run slurmdbd and record every job (`sacct`).")] = True
    database_host: Annotated[
        Annotated[str, VK["host-address"]] | None,
        Field(description="An external MySQL / MariaDB server; unset = MariaDB on the controller."),
    ] = None
    database_port: Annotated[int, Field(description="Port of the database server.", ge=1, le=65535)] = 3306
    password_file: Annotated[
        Annotated[str, VK["abs-path"]] | None,
        Field(description="For an external database: a file on the controller holding slurmdbd's database password "
                          "(put there by your secret store; never written by clusterforge). Unset with a local "
                          "database: generated once on the controller."),
    ] = None


class SlurmOrchestrator(StrictModel):
    """Slurm: a controller (`role: controller`), compute groups as partitions with GPUs as gres, login groups as clients.

    The Slurm version is the distribution's package on the nodes' OS (catalog `slurm.distributions`); every
    rendered option exists in that version (catalog `slurm.features`).
    """

    kind: Annotated[Literal["slurm"], Field(description="Orchestrator tag.")]
    partition: Annotated[
        Annotated[str, VK["slurm-name"]],
        Field(description="Name of the default partition holding every GPU compute group (when `partitions` is unset)."),
    ] = "gpu"
    account: Annotated[Annotated[str, VK["slurm-name"]] | None, Field(description="Slurm account for validation jobs.")] = None
    cluster_name: Annotated[
        Annotated[str, VK["slurm-cluster-name"]] | None,
        Field(description="`ClusterName` (lower case; what accounting records); unset = the blueprint's name."),
    ] = None
    partitions: Annotated[
        list[SlurmPartition] | None,
        Field(description="Partitions; unset = one partition per GPU model and fabric over the compute groups, the "
                          "first named `partition`."),
    ] = None
    gres: Annotated[
        Literal["explicit", "autodetect"],
        Field(description="`explicit`: gres.conf lists each `/dev/nvidiaN` with its type from the catalog; "
                          "`autodetect`: `AutoDetect=nvidia` (Slurm 24.11 and later only)."),
    ] = "explicit"
    configless: Annotated[
        bool, Field(description="Compute nodes fetch the configuration from slurmctld (`enable_configless`).")
    ] = True
    accounting: Annotated[SlurmAccounting, Field(description="slurmdbd and its database.")] = SlurmAccounting()
    pyxis: Annotated[
        bool,
        Field(description="Containers in jobs: enroot + pyxis (`srun --container-image`). Needs `container_pins`: "
                          "NVIDIA publishes no checksums for their releases."),
    ] = False
    container_pins: Annotated[
        dict[Annotated[str, VK["container-pin-file"]], Annotated[str, VK["sha256"]]],
        Field(description="SHA-256 of the enroot and pyxis release files you verified, by file name "
                          "(`enroot_4.1.2-1_amd64.deb`, `enroot+caps_4.1.2-1_amd64.deb`, `pyxis-0.24.0.tar.gz`); "
                          "a file without a pin is never downloaded."),
    ] = {}
    topology: Annotated[
        Literal["auto", "none", "tree", "block"],
        Field(description="`tree`: a topology.conf switch tree from the declared fabric; `block`: NVLink domains "
                          "(Slurm 23.11 and later); `auto`: tree on a multi-node RDMA fabric, else none."),
    ] = "auto"
    health_check_interval_s: Annotated[
        int, Field(description="Seconds between health checks on every node (`HealthCheckInterval`); 0 = off.", ge=0, le=86400)
    ] = 300
    os_memory_gib: Annotated[
        float, Field(description="Memory per compute node kept for the OS and the Slurm daemons (`MemSpecLimit`), GiB.",
                     ge=0.5, le=1024)
    ] = 4
    extra: Annotated[
        dict[Annotated[str, VK["slurm-key"]], Annotated[str, VK["slurm-value"]]],
        Field(description="More slurm.conf options, `{Key: value}`: scheduling, limits, timeouts, priorities, logging "
                          "(the rule `slurm-extra-key` lists the keys allowed; none names a program or a file)."),
    ] = {}
    cgroup_version: Annotated[
        Literal["v2", "v1"],
        Field(description="The nodes' cgroup hierarchy: `v2` (every supported OS's default); `v1` only for hosts booted "
                          "with `systemd.unified_cgroup_hierarchy=0`."),
    ] = "v2"


Orchestrator = Annotated[
    Union[NoOrchestrator, KubernetesOrchestrator, SlurmOrchestrator], Field(discriminator="kind")
]

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce"]
Suite = Literal["node", "nccl", "fio", "amp", "profile"]


class NcclThresholds(StrictModel):
    """Overrides for the NCCL judge (default expectations come from the catalog)."""

    min_busbw_gbps: Annotated[
        float | None, Field(description="Expected peak busbw in GB/s (1e9 bytes/s); overrides the derived one.", gt=0)
    ] = None
    warn_ratio: Annotated[float, Field(description="Below this fraction of expected: warn.", gt=0, le=1)] = 0.8
    fail_ratio: Annotated[float, Field(description="Below this fraction of expected: fail.", gt=0, le=1)] = 0.5
    socket_fallback_ratio: Annotated[float, Field(
        description="On an RDMA fabric, multi-node peak busbw below this fraction of the inter-node rate is named as "
                    "NCCL's TCP socket fallback (single-digit Gbit/s per NIC instead of hundreds).", gt=0, le=1)] = 0.25
    above_ratio: Annotated[float, Field(
        description="Peak busbw above this multiple of the ring-model expectation gets a note (NVLS, SHARP or tree "
                    "algorithms move less data than the ring formula assumes).", ge=1)] = 1.15
    dip_ratio: Annotated[float, Field(
        description="A message size whose busbw is more than this fraction below the best smaller size is a dip "
                    "(noted).", gt=0, le=1)] = 0.05
    curve_floor_ratio: Annotated[float, Field(
        description="Sizes whose best busbw so far is below this fraction of the peak are not judged for dips "
                    "(latency-bound, noisy).", ge=0, le=1)] = 0.10
    cliff_ratio: Annotated[float, Field(
        description="A dip over two or more sizes that recovers is a mid-size cliff (warn) when deeper than this "
                    "fraction.", gt=0, le=1)] = 0.25
    collapse_warn_ratio: Annotated[float, Field(
        description="busbw that stays this fraction or more below its best up to the largest size (two or more "
                    "sizes) is a sustained collapse: warn.", gt=0, le=1)] = 0.15
    collapse_fail_ratio: Annotated[float, Field(
        description="A sustained collapse this deep or deeper: fail (one last size this deep: warn).",
        gt=0, le=1)] = 0.5


class NcclSuite(StrictModel):
    """Collective benchmarks (nccl-tests or the built-in torch.distributed benchmark)."""

    collectives: Annotated[list[Collective], Field(description="Collectives to run.")] = ["all_reduce", "all_gather", "reduce_scatter"]
    min_bytes: Annotated[int, Field(description="Smallest message in bytes.", ge=1)] = 8
    max_bytes: Annotated[int, Field(description="Largest message in bytes.", ge=1)] = 8 * 1024**3
    step_factor: Annotated[int, Field(description="Size multiplier between steps.", ge=2)] = 2
    iters: Annotated[int, Field(description="Timed iterations per size.", ge=1)] = 20
    warmup_iters: Annotated[int, Field(description="Warm-up iterations per size.", ge=0)] = 5
    check: Annotated[bool, Field(description="Check results (`-c 1`); counts `#wrong`.")] = True
    thresholds: Annotated[NcclThresholds, Field(description="Judge thresholds.")] = NcclThresholds.model_construct()


class FioThresholds(StrictModel):
    """Overrides for the fio judge."""

    min_read_mb_s: Annotated[float | None, Field(description="Expected sequential read MB/s (1e6 bytes/s).", gt=0)] = None
    min_write_mb_s: Annotated[float | None, Field(description="Expected sequential write MB/s.", gt=0)] = None
    warn_ratio: Annotated[float, Field(description="Below this fraction of expected: warn.", gt=0, le=1)] = 0.7
    fail_ratio: Annotated[float, Field(description="Below this fraction of expected: fail.", gt=0, le=1)] = 0.4


class FioSuite(StrictModel):
    """fio storage benchmarks on the NVMe scratch and shared file systems."""

    targets: Annotated[
        list[Annotated[str, VK["abs-path"]]], Field(description="Directories to test; unset = every `local_nvme` and `storage` mount.")
    ] = []
    size: Annotated[str, Field(description="File size per job, e.g. `4G`.", pattern=r"^\d+[KMGT]?$")] = "4G"
    runtime_s: Annotated[int, Field(description="Seconds per profile.", ge=1)] = 30
    numjobs: Annotated[int, Field(description="Parallel jobs per profile.", ge=1)] = 4
    iodepth: Annotated[int, Field(description="Queue depth.", ge=1)] = 32
    thresholds: Annotated[FioThresholds, Field(description="Judge thresholds.")] = FioThresholds.model_construct()


class AmpModel(StrictModel):
    """GPT-style model for the AMP benchmark."""

    layers: Annotated[int, Field(description="Transformer layers.", ge=1)] = 24
    hidden: Annotated[int, Field(description="Hidden size d_model.", ge=8)] = 2048
    heads: Annotated[int, Field(description="Attention heads.", ge=1)] = 16
    seq_len: Annotated[int, Field(description="Sequence length in tokens.", ge=8)] = 2048
    vocab: Annotated[int, Field(description="Vocabulary size.", ge=16)] = 50304


class AmpThresholds(StrictModel):
    """Overrides for the AMP judge."""

    min_mfu: Annotated[float | None, Field(description="Minimum MFU (0-1); unset = the GPU's floor.", gt=0, le=1)] = None
    min_speedup_vs_fp32: Annotated[float, Field(description="AMP must be at least this much faster than fp32.", gt=0)] = 1.1
    mfu_fail_fraction: Annotated[float, Field(
        description="MFU below this fraction of the floor fails (between it and the floor: warn).", gt=0, le=1)] = 0.5


class AmpSuite(StrictModel):
    """Mixed-precision training benchmark (synthetic GPT)."""

    model: Annotated[AmpModel, Field(description="Model shape.")] = AmpModel.model_construct()
    batch_size: Annotated[int, Field(description="Micro-batch size per GPU.", ge=1)] = 8
    steps: Annotated[int, Field(description="Timed steps.", ge=2)] = 30
    precision: Annotated[
        Literal["auto", "bf16", "fp16"], Field(description="`auto` = bf16 where supported, else fp16 + GradScaler.")
    ] = "auto"
    compile: Annotated[bool, Field(description="Use `torch.compile`.")] = True
    fp32_baseline: Annotated[bool, Field(description="Also run an fp32 baseline for the speed-up check.")] = True
    thresholds: Annotated[AmpThresholds, Field(description="Judge thresholds.")] = AmpThresholds.model_construct()


class ProfileThresholds(StrictModel):
    """Shares of the profiled step (0-1) above which the profile judge names a bound other than compute
    (defaults: the project's choices, explained in docs/profile.md)."""

    max_data_loading: Annotated[float, Field(
        description="Data loading / input share of the step above which it is input-bound (a healthy loader "
                    "prefetches: its share is near 0).", gt=0, le=1)] = 0.10
    max_host_launch: Annotated[float, Field(
        description="Host work and kernel-launch share (device idle waiting for the host) above which it is "
                    "host / launch-bound.", gt=0, le=1)] = 0.25
    max_comm_exposed: Annotated[float, Field(
        description="Exposed (not overlapped) communication share above which it is communication-bound.",
        gt=0, le=1)] = 0.15
    max_memory: Annotated[float, Field(
        description="memcpy / memset share (GPU) above which it is memory-copy-bound.", gt=0, le=1)] = 0.10
    max_idle: Annotated[float, Field(
        description="GPU idle share with work already launched (synchronisation) above which it is idle-bound.",
        gt=0, le=1)] = 0.20
    fail_share: Annotated[float, Field(
        description="A bound whose category takes this share of the step or more fails (below: warn).",
        gt=0, le=1)] = 0.5
    straggler_ratio: Annotated[float, Field(
        description="A rank working (outside exposed communication) this fraction longer per step than the "
                    "median of the other ranks is named the straggler.", gt=0)] = 0.10


class ProfileSuite(StrictModel):
    """Profile the AMP suite's training step (model, batch size, precision from `validation.amp`) on every
    rank with torch.profiler and name what bounds it."""

    wait: Annotated[int, Field(description="Profiler schedule: steps skipped first.", ge=0)] = 1
    warmup: Annotated[int, Field(description="Profiler schedule: steps traced and discarded.", ge=0)] = 1
    active: Annotated[int, Field(description="Profiler schedule: steps recorded in the trace.", ge=1)] = 3
    num_workers: Annotated[int, Field(description="DataLoader worker processes.", ge=0)] = 0
    thresholds: Annotated[ProfileThresholds, Field(description="Judge thresholds.")] = ProfileThresholds.model_construct()


class Validation(StrictModel):
    """Post-provisioning validation suites."""

    suites: Annotated[
        list[Suite], Field(description="Suites to run (`node`, the node health checks, always runs first).")
    ] = ["node", "nccl", "fio", "amp"]
    nccl: Annotated[NcclSuite, Field(description="NCCL settings.")] = NcclSuite.model_construct()
    fio: Annotated[FioSuite, Field(description="fio settings.")] = FioSuite.model_construct()
    amp: Annotated[AmpSuite, Field(description="AMP settings.")] = AmpSuite.model_construct()
    profile: Annotated[ProfileSuite, Field(description="Profile settings (suite `profile`, not run by default).")] = \
        ProfileSuite.model_construct()


class ModelShape(StrictModel):
    """A transformer's shape for the sizing rules (the fields of its Hugging Face ``config.json``)."""

    layers: Annotated[int, Field(description="Transformer layers (`num_hidden_layers`).", ge=1)]
    hidden: Annotated[int, Field(description="Hidden size (`hidden_size`).", ge=1)]
    heads: Annotated[int, Field(description="Attention heads (`num_attention_heads`).", ge=1)]
    kv_heads: Annotated[int | None, Field(
        description="Key/value heads (`num_key_value_heads`, grouped-query attention); unset = `heads`.", ge=1)] = None
    head_dim: Annotated[int | None, Field(description="Head dimension; unset = `hidden / heads`.", ge=1)] = None
    ffn_hidden: Annotated[int | None, Field(description="Dense MLP width (`intermediate_size`); unset = 4 x `hidden`.", ge=1)] = None
    vocab: Annotated[int, Field(description="Vocabulary size (`vocab_size`).", ge=1)]
    experts_per_token: Annotated[int | None, Field(description="Routed experts per token, top-k (MoE).", ge=1)] = None
    expert_ffn_hidden: Annotated[int | None, Field(description="MLP width of one expert (MoE); unset = `ffn_hidden`.", ge=1)] = None
    kv_lora_rank: Annotated[int | None, Field(
        description="Multi-head latent attention: compressed KV width (`kv_lora_rank`); the KV cache holds it plus "
                    "`rope_head_dim` per token and layer.", ge=1)] = None
    rope_head_dim: Annotated[int | None, Field(description="Multi-head latent attention: decoupled RoPE key width "
                                                           "(`qk_rope_head_dim`).", ge=1)] = None


class Workload(StrictModel):
    """The workload the cluster is for; used by the sizing rules (docs/workload-sizing.md)."""

    purpose: Annotated[Literal["training", "inference"], Field(description="Training or inference.")] = "training"
    model: Annotated[str | None, Field(
        description="A model of the shape catalog (`blueprints/data/model-shapes.yaml`, e.g. `llama-3.1-70b`, "
                    "`mixtral-8x7b`, `deepseek-v3`, or its Hugging Face id such as `meta-llama/Llama-3.1-70B`, any "
                    "case): its parameters and shape.", max_length=96,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*(/[A-Za-z0-9][A-Za-z0-9._\-]*)?$")] = None
    parameters_b: Annotated[float | None, Field(description="Total parameters in billions; unset = the model's.", gt=0)] = None
    shape: Annotated[ModelShape | None, Field(description="The model's shape, when `model` is not in the catalog "
                                                          "(overrides the catalog's).")] = None
    architecture: Annotated[Literal["dense", "moe"], Field(description="Dense or mixture-of-experts.")] = "dense"
    experts: Annotated[int | None, Field(description="Routed experts per MoE layer; unset = the model's.", ge=2)] = None
    active_parameters_b: Annotated[float | None, Field(
        description="Active parameters per token in billions (MoE); unset = the model's.", gt=0)] = None
    sequence_length: Annotated[int, Field(description="Sequence length in tokens (training sample or full serving "
                                                      "context).", ge=1)] = 4096
    micro_batch_size: Annotated[int, Field(description="Training micro-batch per GPU, in sequences.", ge=1)] = 1
    precision: Annotated[Literal["bf16", "fp16", "fp8", "fp32"], Field(description="Compute precision.")] = "bf16"
    quantization: Annotated[
        Literal["none", "int8", "int4", "fp8"], Field(description="Weight quantization (inference; int4 and int8 "
                                                                  "weight-only).")
    ] = "none"
    kv_cache_precision: Annotated[Literal["auto", "bf16", "fp16", "fp8"], Field(
        description="KV cache element type (inference); `auto` = 2 bytes, or 4 with fp32 precision.")] = "auto"
    optimizer: Annotated[
        Literal["adam", "sgd"], Field(description="Optimizer (adam keeps 2 fp32 states + fp32 master weights).")
    ] = "adam"
    finetuning: Annotated[Literal["full", "lora", "qlora"], Field(
        description="Training updates every weight (`full`), low-rank adapters on frozen 16-bit weights (`lora`) or "
                    "on 4-bit NF4 weights (`qlora`).")] = "full"
    lora_rank: Annotated[int, Field(description="LoRA rank r (adapters on every linear layer).", ge=1)] = 16
    recompute: Annotated[Literal["none", "selective", "full"], Field(
        description="Activation recomputation: `selective` recomputes attention's s^2 part, `full` keeps only each "
                    "layer's input.")] = "selective"
    zero_stage: Annotated[int, Field(
        description="ZeRO / FSDP sharding of model states over data parallelism: 0 none, 1 optimizer, 2 + gradients, "
                    "3 + weights.", ge=0, le=3)] = 3
    tensor_parallel: Annotated[int, Field(description="Tensor parallelism (GPUs per layer).", ge=1)] = 1
    sequence_parallel: Annotated[bool, Field(description="Sequence parallelism with tensor parallelism (Megatron).")] = True
    context_parallel: Annotated[int, Field(description="Context parallelism (GPUs splitting a sequence).", ge=1)] = 1
    pipeline_parallel: Annotated[int, Field(description="Pipeline parallelism (stages).", ge=1)] = 1
    expert_parallel: Annotated[int | None, Field(
        description="Expert parallelism (GPUs the experts are spread over); unset = the GPUs of a node left by "
                    "tensor parallelism, at most `experts`.", ge=1)] = None
    concurrency: Annotated[int, Field(description="Requests in flight over the whole cluster (inference).", ge=1)] = 1
    reserve_fraction: Annotated[float, Field(
        description="Share of each GPU's memory kept for the runtime (CUDA context, NCCL buffers, allocator "
                    "fragmentation); default 0.1 = vLLM's `gpu_memory_utilization` 0.9.", ge=0, lt=1)] = 0.1

    @model_validator(mode="after")
    def _model_or_parameters(self) -> "Workload":
        if self.model is None and self.parameters_b is None:
            raise PydanticCustomError("workload_size", "neither `model` nor `parameters_b` is set",
                                      {"fix": "add `model:` (e.g. `llama-3.1-70b`) or `parameters_b:`"})
        return self


class CostInputs(StrictModel):
    """What `clusterforge cost` cannot know from the hardware: your own prices and site figures. Every field is
    optional; unset values come from the price catalog's sourced defaults (`blueprints/data/prices.yaml`
    `onprem`), and a value with neither is an unpriced line, never $0."""

    amortization_years: Annotated[float | None, Field(
        description="Years the hardware is written off over (on-prem capital per hour = price / (years x 8760)).",
        gt=0, le=15)] = None
    server_price_usd: Annotated[dict[Annotated[str, VK["node-group-name"]], Annotated[float, Field(gt=0)]], Field(
        description="Price of one server of each named node group, USD, NICs included (your quote).")] = {}
    node_power_kw: Annotated[dict[Annotated[str, VK["node-group-name"]], Annotated[float, Field(gt=0)]], Field(
        description="Power one server of each named node group draws at full load, kW; unset = the catalog's "
                    "system figure, else the GPUs' TDP x count.")] = {}
    power_usd_per_kwh: Annotated[float | None, Field(description="Electricity price, USD per kWh.", ge=0)] = None
    pue: Annotated[float | None, Field(description="Power usage effectiveness of the site (facility / IT power).",
                                       ge=1, le=3)] = None
    colo_usd_per_kw_month: Annotated[float | None, Field(
        description="Space: colocation or floor cost per provisioned kW and month, USD (0 for your own room).",
        ge=0)] = None
    facility_usd_per_node: Annotated[float | None, Field(
        description="Facility and operations cost over one node's life, USD.", ge=0)] = None
    support_usd_per_node_year: Annotated[float, Field(
        description="Hardware support contract per node and year, USD.", ge=0)] = 0
    switch_port_usd: Annotated[float | None, Field(
        description="One fabric switch port (share of the switch), USD; each declared NIC takes one.", ge=0)] = None
    cabling_usd_per_port: Annotated[float | None, Field(
        description="Cable and transceivers of one fabric port, USD.", ge=0)] = None
    storage_capital_usd: Annotated[float | None, Field(
        description="Capital cost of the declared shared storage (Lustre / NFS servers), USD.", ge=0)] = None
    compare_region: Annotated[str, Field(
        description="AWS region whose catalogued prices the on-prem cluster is compared with.",
        pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$")] = "us-east-1"
    nat_data_gb_per_month: Annotated[float | None, Field(
        description="Data through the NAT gateway per month, GB (an assumption you state; unset = an unpriced "
                    "line).", ge=0)] = None
    training_tokens_b: Annotated[float | None, Field(
        description="Tokens of the training run to estimate, in billions (with `workload`: time and cost of the "
                    "run on this cluster).", gt=0)] = None


# ---------------------------------------------------------------------------------------------
# root
# ---------------------------------------------------------------------------------------------


class Blueprint(StrictModel):
    """A clusterforge blueprint: one GPU cluster, cloud or on-prem."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        str_strip_whitespace=True,
        populate_by_name=True,
        json_schema_extra={"title": "clusterforge blueprint (clusterforge/v1)"},
    )

    api_version: Annotated[
        Literal["clusterforge/v1"], Field(alias="apiVersion", description="Schema version, `clusterforge/v1`.")
    ]
    kind: Annotated[Literal["Blueprint"], Field(description="Document kind, `Blueprint`.")]
    name: Annotated[
        str, Field(description="DNS-safe cluster name, prefix of every resource name.", pattern=DNS_LABEL, max_length=40)
    ]
    description: Annotated[Annotated[str, VK["text"]], Field(description="Free text.")] = ""
    target: Annotated[Target, Field(description="Where the cluster runs: `aws` or `onprem`.")]
    node_groups: Annotated[list[NodeGroup], Field(description="Node groups.", min_length=1)]
    network: Annotated[Network, Field(description="The GPU fabric.")] = EthernetNetwork.model_construct(fabric="ethernet")
    storage: Annotated[list[Storage], Field(description="Shared file systems.")] = []
    software: Annotated[Software, Field(description="Pinned software versions.")] = Software.model_construct()
    orchestrator: Annotated[Orchestrator, Field(description="`none`, `kubernetes` or `slurm`.")] = NoOrchestrator.model_construct(kind="none")
    validation: Annotated[Validation, Field(description="Validation suites.")] = Validation.model_construct()
    workload: Annotated[Workload | None, Field(description="Optional workload for sizing rules.")] = None
    cost: Annotated[CostInputs, Field(description="Your prices and site figures for `clusterforge cost` "
                                                  "(on-prem capital, power, space; cloud usage assumptions).")] = \
        CostInputs.model_construct()

    @model_validator(mode="before")
    @classmethod
    def _values_are_data(cls, data: Any) -> Any:
        """No string of the document holds a template delimiter (``blueprints.values``); the loader reports
        each with its position first, this guards blueprints built in code."""
        for path, what, delim in templated_strings(data):
            raise PydanticCustomError(
                "value_kind", "`{where}`: the {what} holds the template delimiter `{delim}`",
                {"where": ".".join(map(str, path)), "what": what, "delim": delim,
                 "fix": "blueprint values are data: write the literal value"})
        return data

    @field_validator("orchestrator", mode="before")
    @classmethod
    def _orchestrator_shorthand(cls, v: Any) -> Any:
        return {"kind": v} if isinstance(v, str) else v

    @field_validator("network", mode="before")
    @classmethod
    def _network_shorthand(cls, v: Any) -> Any:
        return {"fabric": v} if isinstance(v, str) else v

    # ---- convenience ------------------------------------------------------------------------
    @property
    def is_aws(self) -> bool:
        """True for `target.provider: aws`."""
        return self.target.provider == "aws"

    def group(self, name: str) -> NodeGroup:
        """The node group called `name`; raises `KeyError` if there is none."""
        for g in self.node_groups:
            if g.name == name:
                return g
        raise KeyError(name)
