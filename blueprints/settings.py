"""Node settings: the one model of what a node of a group must look like after provisioning.

Both renderers start here, so cloud and bare metal never drift apart:

* ``stacks/`` renders :class:`NodeSettings` into cloud-init user data (AWS launch templates);
* ``clusterforge/ansible`` renders it into Ansible group_vars for the roles in ``roles/``.

:func:`node_settings` is a pure function of the blueprint and the hardware catalog. Every
setting states where it comes from in :data:`SOURCES`.
"""

# No `from __future__ import annotations`: pydantic then evaluates no annotation strings when it
# builds the models below (a few ms of every cold `clusterforge check`, bench/bench_cli_startup.py).
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .aws import efa_group, instance_arch
from .catalog import Catalog, GpuSpec, InstanceTypeSpec, catalog
from .hardware import group_hardware, instance_spec, nvidia_device_files
from .models import (
    Blueprint,
    EfaNetwork,
    EthernetNetwork,
    InfinibandNetwork,
    KubernetesOrchestrator,
    LustreStorage,
    NfsStorage,
    NodeGroup,
    RoceNetwork,
    SlurmOrchestrator,
)
from .software_stack import SoftwareStack, software_stack
from .vendor import (
    FSX_KEY_FINGERPRINTS,
    TOOLKIT_KEY_FINGERPRINTS,
    DocaRepository,
    DriverPackages,
    apt_key_fingerprints,
    bare_metal,
    container_toolkit_packages,
    doca_repository,
    driver_packages,
    gvisor_sha512,
    kata_sha256,
    kata_tarball,
    pins_word,
)
from .versions import version

__all__ = [
    "SOURCES",
    "LustreClientRepo",
    "LustreTuning",
    "NcclStackSettings",
    "NodeHealth",
    "NodeSettings",
    "SlurmNodeSettings",
    "cluster_settings",
    "generated_nccl_env",
    "lustre_tuning",
    "nccl_stack_settings",
    "node_health",
    "node_settings",
    "nvswitch_count",
]

SOURCES = {
    "memlock": "https://docs.redhat.com/zh-cn/documentation/red_hat_enterprise_linux/7/html/networking_guide/sec-relaxing_memlock_restrictions_for_users",
    "persistence": "https://github.com/NVIDIA/ansible-role-nvidia-driver/blob/master/files/nvidia-persistenced-override.conf",
    "fabric_manager": "https://github.com/NVIDIA/deepops/blob/master/roles/nvidia-dgx/vars/ubuntu-22.04.yml",
    "peermem": "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html",
    "acs": "https://docs.nvidia.com/deeplearning/nccl/archives/nccl_2151/user-guide/docs/troubleshooting.html",
    "iommu": "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/gpu_troubleshooting.html",
    "vfio": "https://github.com/NVIDIA/deepops/blob/master/virtual/README.md",
    "nccl_env": "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html",
    "efa_env": "https://github.com/aws/aws-ofi-nccl/blob/2daf7d303aa139a03140aa530957d10521e4478d/doc/efa-env-var.md",
    "efa_plugin_dirs": "https://github.com/awslabs/awsome-distributed-ai/pull/894",
    "roce_qos": "https://docs.nvidia.com/networking/display/mlnxenv23106161lts/quality-of-service-(qos)",
    "roce_tc": "https://github.com/ROCm/TransferBench/pull/316",
    "raid0": "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ssd-instance-store.html",
    "lnet": "https://wiki.lustre.org/Mounting_a_Lustre_File_System_on_Client_Nodes",
    "striping": "https://wiki.lustre.org/Lustre_Striping_Best_Practices",
    "container_defaults": "https://github.com/NVIDIA/ansible-role-nvidia-docker/blob/master/defaults/main.yml",
    "kata_gpu": "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-kata.html",
    "gvisor_gpu": "https://github.com/google/gvisor/blob/04980e1/g3doc/user_guide/gpu.md",
    "roce_gid": "https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-class-infiniband",
    "fabric_manager_modes": "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html",
    "driver_releases": "https://github.com/NVIDIA/open-gpu-kernel-modules/tags",
}


def nvswitch_count(gpu: GpuSpec | None, cat: Catalog | None = None) -> int:
    """NVSwitch chips on an 8-GPU baseboard of ``gpu``'s NVLink generation (HGX A100: 6, H100/H200:
    4, B200: 2), 0 when unknown. Source: catalog ``nvswitch_virtualization``."""
    table = (cat or catalog()).extras["nvswitch_virtualization"]["nvswitches_per_baseboard"]
    return int(table.get(gpu.nvlink_gen, 0)) if gpu is not None and gpu.nvlink_gen else 0


def on_mount(path: str, mount: str) -> bool:
    """True when ``path`` is the mount point ``mount`` or lies below it (``/fsx/a`` is on ``/fsx``,
    ``/fsxb`` is not). Both are absolute POSIX paths; a trailing ``/`` on ``mount`` is ignored."""
    return path == mount or path.startswith(mount.rstrip("/") + "/")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class LustreClientRepo(_Frozen):
    """A signed apt repository of Lustre client packages (catalog ``aws.fsx_client.apt``,
    https://docs.aws.amazon.com/fsx/latest/LustreGuide/install-lustre-client.html)."""

    url: str
    key_url: str
    """ASCII-armoured signing key (apt's ``Signed-By``)."""
    key_fingerprints: str = ""
    """Primary key fingerprints the key must have before it is trusted (space-separated upper-case hex): Amazon's
    FSx repository's from the catalog (``aws.fsx_client.apt.key_fingerprints``); a site's repository has none."""
    suite: str
    """``Suites:`` of the sources entry; ``{codename}`` is the node's distribution codename."""
    components: list[str]


class ScratchSettings(_Frozen):
    """NVMe scratch: RAID0 (or one drive) over discovered NVMe data drives."""

    mount: str
    filesystem: Literal["xfs", "ext4"]
    raid: Literal["raid0", "none"]
    chunk_kib: int
    mount_options: list[str]
    md_device: str = "/dev/md/scratch"
    expected_drives: int | None
    by_id: list[str]
    discovery: Literal["instance-store", "nvme-data"]
    wipe_signatures: bool = False
    """``instance-store``: AWS "Amazon EC2 NVMe Instance Storage" model; ``nvme-data``: every NVMe
    namespace without partitions, filesystem or mount that is not the root disk."""


class LustreMount(_Frozen):
    """One Lustre client mount. ``source`` is ``NID[:NID]:/fsname``; for FSx it is filled at deploy
    time from the file system's DNS and mount names (``fsx`` = True, ``source`` = None)."""

    name: str
    mount: str
    source: str | None
    fsx: bool
    options: list[str]
    lnet_networks: str
    """``options lnet networks=`` value: ``o2ib0(ibp24s0)``, ``tcp0(ens1f0np0,ens2f0np0)`` from the
    group's declared netdevs; a bare ``tcp0`` when no netdev is declared (then
    ``lnet_route_to`` tells the node which interface to pick)."""
    lnet_route_to: str | None = None
    """Address of the first MGS NID when the LNet interface is discovered on the node: the
    interface the kernel routes that address through (``ip route get``)."""
    stripes: list[dict[str, object]]


class LustreTuning(_Frozen):
    """Lustre client tunings of a node: ``module_options`` (``{module: {option: value}}``, written as
    ``options MODULE OPTION=VALUE`` lines of a modprobe file, read when the modules load) and ``params``
    (``{lctl parameter pattern: value}``, applied with ``lctl set_param`` after the node's Lustre mounts, at every
    boot since they do not persist). From AWS's recommended FSx client tunings for the node's vCPUs and memory
    (catalog ``aws.fsx.client_tuning``, https://docs.aws.amazon.com/fsx/latest/LustreGuide/performance-tips.html)."""

    module_options: dict[str, dict[str, str]]
    params: dict[str, str]


class NfsMount(_Frozen):
    """One NFS client mount."""

    name: str
    mount: str
    source: str
    version: str
    options: list[str]


class RoceQos(_Frozen):
    """Host-side RoCEv2 QoS, applied per netdev with ``mlnx_qos`` and sysfs (switches must match)."""

    interfaces: list[str]
    trust: Literal["dscp", "pcp"]
    flow_control: Literal["pfc", "global-pause", "none"] | None
    pfc_priority: int
    pfc_vector: str
    dscp: int
    ecn: bool
    mtu: int | None
    gid_index: int | Literal["discover"]
    """``NCCL_IB_GID_INDEX``: a fixed index, or ``discover``: each node looks up the GID table
    entry of type ``RoCE v2`` whose GID is its data-plane IPv4 address (``::ffff:a.b.c.d``) on
    the first RoCE interface and writes that index (renderers do the lookup on the node)."""


class NcclStackSettings(_Frozen):
    """The collective stack of a training node (role ``nccl_stack``; cloud nodes run the role's script from user
    data): NCCL from NVIDIA's CUDA repository at the pinned version, nccl-tests built on the node against it with MPI,
    and a PyTorch venv for the stack's CUDA. Every name, path, URL and pin comes from the catalog (``nccl_stack``,
    https://docs.nvidia.com/deeplearning/nccl/install-guide/index.html)."""

    nccl: str
    """NCCL release (``software.nccl``, ``2.27.7``)."""
    cuda: str
    """CUDA ``major.minor`` the NCCL build and nccl-tests are for (``software.cuda``)."""
    packages: list[str]
    """apt specs of the NCCL packages, pinned and held: ``libnccl2=2.27.7-1+cuda12.9``, ``libnccl-dev=...``."""
    build_packages: list[str]
    """Unpinned packages the nccl-tests build and the venv need: the CUDA compiler and runtime headers of ``cuda``
    (``cuda-nvcc-12-9``), make, g++, Open MPI, python3-venv."""
    cuda_home: str
    """``CUDA_HOME`` of the build (``/usr/local/cuda-12.9``)."""
    nccl_home: str
    """``NCCL_HOME`` of the build (``/usr``: the packages' nccl.h and libnccl.so)."""
    mpi_home: str
    """``MPI_HOME`` of the build; ``{multiarch}`` is the node's (``x86_64-linux-gnu``), filled in on the node."""
    net_plugin: str
    """The NCCL network plugin the fabric needs (``aws-ofi-nccl`` on EFA, ``""``: NCCL's built-in transport)."""
    tests_version: str
    """nccl-tests release (``2.17.6``)."""
    tests_url: str
    """Its source archive (NVIDIA's GitHub tag archive)."""
    tests_sha256: str
    """SHA-256 of that archive (``""`` when the catalog pins none: the node refuses to download it)."""
    tests_dir: str
    """Where the ``*_perf`` binaries are installed (the validation payload's first search directory)."""
    torch: str | None
    """PyTorch release of the venv (``SoftwareStack.pytorch``; ``None``: no venv)."""
    torch_index_url: str
    """PyTorch's wheel index of the stack (``SoftwareStack.pytorch_index_url``, ``https://download.pytorch.org/whl/cu130``)."""
    venv: str
    """The venv's directory (``/opt/clusterforge/pytorch``)."""
    container_image: str | None = None
    """The NGC PyTorch image the nodes pull instead of making the venv (``nvcr.io/nvidia/pytorch:26.03-py3``), where
    the blueprint declares containers: ``software.container_image``, or Slurm with pyxis (jobs run in containers;
    ``SoftwareStack.container_image``); ``None``: the venv."""
    enroot_import: bool = False
    """Import the image into enroot (``enroot import``, a squashfs file pyxis's ``--container-image`` takes) instead of
    pulling it into containerd: Slurm with pyxis."""
    images_dir: str = ""
    """Where enroot imports go (``/var/lib/clusterforge/containers``), one ``<repository>+<tag>.sqsh`` per image."""


class NodeHealth(_Frozen):
    """What the node suite's quick checks expect of a node of one group: the contract of the health check
    (``roles/slurm_node/files/clusterforge-slurm-health``, the node suite's rules of ``validate/node_checks.py`` for GPU
    devices, count and model, driver branch, ECC, MIG and mounts). Every node gets it: a Slurm compute node's health
    check reads it with its time limit and drain prefix (:attr:`SlurmNodeSettings.health`), and an EC2 node runs the
    same checks at the end of its first boot (:mod:`stacks.node_status`). Computed once, by :func:`node_health`."""

    gpu_count: int
    """NVIDIA GPUs the host itself uses (0: none, or every GPU is passed into guests, where ``vfio-pci`` owns it)."""
    gpu_model: str | None
    """Their hardware-catalog key (``h100-sxm``); ``None`` without GPUs."""
    gpu_names: list[str]
    """The names ``nvidia-smi`` prints for that model (catalog ``gpu_aliases``); empty: any name."""
    gpu_devices: list[str]
    """Their device files, ``/dev/nvidia0`` .. (:func:`blueprints.hardware.nvidia_device_files`)."""
    driver_branch: str
    """The driver branch the GPUs must run (``software.driver_branch``'s major, ``580``); ``""`` without GPUs."""
    training_node: bool
    """A compute node training on its GPUs: MIG must be off."""
    mounts: list[str]
    """Mount points that must be mounted: the NVMe scratch, then every Lustre and NFS mount, in declared order."""

    @property
    def checks_anything(self) -> bool:
        """Whether there is something to check: GPUs the host uses, or a mount."""
        return bool(self.gpu_count or self.mounts)


class SlurmNodeSettings(_Frozen):
    """What a node of one group needs for Slurm (:mod:`blueprints.slurm` renders the cluster's files once).

    ``part``: ``controller`` (slurmctld, and slurmdbd with accounting), ``node`` (slurmd) or ``login`` (clients);
    ``packages``: catalog ``slurm.packages`` by purpose (``munge``, ``controller``, ``node``, ``login``, ``dbd``,
    ``database``, ``pyxis_build``); ``files``: the cluster's configuration files, ``{absolute path: text}``, for the
    controller and login nodes and for compute nodes that are not configless (``slurmdbd.conf`` is separate,
    ``dbd_conf``, and has no password); ``conf_server``: ``host:port`` configless slurmds fetch from (``""`` when the
    node reads its own files); ``munge_key_host``: the inventory host that generates the one munge key;
    ``gpu_devices``: the device files slurmd waits for; ``health``: the health check's expectations (JSON document:
    :attr:`NodeSettings.health` with the check's time limit and drain prefix, :func:`blueprints.slurm.health_expectations`;
    empty off compute nodes).
    """

    part: Literal["controller", "node", "login"]
    version: str
    cluster_name: str
    packages: dict[str, list[str]]
    files: dict[str, str]
    dbd_conf: str | None
    accounting: bool
    local_database: bool
    password_file: str
    conf_server: str
    munge_key_host: str
    gpu_devices: list[str]
    health: dict[str, Any]
    pyxis: bool
    cgroup_version: Literal["v1", "v2"]
    enroot_version: str = ""
    enroot_debs: list[dict[str, str]] = []
    """The enroot release packages of the node's architecture, ``[{"url", "sha256"}]`` (``sha256`` empty: no pin, the
    role refuses the download)."""
    pyxis_version: str = ""
    pyxis_url: str = ""
    pyxis_sha256: str = ""
    enroot_conf: str = ""


class SandboxSettings(_Frozen):
    """Sandbox runtime of the group."""

    runtime: Literal["container", "kata", "gvisor", "vm"]
    gpu_passthrough: bool
    runtime_class: str | None
    vm_vcpus: int | None = None
    vm_memory_gib: int | None = None
    vm_gpus_per_vm: int | None = None
    nvswitch_plan: Literal["full-passthrough", "shared-nvswitch"] | None = None
    """NVSwitch fabric plan of a passthrough host on an NVSwitch system (``None`` elsewhere)."""
    nvswitch_passthrough: bool = False
    """``full-passthrough``: the NVSwitches are bound to vfio-pci and go to the guest with the GPUs."""
    gpus_per_guest: int | None = None
    """GPUs in each guest (the Fabric Manager partition size in ``shared-nvswitch`` mode)."""
    pcie_root_ports: int | None = None
    """PCIe root ports a Kata guest needs: one per passed GPU and NVSwitch."""
    kata_version: str
    """Kata Containers release installed on Kata hosts (``software.kata``)."""
    gvisor_release: str
    """gVisor release of runsc (``software.gvisor``: ``YYYYMMDD.N`` or ``latest``)."""
    kata_tarball: str | None
    """Kata static release file of ``software.kata`` (``.tar.zst`` from 3.21.0 on) for Kata groups."""
    kata_release_url: str
    """Base URL of Kata's GitHub releases (``<url>/<version>/<kata_tarball>``; catalog ``bare_metal.kata``)."""
    gvisor_release_url: str
    """Base URL of gVisor's release bucket (``<url>/<release>/<arch>/runsc``; catalog ``bare_metal.gvisor``)."""
    kata_sha256: str = ""
    """The catalog's SHA-256 pins of ``kata_version``'s release files, ``ARCH=SHA256 ...`` (``bare_metal.kata.sha256``;
    empty: none pinned, the sandbox script refuses the download)."""
    gvisor_sha512: str = ""
    """The catalog's SHA-512 pins of ``gvisor_release``'s binaries, ``MACHINE/FILE=SHA512 ...``
    (``bare_metal.gvisor.sha512``; empty: none pinned, the sandbox script refuses the download)."""
    runtime_handler: str | None = None
    """The containerd runtime handler Kata / gVisor pods of this group run under (what the group's
    RuntimeClass ``handler`` names and the node checks look for in containerd's configuration): on
    AWS the handler the cloud user data registers and the stack's RuntimeClass names (``runsc`` for
    gVisor, the RuntimeClass name or ``kata`` for Kata); on premises the ``container_runtime`` / ``sandbox`` roles
    register it under the RuntimeClass name; ``None`` for ``container`` and ``vm``."""


class NodeSettings(_Frozen):
    """Everything a node of one group gets configured with.

    Shapes: dicts are ``{name: value}`` strings; ``kernel_cmdline`` is a list of ``key=value``
    kernel parameters; ``nccl_env`` becomes ``/etc/nccl.conf`` lines and the node environment.
    """

    blueprint: str
    """The blueprint's ``name``."""
    group: str
    """The node group's ``name``."""
    role: str
    """The node group's ``role``: ``compute``, ``login``, ``controller`` or ``storage``."""
    provider: Literal["aws", "onprem"]
    """``target.provider``: ``aws`` (cloud-init user data) or ``onprem`` (Ansible roles)."""
    os: str
    """The operating system the node runs: ``target.os`` on-prem (``ubuntu-22.04``, ``ubuntu-24.04``,
    ``debian-12``); on AWS the image the stack boots (catalog ``node_images``: ``ubuntu-22.04`` for
    the Deep Learning AMI and Canonical's Ubuntu, ``al2023`` for EKS managed node groups)."""
    gpu_model: str | None
    """Hardware-catalog key of the node's NVIDIA GPU (``h100-sxm``); ``None`` without NVIDIA GPUs."""
    gpu_count: int
    """NVIDIA GPUs per node (0 without)."""
    nvswitch: bool
    """The node's GPUs sit on NVSwitches (HGX/DGX baseboards): Fabric Manager territory."""
    training_node: bool
    """A compute node whose GPUs the host itself uses (not passed into guests): gets the training
    tuning (``iommu=pt``, PCIe ACS off) and is measured by the validation suites."""
    passthrough_host: bool
    """The node passes its GPUs into Kata or VM guests (VFIO): IOMMU on, GPUs bound to ``vfio-pci``."""
    # host tuning
    memlock_unlimited: bool
    """Unlimited locked memory for PAM sessions and systemd services (RDMA registers pinned memory;
    ``SOURCES["memlock"]``)."""
    sysctls: dict[str, str]
    """Kernel parameters written to ``/etc/sysctl.d`` (name -> value; byte values in bytes): memory
    maps for large models, NUMA balancing off, 256 MiB socket buffers, neighbour tables sized for
    thousands of peers."""
    hugepages_2m: int
    """2 MiB huge pages to reserve (count; 0: none)."""
    cpu_governor: str
    """cpufreq governor set on every core (``performance``: no frequency ramp during collectives)."""
    kernel_cmdline: list[str]
    """Kernel command-line parameters (``key=value``) added at boot: ``iommu=pt`` on training nodes
    (``SOURCES["iommu"]``), ``intel_iommu=on iommu=pt`` on passthrough hosts (``SOURCES["vfio"]``)."""
    disable_acs: bool
    """Turn PCIe Access Control Services off at boot so GPU peer-to-peer and GPUDirect RDMA traffic
    is not redirected through the root complex (``SOURCES["acs"]``)."""
    # GPU stack
    install_gpu_driver: bool
    """The host gets the NVIDIA driver (GPU nodes, except passthrough hosts whose guests own the GPUs;
    shared-NVSwitch hosts keep it for Fabric Manager)."""
    driver_branch: str
    """NVIDIA driver branch (``software.driver_branch``, e.g. ``580``)."""
    driver_version: str | None
    """Exact driver release (``software.driver_version`` or the catalog's release of the branch);
    ``None`` when the catalog knows no release of the branch (the branch's newest package)."""
    kernel_updates: Literal["hold", "dkms-verify"] | None
    """How the node keeps its kernel and out-of-tree modules together (``software.kernel_updates``)."""
    kernel_hold_packages: list[str]
    """``hold`` on a bare-metal host: package-name patterns whose installed packages are apt-mark held
    (catalog ``bare_metal.kernel_hold``); empty otherwise."""
    kernel_hold_blacklist: list[str]
    """The same packages as unattended-upgrades ``Package-Blacklist`` expressions; empty unless ``hold``."""
    out_of_tree_modules: list[str]
    """Kernel modules built outside the kernel that this bare-metal host loads (``nvidia`` with a driver
    install, ``lustre`` with a Lustre mount): checked against the running kernel at every boot."""
    driver_open_kernel_modules: bool
    """Install NVIDIA's open GPU kernel modules (``-open`` packages; required for DMA-BUF GPUDirect RDMA)."""
    gpu_packages: DriverPackages | None
    """On-prem GPU hosts with a driver install: the pinned NVIDIA packages (see :mod:`blueprints.vendor`)."""
    imex_nodes: list[str] = []
    """Multi-node NVLink groups (GB200 NVL72 trays, catalog ``nccl_env_fast_paths.mnnvl_gpus``) with a driver install:
    the addresses of the group's hosts, one NVLink domain, in the order declared: IMEX's node list on every one of them
    (NVIDIA IMEX guide, "NVLink Domain Wide" deployment). Empty elsewhere."""
    fabric_manager: bool
    """Install and run NVIDIA Fabric Manager (NVSwitch hosts that keep their NVSwitches)."""
    fabric_manager_mode: Literal["default", "shared-nvswitch"] | None
    """Fabric Manager mode on this host: ``default`` (bare-metal NVSwitch system),
    ``shared-nvswitch`` (``FABRIC_MODE=1``: guests get GPU partitions), ``None`` (no Fabric
    Manager on the host: no NVSwitch, or the NVSwitches are passed into the guest)."""
    dcgm: bool
    """Install DCGM 4 (``nvidia-dcgm`` service; GPU hosts that use their GPUs)."""
    cuda: str
    """CUDA version (``software.cuda``, else the resolved default: :func:`blueprints.software_stack.software_stack`,
    ``major.minor``): picks DCGM's CUDA package."""
    nccl_version: str
    """NCCL version (``software.nccl``, else the resolved default) the validation payloads and rules assume."""
    container_toolkit: str
    """NVIDIA Container Toolkit version (``software.container_toolkit``)."""
    container_toolkit_packages: list[str]
    """The four toolkit packages pinned to that version (apt specs ``name=version-1``)."""
    # fabric
    fabric: Literal["efa", "infiniband", "roce", "ethernet"]
    """``network.fabric``: the GPU data-plane fabric."""
    rdma: bool
    """The fabric is RDMA-capable (EFA, InfiniBand, RoCE): rdma-core and memlock limits matter."""
    gpudirect_rdma: Literal["nvidia-peermem", "dmabuf"] | None
    """How NICs reach GPU memory on InfiniBand/RoCE: ``dmabuf`` (open kernel modules, kernel 5.12+),
    ``nvidia-peermem`` (only with DOCA-OFED), ``None``: off or not an ib_verbs fabric
    (``SOURCES["peermem"]``)."""
    rdma_devices: list[str]
    """``device:port`` of each declared InfiniBand/RoCE NIC (``mlx5_0:1``), in ``NCCL_IB_HCA`` order."""
    nccl_env: dict[str, str]
    """NCCL / libfabric environment (name -> value): derived from the hardware, then
    ``network.nccl.env`` on top (``SOURCES["nccl_env"]``, ``SOURCES["efa_env"]``)."""
    efa_installer: str | None
    """EFA installer version for EFA groups (``software.efa_installer``); ``None`` elsewhere."""
    aws_ofi_nccl: str | None
    """aws-ofi-nccl plugin version on EFA GPU groups (``software.aws_ofi_nccl``); ``None`` elsewhere."""
    opensm: bool
    """A host of this group runs the InfiniBand subnet manager (``opensm``)."""
    opensm_priority: int | None
    """Subnet-manager priority of this group's opensm (0-15; ``None`` where the group runs no opensm)."""
    doca_ofed: str | None
    """DOCA-OFED release for the RDMA stack (``software.doca_ofed``); ``None``: inbox rdma-core."""
    doca_repository: DocaRepository | None
    """On-prem hosts with ``doca_ofed``: the DOCA repository of the host's OS (``None`` elsewhere, and where
    the catalog knows no DOCA distribution for the OS: the ``doca-ofed-os`` rule reports that)."""
    ipoib: bool
    """IPoIB addresses are configured (``network.infiniband.ipoib.enabled``)."""
    ipoib_mode: str | None
    """IPoIB mode (``datagram`` or ``connected``); ``None`` off InfiniBand."""
    ipoib_netdev: str | None
    """The IPoIB interface (LNet o2ib and IPoIB addresses bind to it): the group's first declared
    InfiniBand port with a netdev (``ibp24s0`` on a DGX H100); ``None`` when none is declared."""
    roce: RoceQos | None
    """Host-side RoCE QoS (trust, PFC, DSCP, ECN) on RoCE fabrics; ``None`` elsewhere."""
    # storage
    scratch: ScratchSettings | None
    """The NVMe scratch array (``local_nvme``); ``None`` when the group declares none."""
    lustre: list[LustreMount]
    """Lustre client mounts, one per ``storage`` entry of kind ``lustre``."""
    lustre_tuning: LustreTuning | None = None
    """Lustre client tunings (:func:`lustre_tuning`); ``None`` where none apply (no FSx mount, an EKS node, an instance
    type at or below AWS's thresholds, or one the catalog does not describe)."""
    nfs: list[NfsMount]
    """NFS client mounts, one per ``storage`` entry of kind ``nfs``."""
    # containers and sandboxes
    container_shm_size: str
    """Default ``/dev/shm`` size of containers (``1G``; NCCL's shared-memory transport and data
    loader workers need more than Docker's 64 MB)."""
    container_default_runtime: str
    """Docker/containerd default runtime: ``nvidia`` on GPU hosts that use their GPUs, else ``runc``."""
    sandbox: SandboxSettings
    """The group's workload sandbox runtime (container, Kata, gVisor or VM) and GPU passthrough plan."""
    container_toolkit_repo_url: str
    """NVIDIA's libnvidia-container apt repository (catalog ``bare_metal.container_toolkit``)."""
    container_toolkit_key_fingerprints: str
    """Primary key fingerprints its signing key must have (space-separated; catalog
    ``bare_metal.container_toolkit.key_fingerprints``)."""
    lustre_client_packages: list[str]
    """Lustre client packages installed with apt (``{kernel}``: the running kernel's release, ``uname -r``):
    from the site's repository on premises (``software.lustre_client_repos``, else catalog
    ``bare_metal.lustre_client``), from Amazon's FSx client
    repository on AWS (catalog ``aws.fsx_client.apt``)."""
    lustre_client_repo: LustreClientRepo | None = None
    """The apt repository of the Lustre client: on premises the blueprint's ``software.lustre_client_repos`` entry
    for ``target.os`` (Whamcloud's per-distribution client builds or a site build; ``None`` when none is
    declared, which ``check`` reports as ``lustre-client-source``), Amazon's FSx client repository on AWS."""
    lustre_client_dnf_packages: list[str] = []
    """Lustre client packages installed with dnf (Amazon Linux 2023 on AWS: ``lustre-client``)."""
    instance_type: str | None = None
    """The EC2 instance type the group's nodes run as (``node_groups[].instance_type`` on AWS: the
    catalog entry gives NICs, instance store and network rate); ``None`` on premises, where the
    group's ``hardware`` describes the nodes."""
    efa_interfaces: int = 0
    """EFA interfaces attached to each node (``network.efa.interfaces``; ``max``: the instance type's
    ``max_efa_interfaces`` in the catalog); 0 for nodes without EFA. A Kubernetes pod that uses
    them requests this many ``vpc.amazonaws.com/efa`` devices."""
    health: NodeHealth
    """What the node suite's quick checks expect of the node (:func:`node_health`): GPUs, driver branch, mounts."""
    slurm: SlurmNodeSettings | None = None
    """The group's part in the Slurm cluster (``orchestrator: slurm``); ``None`` without Slurm and for groups that take
    no part (storage)."""
    nccl_stack: NcclStackSettings | None = None
    """NCCL, nccl-tests and the PyTorch venv (training nodes outside Kubernetes); ``None`` elsewhere."""


def _efa_env(bp: Blueprint, g: NodeGroup, gpu_count: int) -> dict[str, str]:
    """NCCL / libfabric environment of an EFA node group, from its instance type's capabilities
    and the pinned aws-ofi-nccl version's own guide (catalog ``efa_software.env``): nothing for a
    group without EFA or GPUs, ``FI_EFA_USE_DEVICE_RDMA`` only where the EFA has RDMA read.
    The plugin directories (every layout the installers use) go on the library path, or NCCL
    silently falls back to TCP sockets."""
    net = bp.network
    if not isinstance(net, EfaNetwork) or not gpu_count or not efa_group(bp, g):
        return {}
    sw = catalog().aws["efa_software"]
    it = instance_spec(g)
    rdma_read = bool(it is not None and it.efa_rdma_read)
    on = net.gpudirect_rdma.on_for(g.sandbox.passthrough)
    gdr = rdma_read and on
    plugin = version(software_stack(bp).aws_ofi_nccl) or ()
    env: dict[str, str] = {}
    for name, spec in sw["env"].items():
        if plugin >= (version(str(spec["plugin_below"])) or ()):
            continue
        if spec["requires"] == "rdma_read" and not gdr:
            continue
        env[name] = str(spec["value"])
    if rdma_read and not on:
        env.update({k: str(v) for k, v in sw["disable_device_rdma"].items()})
    env["NCCL_NET_PLUGIN"] = "ofi"
    env["LD_LIBRARY_PATH"] = ":".join([*sw["ofi_nccl_plugin_dirs"], sw["libfabric_lib_dir"], sw["cuda_lib_dir"]])
    return env


def generated_nccl_env(bp: Blueprint, g: NodeGroup) -> dict[str, str]:
    """The NCCL environment clusterforge derives from the declared hardware of group ``g``, before
    ``network.nccl.env`` is applied on top (so rules can show what a user value replaces)."""
    return _nccl_env(bp, g, _rdma_devices(bp, g), group_hardware(bp, g).nvidia_gpus, user=False)


def _rdma_devices(bp: Blueprint, g: NodeGroup) -> list[str]:
    if isinstance(bp.network, (InfinibandNetwork, RoceNetwork)) and g.hardware:
        return [f"{n.device}:{n.port}" for n in g.hardware.nics]
    return []


def _nccl_env(bp: Blueprint, g: NodeGroup, rdma_devices: list[str], gpu_count: int = 0,
              user: bool = True) -> dict[str, str]:
    net = bp.network
    env: dict[str, str] = {}
    if isinstance(net, EfaNetwork):
        env.update(_efa_env(bp, g, gpu_count))
    elif isinstance(net, (InfinibandNetwork, RoceNetwork)):
        if rdma_devices:
            env["NCCL_IB_HCA"] = "=" + ",".join(rdma_devices)
        if isinstance(net, RoceNetwork):
            if net.roce.gid_index != "discover":  # discovered per node by the renderers (RoceQos.gid_index)
                env["NCCL_IB_GID_INDEX"] = str(net.roce.gid_index)
            env["NCCL_IB_TC"] = str(net.roce.effective_traffic_class)
        if not net.gpudirect_rdma.on_for(g.sandbox.passthrough):
            env["NCCL_NET_GDR_LEVEL"] = "LOC"
    elif isinstance(net, EthernetNetwork):
        env["NCCL_IB_DISABLE"] = "1"
    if net.nccl.socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = net.nccl.socket_ifname
    if net.nccl.debug:
        env["NCCL_DEBUG"] = net.nccl.debug
    if user:
        env.update(net.nccl.env)
    return env


def lustre_tuning(instance: InstanceTypeSpec | None) -> LustreTuning | None:
    """AWS's recommended FSx for Lustre client tunings for an instance type (catalog ``aws.fsx.client_tuning``): with
    more memory than its threshold (64 GiB) the LDLM LRU parameters (``lru_size`` = 100 x the vCPUs), with more vCPUs
    than its threshold (64) the ptlrpc / ksocklnd module options and the OSC / MDC RPCs in flight. ``None`` when
    neither applies or the type's vCPUs and memory are unknown (``instance`` ``None``). Source:
    https://docs.aws.amazon.com/fsx/latest/LustreGuide/performance-tips.html"""
    if instance is None or instance.vcpus is None or instance.memory_gib is None:
        return None
    t = catalog().aws["fsx"]["client_tuning"]
    modules: dict[str, dict[str, str]] = {}
    params: dict[str, str] = {}
    if instance.memory_gib > float(t["memory_over_gib"]):
        params.update({str(k): str(v) for k, v in t["memory_params"].items()})
        params["ldlm.namespaces.*.lru_size"] = str(int(t["lru_size_per_vcpu"]) * instance.vcpus)
    if instance.vcpus > int(t["vcpus_over"]):
        modules = {str(m): {str(k): str(v) for k, v in o.items()} for m, o in t["vcpu_module_options"].items()}
        params.update({str(k): str(v) for k, v in t["vcpu_params"].items()})
    return LustreTuning(module_options=modules, params=params) if modules or params else None


def node_settings(bp: Blueprint, group: NodeGroup | str) -> NodeSettings:
    """The :class:`NodeSettings` for ``group`` (a node group or its name) of ``bp``.

    Raises ``KeyError`` when the group name does not exist.
    """
    g = bp.group(group) if isinstance(group, str) else group
    net = bp.network
    hw = group_hardware(bp, g)
    gpu_count = hw.nvidia_gpus
    gpu_model = hw.gpu_key if gpu_count else None
    nvswitch = hw.nvswitch and gpu_count > 0
    passthrough = g.sandbox.passthrough and gpu_count > 0
    training = g.compute and gpu_count > 0 and not passthrough
    cpu = g.hardware.cpu_vendor if g.hardware else None
    cmdline: list[str] = []
    if passthrough:
        # VFIO passthrough needs the IOMMU on; pt keeps host DMA fast.
        # The AMD IOMMU is on by default (`amd_iommu=on` is not a valid value); Intel's needs intel_iommu=on.
        cmdline += (["intel_iommu=on"] if cpu != "amd" else []) + ["iommu=pt"]
    elif training:
        # IOMMU translation redirects GPU peer-to-peer through the root complex: passthrough mode.
        cmdline += ["iommu=pt"]
    rdma = net.rdma
    rdma_devices = _rdma_devices(bp, g)
    gdr: Literal["nvidia-peermem", "dmabuf"] | None = None
    if net.ib_verbs and net.gpudirect_rdma.on_for(passthrough) and gpu_count:
        gdr = net.gpudirect_rdma.effective_method(bp.software.driver_open_kernel_modules)
    roce = None
    if isinstance(net, RoceNetwork) and g.hardware:
        r = net.roce
        roce = RoceQos(
            interfaces=[n.netdev for n in g.hardware.nics if n.netdev],
            trust=r.trust,
            flow_control=r.flow_control,
            pfc_priority=r.pfc_priority,
            pfc_vector=",".join("1" if i == r.pfc_priority and r.flow_control == "pfc" else "0" for i in range(8)),
            dscp=r.dscp,
            ecn=r.ecn,
            mtu=net.mtu,
            gid_index=r.gid_index,
        )
    scratch = None
    if g.local_nvme is not None:
        n = g.local_nvme
        scratch = ScratchSettings(
            mount=n.mount,
            filesystem=n.filesystem,
            raid=n.raid,
            chunk_kib=n.chunk_kib,
            mount_options=list(n.mount_options),
            expected_drives=hw.nvme_drives,
            by_id=list(g.hardware.nvme.by_id) if g.hardware and g.hardware.nvme else [],
            discovery=bp.target.scratch_discovery,
            wipe_signatures=n.wipe_signatures,
        )
    ipoib_netdev = None
    if isinstance(net, InfinibandNetwork):
        ipoib_netdev = next((n.netdev for n in (g.hardware.nics if g.hardware else [])
                             if n.netdev and n.link_layer == "infiniband"), None)
    # LNet interfaces come from declared netdevs only (never a guessed `ib0`/`eth0`): o2ib binds to
    # the IPoIB port on InfiniBand or the RoCE ports; tcp to the group's Ethernet ports, or, when
    # none is declared, to the interface the node routes the MGS address through (found on the node).
    eth_netdevs = [n.netdev for n in (g.hardware.nics if g.hardware else []) if n.netdev and n.link_layer == "ethernet"]
    o2ib_netdevs = [ipoib_netdev] if ipoib_netdev else (eth_netdevs if isinstance(net, RoceNetwork) else [])
    lustre: list[LustreMount] = []
    nfs: list[NfsMount] = []
    for s in bp.storage:
        if isinstance(s, LustreStorage):
            stripes = [{"path": st.path, "count": st.count, "size": st.size} for st in s.stripes]
            if s.server is not None:
                nets = {nid.split("@", 1)[1] for nid in s.server.mgs_nids}
                uses_o2ib = any(x.startswith("o2ib") for x in nets)
                ifaces = o2ib_netdevs if uses_o2ib else eth_netdevs
                lnet = ("o2ib0" if uses_o2ib else "tcp0") + (f"({','.join(ifaces)})" if ifaces else "")
                route_to = None if ifaces else s.server.mgs_nids[0].split("@", 1)[0]
                lustre.append(LustreMount(
                    name=s.name, mount=s.mount, source=":".join(s.server.mgs_nids) + f":/{s.server.fsname}",
                    fsx=False, options=list(s.mount_options), lnet_networks=lnet, lnet_route_to=route_to,
                    stripes=stripes))
            else:
                # FSx clients: LNet's own default (the instance's one addressed ENA interface)
                lustre.append(LustreMount(name=s.name, mount=s.mount, source=None, fsx=True,
                                          options=list(s.mount_options), lnet_networks="tcp0", stripes=stripes))
        elif isinstance(s, NfsStorage):
            nfs.append(NfsMount(name=s.name, mount=s.mount, source=f"{s.server}:{s.export}", version=s.version,
                                options=list(s.mount_options)))
    sw = bp.software
    cat = catalog()
    stack = software_stack(bp, cat)
    node_os = bp.target.node_os(cat.aws["node_images"], kubernetes=isinstance(bp.orchestrator, KubernetesOrchestrator),
                                gpus=gpu_count > 0)
    roles_install = bp.target.host_software == "roles"
    driver_version = sw.driver_version or cat.driver_release(sw.driver_branch)
    plan = g.sandbox.nvswitch.mode if (passthrough and nvswitch and g.sandbox.nvswitch) else None
    guest_gpus = root_ports = None
    if passthrough:
        guest_gpus = (gpu_count if plan == "full-passthrough"
                      else (g.sandbox.nvswitch.gpus_per_guest if plan and g.sandbox.nvswitch else None)
                      or (g.sandbox.vm.gpus_per_vm if g.sandbox.vm else None) or gpu_count)
        switches = nvswitch_count(hw.gpu, cat) if plan == "full-passthrough" else 0
        root_ports = guest_gpus + switches
    install_driver = gpu_count > 0 and (not passthrough or plan == "shared-nvswitch")
    fabric_manager = nvswitch and (not passthrough or plan == "shared-nvswitch")
    gpu_packages = None
    if install_driver and roles_install and driver_version:
        gpu_packages = driver_packages(
            os=node_os, branch=sw.driver_branch.split(".")[0], version=driver_version,
            open_modules=sw.driver_open_kernel_modules, nvlink_gen=hw.gpu.nvlink_gen if hw.gpu else None,
            fabric_manager=fabric_manager, dcgm=not passthrough, cuda=stack.cuda,
            fabric_manager_mode="shared-nvswitch" if plan == "shared-nvswitch" else "default",
            mnnvl=gpu_model in cat.mnnvl_gpus)
    health = node_health(bp, g, ([scratch.mount] if scratch else []) + [m.mount for m in lustre] + [m.mount for m in nfs])
    opensm = (isinstance(net, InfinibandNetwork) and net.infiniband.subnet_manager.kind == "opensm"
              and any(h.name == net.infiniband.subnet_manager.host for h in g.hosts))
    return NodeSettings(
        blueprint=bp.name,
        group=g.name,
        role=g.role,
        provider=bp.target.provider,
        os=node_os,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        nvswitch=nvswitch,
        training_node=training,
        passthrough_host=passthrough,
        memlock_unlimited=True,
        sysctls={
            "vm.max_map_count": "1048576",
            "kernel.numa_balancing": "0",
            "net.core.rmem_max": "268435456",
            "net.core.wmem_max": "268435456",
            "net.ipv4.neigh.default.gc_thresh1": "8192",
            "net.ipv4.neigh.default.gc_thresh2": "16384",
            "net.ipv4.neigh.default.gc_thresh3": "32768",
        },
        hugepages_2m=0,
        cpu_governor="performance",
        kernel_cmdline=cmdline,
        disable_acs=training,
        install_gpu_driver=install_driver,
        driver_branch=sw.driver_branch,
        driver_version=driver_version,
        kernel_updates=sw.kernel_updates,
        out_of_tree_modules=([] if not roles_install else
                             (["nvidia"] if install_driver else []) + (["lustre"] if any(m.source for m in lustre) else [])),
        kernel_hold_packages=(list(bare_metal()["kernel_hold"]["packages"])
                              if sw.kernel_updates == "hold" and roles_install else []),
        kernel_hold_blacklist=(list(bare_metal()["kernel_hold"]["unattended_upgrades_blacklist"])
                               if sw.kernel_updates == "hold" and roles_install else []),
        driver_open_kernel_modules=sw.driver_open_kernel_modules,
        gpu_packages=gpu_packages,
        # one node group is one NVLink domain (the imex-domain rule keeps it within the domain's size)
        imex_nodes=[h.address for h in g.hosts] if gpu_packages is not None and gpu_packages.imex_service else [],
        fabric_manager=fabric_manager,
        fabric_manager_mode=(None if not nvswitch else "default" if not passthrough
                             else "shared-nvswitch" if plan == "shared-nvswitch" else None),
        dcgm=gpu_count > 0 and not passthrough,
        cuda=stack.cuda,
        nccl_version=stack.nccl,
        container_toolkit=sw.container_toolkit,
        container_toolkit_packages=container_toolkit_packages(sw.container_toolkit),
        fabric=net.fabric,
        rdma=rdma,
        gpudirect_rdma=gdr,
        rdma_devices=rdma_devices,
        nccl_env=_nccl_env(bp, g, rdma_devices, gpu_count),
        efa_installer=stack.efa_installer if efa_group(bp, g) else None,
        aws_ofi_nccl=stack.aws_ofi_nccl if efa_group(bp, g) and gpu_count else None,
        opensm=opensm,
        opensm_priority=net.infiniband.subnet_manager.priority if opensm and isinstance(net, InfinibandNetwork) else None,
        doca_ofed=sw.doca_ofed,
        doca_repository=(doca_repository(sw.doca_ofed, node_os)
                         if sw.doca_ofed and roles_install else None),
        ipoib=isinstance(net, InfinibandNetwork) and net.infiniband.ipoib.enabled,
        ipoib_mode=net.infiniband.ipoib.mode if isinstance(net, InfinibandNetwork) else None,
        ipoib_netdev=ipoib_netdev,
        roce=roce,
        scratch=scratch,
        lustre=lustre,
        # EKS nodes: none (the CSI driver mounts their volumes after boot, and their user data has no room left)
        lustre_tuning=(lustre_tuning(hw.instance) if any(m.fsx for m in lustre)
                       and not isinstance(bp.orchestrator, KubernetesOrchestrator) else None),
        nfs=nfs,
        container_shm_size="1G",
        container_default_runtime="nvidia" if gpu_count and not passthrough else "runc",
        sandbox=SandboxSettings(
            runtime=g.sandbox.runtime,
            gpu_passthrough=passthrough,
            runtime_class=g.sandbox.runtime_class_name,
            vm_vcpus=g.sandbox.vm.vcpus if g.sandbox.vm else None,
            vm_memory_gib=g.sandbox.vm.memory_gib if g.sandbox.vm else None,
            vm_gpus_per_vm=g.sandbox.vm.gpus_per_vm if g.sandbox.vm else None,
            nvswitch_plan=plan,
            nvswitch_passthrough=plan == "full-passthrough",
            gpus_per_guest=guest_gpus,
            pcie_root_ports=root_ports,
            kata_version=sw.kata,
            gvisor_release=sw.gvisor,
            kata_tarball=kata_tarball(sw.kata) if g.sandbox.runtime == "kata" else None,
            kata_release_url=bare_metal()["kata"]["release_url"],
            gvisor_release_url=bare_metal()["gvisor"]["release_url"],
            kata_sha256=pins_word(kata_sha256(sw.kata)),
            gvisor_sha512=pins_word({f"{m}/{f}": h for m, files in gvisor_sha512(sw.gvisor).items()
                                     for f, h in files.items()}),
            runtime_handler=_sandbox_handler(bp, g),
        ),
        container_toolkit_repo_url=bare_metal()["container_toolkit"]["repo_url"],
        container_toolkit_key_fingerprints=apt_key_fingerprints(TOOLKIT_KEY_FINGERPRINTS),
        **_lustre_client(bp),
        instance_type=g.instance_type if bp.target.instance_types else None,
        efa_interfaces=_efa_interfaces(bp, g),
        health=health,
        slurm=_slurm_node(bp, g, health),
        # training nodes outside Kubernetes (pods bring their own stack in the image)
        nccl_stack=(nccl_stack_settings(stack, net.fabric, pyxis=isinstance(bp.orchestrator, SlurmOrchestrator)
                                                         and bp.orchestrator.pyxis)
                    if training and not isinstance(bp.orchestrator, KubernetesOrchestrator) else None),
    )


def _slurm_node(bp: Blueprint, g: NodeGroup, health: NodeHealth) -> SlurmNodeSettings | None:
    """:attr:`NodeSettings.slurm` of group ``g`` (:func:`blueprints.slurm.slurm_settings` renders the cluster once per
    call; it is a pure function of the blueprint); ``health``: the group's :attr:`NodeSettings.health`."""
    from .slurm import health_expectations, slurm_catalog, slurm_files, slurm_settings

    s = slurm_settings(bp)
    part = {"controller": "controller", "compute": "node", "login": "login"}.get(g.role)
    arm = (instance_arch(g.instance_type) == "arm64" if g.instance_type
           else g.hardware is not None and g.hardware.cpu_vendor == "arm")
    if s is None or part is None or (part == "controller" and g.name != s.controller_group):
        return None
    files = slurm_files(s)
    dbd = files.pop("/etc/slurm/slurmdbd.conf", None)
    configless_node = part == "node" and s.configless and s.has("configless")
    nodes = s.group_nodes(g.name)
    return SlurmNodeSettings(
        part=part,  # type: ignore[arg-type]
        version=s.version,
        cluster_name=s.cluster_name,
        packages={k: list(v) for k, v in slurm_catalog()["packages"].items()},
        files={} if configless_node else files,
        dbd_conf=dbd if part == "controller" else None,
        accounting=s.accounting and part == "controller",
        local_database=s.accounting and s.database_host is None and part == "controller",
        password_file=s.password_file,
        conf_server=s.conf_server if configless_node else "",
        munge_key_host=s.controller or "",
        gpu_devices=nodes[0].gpu_devices if nodes else [],
        health=health_expectations(health.model_dump()) if part == "node" else {},
        pyxis=s.pyxis and part in ("node", "login"),
        cgroup_version=s.cgroup_version,
        **(_containers(s, "arm64" if arm else "amd64") if s.pyxis and part in ("node", "login") else {}),
    )


def node_health(bp: Blueprint, g: NodeGroup, mounts: list[str]) -> NodeHealth:
    """:attr:`NodeSettings.health` of group ``g``: its NVIDIA GPUs unless they are passed into guests
    (:attr:`blueprints.hardware.GroupHardware.nvidia_gpus`), the names ``nvidia-smi`` prints for their model (catalog
    ``gpu_aliases``), their device files, the driver branch, whether the node trains (MIG off), and ``mounts`` (mount
    points, in order)."""
    hw = group_hardware(bp, g)
    gpus = 0 if g.sandbox.passthrough else hw.nvidia_gpus
    key = hw.gpu_key if gpus else None
    aliases = catalog().extras["gpu_aliases"]["names"]
    return NodeHealth(gpu_count=gpus, gpu_model=key, gpu_names=sorted(n for n, k in aliases.items() if k == key),
                      gpu_devices=nvidia_device_files(gpus),
                      driver_branch=bp.software.driver_branch.split(".")[0] if key else "",
                      training_node=g.compute and gpus > 0, mounts=list(mounts))


def _containers(s: Any, arch: str) -> dict[str, Any]:
    """The enroot / pyxis fields of :class:`SlurmNodeSettings` for a node of dpkg architecture ``arch``."""
    from .slurm import ENROOT_CONF, enroot_files, pyxis_file, pyxis_url, slurm_catalog

    cat = slurm_catalog()
    return {
        "enroot_version": str(cat["enroot"]["version"]),
        "enroot_debs": [{"url": url, "sha256": s.container_pins.get(name, "")} for name, url in enroot_files(arch)],
        "pyxis_version": str(cat["pyxis"]["version"]),
        "pyxis_url": pyxis_url(),
        "pyxis_sha256": s.container_pins.get(pyxis_file(), ""),
        "enroot_conf": ENROOT_CONF,
    }


def nccl_stack_settings(stack: SoftwareStack, fabric: str, *, pyxis: bool = False) -> NcclStackSettings | None:
    """The collective stack of the resolved software ``stack`` on ``fabric``: NCCL's packages at the stack's NVIDIA
    build (``SoftwareStack.nccl_package_version``, ``libnccl2=2.28.9-1+cuda13.0``), the nccl-tests build and the PyTorch
    wheel of the stack, with the names, paths and pins of the catalog's ``nccl_stack`` section
    (https://docs.nvidia.com/deeplearning/nccl/install-guide/index.html). ``None`` when the catalog knows no NVIDIA
    build of the stack's NCCL for its CUDA (``check`` reports that). Raises ``KeyError`` for a fabric the catalog's
    ``nccl_stack.net_plugin`` does not list. ``pyxis``: the group runs Slurm jobs in containers (the NGC image is
    imported into enroot; see :attr:`NcclStackSettings.container_image`)."""
    if stack.nccl_cuda is None or stack.nccl_package_version is None:
        return None
    c = catalog().extras["nccl_stack"]
    minor = stack.nccl_cuda
    fmt = {"cuda": minor, "cuda_dash": minor.replace(".", "-")}
    t = c["nccl_tests"]
    return NcclStackSettings(
        nccl=stack.nccl.split("-")[0], cuda=minor,
        packages=[f"{name}={stack.nccl_package_version}" for name in c["packages"]],
        build_packages=[p.format(**fmt) for p in c["cuda_build_packages"]] + list(c["build_packages"])
        + list(c["pytorch"]["packages"]),
        cuda_home=c["cuda_home"].format(**fmt), nccl_home=c["nccl_home"], mpi_home=c["mpi_home"],
        net_plugin=c["net_plugin"][fabric],
        tests_version=t["version"], tests_url=t["url"].format(version=t["version"]),
        tests_sha256=t["sha256"].get(t["version"], ""), tests_dir=t["install_dir"],
        torch=stack.pytorch, torch_index_url=stack.pytorch_index_url, venv=c["pytorch"]["venv"],
        container_image=stack.container_image if ("container_image" in stack.stated or pyxis) else None,
        enroot_import=pyxis and stack.container_image is not None, images_dir=c["containers"]["images_dir"],
    )


def _sandbox_handler(bp: Blueprint, g: NodeGroup) -> str | None:
    """:attr:`SandboxSettings.runtime_handler` of group ``g``."""
    sb = g.sandbox
    if sb.runtime not in ("kata", "gvisor"):
        return None
    handler: str | None = sb.runtime_class_name  # the roles register the handler under the RuntimeClass name
    if bp.target.sandbox_handlers == "user-data":  # what the cloud user data registers, so the RuntimeClass names it
        handler = "runsc" if sb.runtime == "gvisor" else (sb.runtime_class_name or "kata")
    return handler or sb.runtime


def _efa_interfaces(bp: Blueprint, g: NodeGroup) -> int:
    """:attr:`NodeSettings.efa_interfaces` of group ``g``: 0 unless its nodes get EFA
    (:func:`blueprints.aws.efa_group`), else ``network.efa.interfaces`` (``max``: the catalog's maximum)."""
    net = bp.network
    if not isinstance(net, EfaNetwork) or not efa_group(bp, g):
        return 0
    it = instance_spec(g)
    maximum = int(it.max_efa_interfaces or 0) if it is not None else 0
    return maximum if net.efa.interfaces == "max" else int(net.efa.interfaces)


def _lustre_client(bp: Blueprint) -> dict[str, Any]:
    """Where the Lustre client comes from: on premises the blueprint's ``software.lustre_client_repos`` entry for
    ``target.os`` (packages: the entry's, else the catalog's DKMS client), Amazon's FSx client repository on AWS."""
    if bp.target.lustre_client == "fsx":
        fsx = catalog().aws["fsx_client"]
        apt = fsx["apt"]
        return {"lustre_client_packages": list(apt["packages"]),
                "lustre_client_repo": LustreClientRepo(url=apt["repo_url"], key_url=apt["key_url"], suite=apt["suite"],
                                                       components=list(apt["components"]),
                                                       key_fingerprints=apt_key_fingerprints(FSX_KEY_FINGERPRINTS)),
                "lustre_client_dnf_packages": list(fsx["dnf"]["packages"])}
    packages = list(bare_metal()["lustre_client"]["packages"])
    site_os = getattr(bp.target, "os", None)  # a target whose hosts use the site's client declares their OS
    repo = bp.software.lustre_client_repos.get(site_os) if site_os else None
    if repo is None:  # no declared source: check's `lustre-client-source` error, the role's preflight stops
        return {"lustre_client_packages": packages}
    return {"lustre_client_packages": list(repo.packages) if repo.packages else packages,
            "lustre_client_repo": LustreClientRepo(url=repo.url, key_url=repo.key_url, suite=repo.suite,
                                                   components=list(repo.components))}


def cluster_settings(bp: Blueprint) -> dict[str, NodeSettings]:
    """:func:`node_settings` for every node group, keyed by group name."""
    return {g.name: node_settings(bp, g) for g in bp.node_groups}
