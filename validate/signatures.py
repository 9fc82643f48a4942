"""The one table of failure signatures: what a log line (or a measured pattern) means, its cause and its fix.

Each :class:`Signature` has a stable ``id`` (the anchor of its section in
``docs/troubleshooting.md``, which :func:`troubleshooting_markdown` generates from this table),
a ``pattern`` searched in every line of a raw output (``NCCL WARN`` and ``NCCL INFO`` lines, CUDA
and NCCL error lines, launcher messages, not only the final failure line) or ``None`` for
diagnoses the judge derives from the numbers, a ``scope`` (``local``: the node itself;
``network``: between nodes, never given for a single-node run; ``any``), the ``cause`` and
``fix`` texts and the ``source`` URL of the fact.

Order matters: :func:`diagnose` returns matches in table order and the table lists the most
specific signature first (``failed to extend /dev/shm`` before the generic ``unhandled system
error``), so the first match is the likeliest cause.

Run ``python -m validate.troubleshooting > docs/troubleshooting.md`` to regenerate the page (a test
checks that the committed page matches this table).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .expectations import IB_VERBS_FABRICS
from .parsers.bounds import too_long

__all__ = ["DOC_PATH", "SIGNATURES", "Signature", "by_id", "diagnose", "doc_ref", "troubleshooting_markdown"]

DOC_PATH = "docs/troubleshooting.md"
"""Where the generated troubleshooting page lives, relative to the repository root."""

NCCL_TROUBLESHOOTING = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
FABRIC_MANAGER = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"
CUDA_ERRORS = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html"
MIG_INSTANCES = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/communicators.html#using-mig-instances"
"""NVIDIA's NCCL guide, "Using MIG instances" (experimental since NCCL 2.31; NVIDIA/nccl issue #1716: MIG has no CUDA
peer-to-peer over PCIe or NVLink, hence no NVLS or MNNVL; instances talk over shared memory, GPUs over the NICs)."""
NCCL_IB_CONNECT = "https://github.com/NVIDIA/nccl/blob/5067397c2676d5aed50042fc39e5c8ee96eb0027/src/transport/net_ib/connect.cc"
"""NCCL's IB transport: ``initAttr->pkeyIndex = ncclParamIbPkey()``, i.e. NCCL_IB_PKEY is an index into the port's
P_Key table, parsed with ``strtoll(.., 0)`` (hex accepted)."""


@dataclass(frozen=True)
class Signature:
    """One known failure: how to recognise it and what to do.

    ``id``: stable, DNS-style (also the doc anchor); ``title``: short name; ``pattern``: a regular
    expression (case-insensitive) searched in each log line, in time linear in the line (``X.*Y`` is
    written ``X(?:(?!X).)*Y``, so each character is scanned from one ``X`` only; a test checks every
    pattern on long hostile lines), ``None`` for a diagnosis derived from
    the measurements; ``scope``: ``local``, ``network`` or ``any``; ``nodes``: ``single``, ``multi``
    or ``any`` (which runs the line means this for); ``fabrics``: the fabrics it applies to (empty:
    all); ``kind``: ``nccl`` or ``fio``; ``cause_template``/``fix_template``: one sentence each, in which
    ``{unit:KEY}`` stands for the systemd unit name the catalog gives a vendor daemon
    (:func:`blueprints.vendor.vendor_units`, e.g. ``{unit:fabricmanager}``), read as :attr:`cause` /
    :attr:`fix`; ``example``: a log line it matches; ``source``: URL of the fact.
    """

    id: str
    title: str
    pattern: str | None
    scope: str
    cause_template: str
    fix_template: str
    source: str
    example: str = ""
    nodes: str = "any"
    fabrics: tuple[str, ...] = ()
    kind: str = "nccl"

    @property
    def cause(self) -> str:
        """The cause, one sentence, with the catalog's unit names filled in."""
        return _with_units(self.cause_template)

    @property
    def fix(self) -> str:
        """The fix, one sentence, with the catalog's unit names filled in."""
        return _with_units(self.fix_template)

    @property
    def regex(self) -> re.Pattern[str] | None:
        """The compiled ``pattern`` (``None`` for derived diagnoses)."""
        return _compiled(self.pattern) if self.pattern else None

    def applies(self, *, multi: bool | None, fabric: str | None) -> bool:
        """True when this signature may explain a run on ``multi`` nodes (``None``: unknown) of ``fabric``.

        A network-scope signature never applies to a single-node run."""
        if multi is False and (self.scope == "network" or self.nodes == "multi"):
            return False
        if multi is True and self.nodes == "single":
            return False
        return not (self.fabrics and fabric is not None and fabric not in self.fabrics)

    def text(self) -> str:
        """``"Likely cause: <cause>. Fix: <fix> (docs/troubleshooting.md#<id>)"``: what the judge appends to a reason."""
        return f"Likely cause: {self.cause}. Fix: {self.fix} ({doc_ref(self.id)})"

    def hint(self) -> str:
        """``"Fix: <fix> (docs/troubleshooting.md#<id>)"``: for reasons that already state the cause."""
        return f"Fix: {self.fix} ({doc_ref(self.id)})"


_UNIT = re.compile(r"\{unit:(\w+)\}")


def _with_units(text: str) -> str:
    """``text`` with each ``{unit:KEY}`` replaced by the vendor unit name the catalog gives ``KEY`` (the catalog
    is read only for a text that names a unit). Raises ``KeyError`` for a key the catalog does not list."""
    if "{unit:" not in text:
        return text
    from blueprints.vendor import vendor_units

    units = vendor_units()
    return _UNIT.sub(lambda m: units[m.group(1)], text)


_CACHE: dict[str, re.Pattern[str]] = {}


def _compiled(p: str) -> re.Pattern[str]:
    rx = _CACHE.get(p)
    if rx is None:
        rx = _CACHE[p] = re.compile(p, re.IGNORECASE)
    return rx


def doc_ref(sig_id: str) -> str:
    """``docs/troubleshooting.md#<id>``: where a reason points for the full explanation."""
    return f"{DOC_PATH}#{sig_id}"


SIGNATURES: tuple[Signature, ...] = (
    # ---- shared memory, bootstrap, GPUs: the node itself ------------------------------------
    Signature(
        "shm-too-small", "/dev/shm too small (containers)",
        r"failed to extend /dev/shm|Error while (?:creating|attaching to) shared memory segment|posix_fallocate failed"
        r"|/dev/shm(?:(?!/dev/shm).)*No space left|No space left(?:(?!No space left).)*/dev/shm|shm_open",
        "local",
        "NCCL could not allocate its shared-memory buffers in /dev/shm: the container's /dev/shm is too small "
        "(Docker's default is 64 MB) or full of stale nccl-* segments",
        "start the container with `--shm-size=1g` or `--ipc=host` (Kubernetes: mount an `emptyDir` with "
        "`medium: Memory` at /dev/shm), remove stale /dev/shm/nccl-* files, check `df -h /dev/shm`",
        f"{NCCL_TROUBLESHOOTING}#shared-memory",
        "misc/shmutils.cc:71 NCCL WARN Error: failed to extend /dev/shm/nccl-fjwOOB to 5967876 bytes"),
    Signature(
        "socket-interface-missing", "Bootstrap socket interface does not exist",
        r"no socket interface found|NET/Socket : no interface found|no NCCL_SOCKET_IFNAME interface"
        r"|neither AF_INET\(2\) nor AF_INET6",
        "any",
        "NCCL_SOCKET_IFNAME names a network interface that does not exist on this node (interface names often "
        "differ between nodes and inside containers), so NCCL has no address to bootstrap over",
        "list the interfaces with `ip -br addr` on every node and set NCCL_SOCKET_IFNAME to a prefix that matches "
        "an existing one on all of them (e.g. `ens,eth`), or unset it (the default excludes lo and docker*)",
        f"{NCCL_ENV}#nccl-socket-ifname",
        "bootstrap.cc:85 NCCL WARN Bootstrap : no socket interface found"),
    Signature(
        "fabric-manager-not-running", "CUDA 'system not yet initialized' on an NVSwitch system",
        r"system not yet initiali[sz]ed|cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY",
        "local",
        "CUDA reports the system is not yet initialized: on an NVSwitch system (HGX/DGX A100, H100, H200) the "
        "NVIDIA Fabric Manager service is not running or does not match the driver version; on NVLink 5 "
        "systems (B200, GB200) the NVLink subnet manager (nvlsm), which Fabric Manager's unit starts, must run as well",
        "`systemctl status {unit:fabricmanager}` (on NVLink 5 its start check also needs the ib_umad module and the "
        "nvlsm package): install the Fabric Manager package of the same branch as the driver, enable and start it, "
        "then rerun",
        FABRIC_MANAGER,
        "node-1: Test CUDA failure common.cu:941 'system not yet initialized'"),
    Signature(
        "gpu-busy-or-exclusive", "GPUs busy or in exclusive mode",
        r"busy or unavailable|cudaErrorDevicesUnavailable|Exclusive[_ -]Process",
        "local",
        "another process holds the GPUs, or they are in Exclusive-Process compute mode so a second process "
        "cannot open them",
        "check `nvidia-smi` for leftover processes on every node and `nvidia-smi -q | grep 'Compute Mode'`; set "
        "`nvidia-smi -c DEFAULT` or make sure one job owns the node",
        CUDA_ERRORS,
        "Test CUDA failure common.cu:892 'CUDA-capable device(s) is/are busy or unavailable'"),
    Signature(
        "mig-multi-rank-gpu", "Several ranks on one physical GPU (MIG instances)",
        r"Multiple Ranks are using the same GPU/Partition",
        "local",
        "several ranks sit on one physical GPU: MIG instances of the same GPU (NCCL identifies a rank's device by the "
        "parent GPU's NVML index and bus id, so instances of one GPU look like one device) or ranks sharing a GPU; "
        "NCCL 2.30 and later refuses that unless multi-rank GPUs are enabled",
        "for ranks on MIG instances (one MIG UUID per rank in CUDA_VISIBLE_DEVICES) use NCCL 2.31 or later and set "
        "NCCL_MULTI_RANK_GPU_ENABLE=1, as the message says; MIG has no CUDA peer-to-peer, NVLink or NVLink SHARP between "
        "instances of different GPUs, so such a run measures host shared memory or the NICs, never NVLink. Otherwise give "
        "each rank its own GPU",
        MIG_INSTANCES,
        "init.cc:1141 (initTransportsRank) NCCL WARN Multiple Ranks are using the same GPU/Partition. Set "
        "NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration."),
    Signature(
        "nvls-forced-shared-gpu", "NVLink SHARP demanded on a shared GPU",
        r"NCCL_NVLS_ENABLE has been set to \"1\" and communicator has multiple ranks",
        "local",
        "the environment demands NVLink SHARP (NCCL_NVLS_ENABLE=1 makes it mandatory) while several ranks share one GPU "
        "(MIG instances): NVLink SHARP cannot work there, so NCCL refuses to start. Cluster images and pod specs often "
        "export this variable",
        "unset NCCL_NVLS_ENABLE in the job's environment (its default, 2, uses NVLink SHARP only where it can), then "
        "rerun; find where it is exported (`env | grep NCCL_`, the image's environment, the pod spec)",
        MIG_INSTANCES,
        "transport/nvls.cc:255 (ncclNvlsInit) NCCL WARN NCCL_NVLS_ENABLE has been set to \"1\" and communicator has "
        "multiple ranks using the same NVML device. This is not compatible with NCCL_NVLS_ENABLE=1."),
    Signature(
        "duplicate-gpu", "Two ranks on one GPU",
        r"Duplicate GPU detected",
        "local",
        "two ranks were given the same GPU: the launcher's process-to-GPU mapping is wrong, or the ranks run on MIG "
        "instances of one GPU with an NCCL older than 2.31 (which sees every instance as its parent GPU)",
        "launch one process per GPU (`--ntasks-per-node` = GPUs per node, each rank choosing its GPU by local rank) "
        "and do not restrict CUDA_VISIBLE_DEVICES to one device for every rank; a per-task GPU binding "
        "(`--gpus-per-task`, `--gpu-bind=per_task:1`) hides the GPUs from each other instead. Ranks on MIG instances "
        "need NCCL 2.31 or later with NCCL_MULTI_RANK_GPU_ENABLE=1",
        f"{NCCL_TROUBLESHOOTING}#errors",
        "init.cc:745 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000"),
    Signature(
        "no-cuda-device", "No GPU visible to the process",
        r"no CUDA-capable device is detected|cudaErrorNoDevice|invalid device ordinal|Invalid number of GPUs",
        "local",
        "the process sees fewer GPUs than it was asked to use: the container runs without the NVIDIA runtime, "
        "CUDA_VISIBLE_DEVICES hides them, or more ranks (or -g) per node than the node has GPUs",
        "run the container with the NVIDIA runtime (`--gpus all`, RuntimeClass nvidia), check `nvidia-smi -L` in "
        "the job, and match processes per node x -g to the node's GPUs",
        CUDA_ERRORS,
        "Test CUDA failure common.cu:800 'no CUDA-capable device is detected'"),
    Signature(
        "cuda-driver-too-old", "Driver older than the CUDA runtime",
        r"CUDA driver version is insufficient|cudaErrorInsufficientDriver|forward compatibility was attempted",
        "local",
        "the NVIDIA driver is older than the CUDA runtime the benchmark was built with",
        "install a driver of the branch the CUDA version needs (or rebuild the benchmark against the installed "
        "CUDA); `nvidia-smi` shows the highest CUDA version the driver supports",
        CUDA_ERRORS,
        "Test CUDA failure common.cu:800 'CUDA driver version is insufficient for CUDA runtime version'"),
    Signature(
        "gpu-out-of-memory", "GPU memory exhausted",
        r"out of memory|cudaErrorMemoryAllocation",
        "local",
        "GPU memory ran out while allocating the benchmark buffers",
        "lower the largest message size (-e, validation.nccl.max_bytes) or free the GPUs (`nvidia-smi`)",
        CUDA_ERRORS,
        "Test CUDA failure common.cu:1004 'out of memory'"),
    # ---- the network between nodes --------------------------------------------------------
    Signature(
        "efa-provider-missing", "No EFA provider in the job",
        r"fi_getinfo|No providers? (?:were )?found|Unable to find a usable provider|OFI(?:(?!OFI).)*(?:-61|No data available)",
        "network",
        "libfabric found no EFA provider inside the job: the EFA devices are not exposed to the container (or "
        "the EFA installer's libfabric is not on the library path)",
        "request `vpc.amazonaws.com/efa` (Kubernetes) or pass every /dev/infiniband/uverbs* device (Docker), "
        "and check `fi_info -p efa` inside the job",
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html",
        "NET/OFI fi_getinfo call failed: No data available (-61)", fabrics=("efa",)),
    Signature(
        "net-plugin-missing", "NCCL network plugin not found",
        r"NET/Plugin(?:(?!NET/Plugin).)*(?:No plugin found|Could not find|cannot open shared object"
        r"|Plugin load (?:(?!Plugin load ).)*returned)",
        "network",
        "NCCL could not load the OFI network plugin (aws-ofi-nccl), so it falls back to TCP sockets on the EFA "
        "cluster",
        "put the aws-ofi-nccl library directory and libfabric (/opt/amazon/efa/lib) on LD_LIBRARY_PATH inside the "
        "job; with NCCL_DEBUG=INFO the log must say 'Selected Provider is efa'",
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html",
        "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file",
        fabrics=("efa",)),
    Signature(
        "rdma-device-missing", "No RDMA device in the job",
        r"NET/IB : No device found|ibv_get_device_list|No IB devices found|/dev/infiniband(?:(?!/dev/infiniband).)*(?:No such file|denied)",
        "network",
        "NCCL found no InfiniBand/RoCE device: the job (container) was started without the RDMA devices",
        "pass /dev/infiniband (or the RDMA device plugin resource), IPC_LOCK and memlock unlimited into the "
        "container; `ibv_devices` inside the job must list the HCAs",
        f"{NCCL_TROUBLESHOOTING}#infiniband",
        "NCCL INFO NET/IB : No device found.", fabrics=IB_VERBS_FABRICS),
    Signature(
        "dmabuf-registration-refused", "DMA-BUF registration refused by the NIC driver",
        r"ibv_reg_dmabuf_mr(?:(?!ibv_reg_dmabuf_mr).)*(?:failed|not supported)",
        "network",
        "the NIC driver refused to register GPU memory through DMA-BUF (`ibv_reg_dmabuf_mr` failed, e.g. 'Operation "
        "not supported'): the RDMA driver or kernel is too old for DMA-BUF, or the GPU driver is not the open kernel "
        "module, so GPUDirect RDMA through DMA-BUF is not available",
        "update the NIC driver (MLNX_OFED / DOCA-OFED) and the kernel to releases with DMA-BUF support and use NVIDIA's "
        "open GPU kernel modules, or load nvidia-peermem on every node so NCCL registers GPU memory through it; a "
        "current NCCL falls back to nvidia-peermem by itself when it is loaded",
        "https://github.com/NVIDIA/nccl/issues/778",
        "misc/ibvwrap.cc:288 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Operation not supported",
        fabrics=IB_VERBS_FABRICS),
    Signature(
        "memlock-too-small", "Locked-memory limit too small for RDMA",
        r"ibv_reg_mr|ibv_create_cq|Cannot allocate memory|RLIMIT_MEMLOCK|ulimit -l",
        "network",
        "registering RDMA memory failed: the locked-memory limit (`ulimit -l`) inside the job is too small or the "
        "container lacks the IPC_LOCK capability",
        "set memlock unlimited (PAM limits and the scheduler/daemon unit) and add `--cap-add IPC_LOCK "
        "--ulimit memlock=-1` to containers; check `ulimit -l` through the launcher itself",
        f"{NCCL_TROUBLESHOOTING}#infiniband",
        "NET/IB : Call to ibv_reg_mr failed with error Cannot allocate memory"),
    Signature(
        "gdr-disabled", "GPUDirect RDMA disabled",
        r"GPU Direct RDMA Disabled",
        "network",
        "GPUDirect RDMA is disabled for the HCAs: inter-node traffic is staged through host memory (the "
        "nvidia-peermem module is not loaded and DMA-BUF is not available)",
        "`modprobe nvidia-peermem` and load it at boot on every node (or use a DMA-BUF capable driver and kernel); "
        "with NCCL_DEBUG=INFO every inter-node channel should end in /GDRDMA",
        "https://docs.nvidia.com/cuda/gpudirect-rdma/",
        "NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'", fabrics=IB_VERBS_FABRICS),
    Signature(
        "ib-transport-errors", "InfiniBand/RoCE transport errors",
        r"ibv_modify_qp failed|transport retry counter exceeded|local_ack_timeout"
        r"|Got completion from peer(?:(?!Got completion from peer).)*(?:error|status=(?:\d|IBV_WC_)|vendor[ _]err)"
        r"|IBV_WC_RETRY_EXC_ERR",
        "network",
        "queue-pair connections time out, retry or complete with an error status (NCCL prints `status=12 ... vendor "
        "err 129`, a transport retry counter exceeded): on RoCE usually a wrong GID index or a fabric that drops "
        "packets (no PFC/ECN); on InfiniBand a port down or flapping, no route between the two LIDs, or a partition "
        "the ports are not full members of (NCCL uses partition-key index 0 unless NCCL_IB_PKEY names another, and two "
        "limited members of a partition cannot talk: the same retry-exceeded status 12)",
        "set NCCL_IB_GID_INDEX to the RoCEv2 GID (`show_gids`), enable PFC/ECN on the RoCE priority, check "
        "`ibstat`/`ibdiagnet` for ports that are down or erroring and `ib_write_bw` between the two nodes; on "
        "InfiniBand read /sys/class/infiniband/<dev>/ports/<port>/pkeys/0: a key without the full-member bit (0x8000, "
        "e.g. 0x7fff) needs NCCL_IB_PKEY set to the index of a full-member key in that table (the index, not the key; "
        "NVIDIA/nccl issue #1323), or the subnet manager's default partition made full",
        f"{NCCL_TROUBLESHOOTING}#infiniband",
        "NET/IB : Got completion from peer 10.0.0.12<52384> with error 12, opcode 0, len 0, vendor err 129",
        fabrics=IB_VERBS_FABRICS),
    Signature(
        "connection-refused", "Nodes cannot reach each other",
        r"Connect to \S+ failed|Connection refused|No route to host|socketStartConnect|Call to connect failed",
        "network",
        "the nodes cannot open TCP connections to each other on NCCL's ports: a firewall or security group blocks "
        "them (on EFA the security group must allow all traffic to and from itself)",
        "allow all traffic between the nodes (EFA: a self-referencing all-traffic ingress and egress rule), and "
        "check NCCL_SOCKET_IFNAME picks an interface the nodes share",
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html",
        "misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.12<43415> failed : No route to host"),
    Signature(
        "peer-exited", "A peer rank died",
        r"remote process exited|ncclRemoteError|Connection (?:reset|closed) by (?:remote )?peer",
        "any",
        "another rank died (its own log names why) or the connection to it dropped",
        "read the other ranks' output first; on several nodes also check the fabric (`ibstat`, `fi_info -p efa`)",
        f"{NCCL_TROUBLESHOOTING}#errors",
        "Test NCCL failure common.cu:1000 'remote process exited or there was a network error'"),
    Signature(
        "collective-hang", "The collective hung",
        r"\bTest timeout\b|Watchdog caught collective operation timeout|timed out|\btimeout\b",
        "any",
        "the collective stopped making progress: on bare metal typically PCIe ACS or IOMMU translation breaking "
        "GPU peer-to-peer, across nodes also a fabric that drops packets",
        "disable PCIe ACS on the GPU/NIC bridges and boot with iommu=pt on bare-metal training nodes; rerun one node "
        "alone to separate the node from the network",
        f"{NCCL_TROUBLESHOOTING}#pci-access-control-services-acs",
        "Test timeout (60s) in all_reduce_perf"),
    Signature(
        "nccl-invalid-usage", "NCCL called wrongly",
        r"invalid usage|ncclInvalidUsage",
        "any",
        "NCCL rejected the call (mismatched ranks, devices or arguments across processes)",
        "check one process per GPU, the same nccl-tests arguments on every rank and the launcher's rank mapping",
        f"{NCCL_TROUBLESHOOTING}#errors",
        "Test NCCL failure common.cu:959 'invalid usage'"),
    Signature(
        "system-error-single-node", "'unhandled system error' on one node",
        r"unhandled system error|ncclSystemError",
        "local",
        "on a single node NCCL's 'unhandled system error' most often means the shared-memory transport could not "
        "allocate /dev/shm: the container's /dev/shm is too small (Docker's default is 64 MB)",
        "start the container with `--shm-size=1g` or `--ipc=host` (Kubernetes: an `emptyDir` with `medium: "
        "Memory` at /dev/shm); rerun with NCCL_DEBUG=WARN to see the failing system call",
        "https://github.com/NVIDIA/nccl/issues/473",
        "node-1: Test NCCL failure common.cu:777 'unhandled system error'", nodes="single"),
    Signature(
        "system-error-multi-node", "'unhandled system error' across nodes",
        r"unhandled system error|ncclSystemError",
        "network",
        "a system call failed while NCCL set up its transports: across nodes usually RDMA devices not visible to "
        "the job or a locked-memory limit too small; /dev/shm too small in containers is the other common cause",
        "check `ulimit -l` is unlimited inside the job, that the RDMA devices are passed in, and the container's "
        "/dev/shm size; rerun with NCCL_DEBUG=WARN to see the failing system call",
        f"{NCCL_TROUBLESHOOTING}#errors",
        "Test NCCL failure common.cu:777 'unhandled system error'", nodes="multi"),
    # ---- derived from the measurements and the NCCL INFO lines ------------------------------
    Signature(
        "socket-on-rdma", "TCP sockets on an RDMA fabric",
        None, "network",
        "NCCL moved inter-node traffic over TCP sockets although the fabric is EFA, InfiniBand or RoCE "
        "('via NET/Socket' channels, 'Using network Socket', or busbw at socket speed)",
        "EFA: make the OFI plugin and libfabric loadable (LD_LIBRARY_PATH inside the job); InfiniBand/RoCE: pass "
        "the RDMA devices, IPC_LOCK and memlock unlimited into the job and check NCCL_IB_HCA (and "
        "NCCL_IB_GID_INDEX on RoCE)",
        f"{NCCL_TROUBLESHOOTING}#networking-issues"),
    Signature(
        "gpus-hidden-per-task", "Each rank sees only its own GPU",
        None, "local",
        "every rank on a node reports its GPU as device 0: the launcher bound one GPU to each task (Slurm "
        "`--gpus-per-task` or `--gpu-bind=per_task:1`, a container per GPU), so the ranks' GPUs are hidden from each "
        "other and NCCL cannot use NVLink or PCIe peer-to-peer between them (it falls back to host memory, or fails with "
        "'invalid device ordinal' when a process drives several GPUs)",
        "give the job's tasks all the node's GPUs (`--gpus-per-node` with `--gpu-bind=none`, or "
        "`--tres-bind=gres/gpu:none`) and let each rank pick its GPU by its local rank, as nccl-tests does",
        "https://github.com/NVIDIA/nccl/issues/1066"),
    Signature(
        "mig-instances", "Ranks on MIG instances",
        None, "local",
        "the ranks ran on MIG instances (the device lines name a MIG profile, or CUDA_VISIBLE_DEVICES lists MIG UUIDs): "
        "CUDA has no peer-to-peer between MIG instances over PCIe or NVLink, so NCCL uses neither NVLink nor NVLink SHARP; "
        "instances of one GPU exchange data inside that GPU's memory, instances of different GPUs through host shared "
        "memory ('via SHM') or the NICs, and busbw then collapses to host-memory speed",
        "judge NVLink and the fabric on whole GPUs (MIG disabled); for MIG development or CI keep every rank on instances "
        "of one GPU and expect the instances' memory share, not the NVLink rate",
        MIG_INSTANCES),
    Signature(
        "ib-pkey-value-not-index", "NCCL_IB_PKEY set to a partition key instead of its index",
        None, "network",
        "NCCL_IB_PKEY is an index into the port's P_Key table (NCCL passes it as the queue pair's pkey_index), but the "
        "job set it to a partition key value (the full-member bit 0x8000 is set): no port has a table that long, so "
        "creating the queue pair fails (`ibv_modify_qp failed with 22`)",
        "list the port's keys (`grep . /sys/class/infiniband/<dev>/ports/<port>/pkeys/*`) and set NCCL_IB_PKEY to the "
        "index of the full-member key you need (e.g. 1 where pkeys/1 holds 0xf0dc), or unset it when index 0 is already "
        "a full-member key",
        NCCL_IB_CONNECT, fabrics=IB_VERBS_FABRICS),
    Signature(
        "nics-unused", "Not every declared NIC carries traffic",
        None, "network",
        "NCCL's channels used fewer NICs than the nodes have (NCCL_IB_HCA or NCCL_NET lists too few devices, "
        "devices missing in the container, or ports down), so inter-node bandwidth is capped at that share",
        "list every NIC in NCCL_IB_HCA (or leave it unset), pass all RDMA devices into the job, and check "
        "`ibstat` on every node",
        f"{NCCL_ENV}#nccl-ib-hca"),
    Signature(
        "p2p-through-host", "GPU peer-to-peer through host memory",
        None, "local",
        "GPUs of one node exchanged data through host shared memory ('via SHM') instead of NVLink/PCIe "
        "peer-to-peer: P2P is disabled (NCCL_P2P_DISABLE, a VM or container without P2P) or blocked by PCIe "
        "ACS/IOMMU",
        "unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL, check `nvidia-smi topo -p2p r`, disable ACS and use iommu=pt on "
        "bare metal",
        f"{NCCL_TROUBLESHOOTING}#pci-access-control-services-acs"),
    Signature(
        "nvlink-below-rate", "Intra-node bandwidth below NVLink/PCIe rate",
        None, "local",
        "GPU peer-to-peer inside the node runs below the NVLink/NVSwitch (or PCIe) rate: Fabric Manager not "
        "healthy, NVLinks down, or PCIe ACS/IOMMU translation on bare metal",
        "check `nvidia-smi nvlink -s`, `nvidia-smi topo -m`, the {unit:fabricmanager} service, and on bare metal "
        "disable ACS and boot with iommu=pt",
        f"{NCCL_TROUBLESHOOTING}#pci-access-control-services-acs"),
    Signature(
        "xgmi-below-rate", "Intra-node bandwidth below the xGMI rate (AMD Instinct)",
        None, "local",
        "GPU peer-to-peer inside an AMD Instinct node runs below the Infinity Fabric (xGMI) mesh rate: xGMI links "
        "down or GPUs talking over PCIe, fewer GPUs in the job than the board has (each GPU then uses only its links to "
        "the others), or PCIe ACS/IOMMU translation on bare metal",
        "check `rocm-smi --showtopo` (every GPU pair should be linked by XGMI), run on all 8 GPUs of the board, and on "
        "bare metal disable ACS and boot with iommu=pt",
        "https://rocm.docs.amd.com/projects/rccl/en/docs-6.3.0/how-to/troubleshooting-rccl.html"),
    Signature(
        "network-below-rate", "Inter-node bandwidth below the NIC rate",
        None, "network",
        "inter-node traffic runs below the NICs' rate: GPUDirect RDMA off on some node, NICs unused or at a lower "
        "link rate, nodes outside one placement group, or a RoCE fabric without PFC/ECN",
        "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET so the judge can read the transport and NICs of "
        "every channel; check `ibstat`/`fi_info -p efa`, nvidia-peermem on every node, the placement group and "
        "PFC/ECN on RoCE",
        f"{NCCL_TROUBLESHOOTING}#networking-issues"),
    Signature(
        "busbw-cliff", "busbw collapses at large messages",
        None, "any",
        "busbw falls at the largest messages and does not recover: congestion or packet drops on the fabric "
        "(PFC/ECN on RoCE), memory pressure, or power/thermal throttling",
        "compare with one node alone; check `nvidia-smi -q -d PERFORMANCE` for throttling and the switch/NIC "
        "drop counters",
        f"{NCCL_TROUBLESHOOTING}#networking-issues"),
    Signature(
        "not-this-hardware", "The output does not come from the declared hardware",
        None, "any",
        "the log names a different GPU than the blueprint or flags declare, or reports more than the declared "
        "hardware can physically move: it was produced elsewhere, or the declaration is wrong",
        "judge it with the right --blueprint, --gpu, --instance-type, --fabric or --nodes",
        "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"),
    Signature(
        "network-unknown", "Multi-node run without a network expectation",
        None, "network",
        "a run across nodes is limited by the network, and no NIC rate is declared, so its bandwidth cannot be "
        "judged (comparing it with NVLink alone would pass a broken network)",
        "pass --blueprint, or --instance-type, or --fabric with --nic-gbps and --nics-per-node",
        "https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/network/README.md"),
    Signature(
        "fio-page-cache", "fio measured the page cache",
        None, "local",
        "the fio job ran without direct=1 (fio's default is buffered I/O) or with buffered=1, so reads and writes "
        "hit the page cache in RAM, not the device or file system",
        "rerun with `--direct=1` (and a file larger than RAM for reads); the clusterforge fio payload does wherever the file system supports O_DIRECT",
        "https://fio.readthedocs.io/en/latest/fio_doc.html#cmdoption-arg-direct", kind="fio"),
    Signature(
        "fio-below-device", "fio below the storage's rate",
        None, "local",
        "the storage delivered less than its drives (or file system) should: a RAID0 missing members, too little "
        "parallelism, a drive at a degraded PCIe link, thermal throttling, or for FSx exhausted burst credits",
        "check `cat /proc/mdstat`, `lspci -vv` LnkSta, `nvme smart-log`, raise numjobs/iodepth; FSx: CloudWatch "
        "burst credits and `lfs setstripe -c -1`",
        "https://docs.aws.amazon.com/fsx/latest/LustreGuide/performance.html", kind="fio"),
)
"""The table, most specific first. Ids are a contract: reports and docs link to them."""

_SPECIAL = set("\\.^$*+?{}[]|()")
_CLASSES = set("dDsSwWbBAZ")


def _alternatives(pattern: str) -> list[str]:
    """``pattern`` split at its top-level ``|`` (not inside groups or classes)."""
    parts, cur, depth, i, in_class = [], [], 0, 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            cur.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def _literal(alt: str) -> str | None:
    """The longest run of literal characters outside groups in one alternative (lower case), ``None``
    when it has none of 3 characters or more: every line the alternative matches contains it."""
    runs: list[str] = []
    cur: list[str] = []
    depth = 0
    i = 0
    in_class = False
    while i < len(alt):
        ch = alt[i]
        if in_class:
            in_class = ch != "]"
            i += 1
            continue
        if ch == "\\" and i + 1 < len(alt):
            nxt = alt[i + 1]
            if depth == 0 and nxt not in _CLASSES and not nxt.isdigit():
                cur.append(nxt)
            else:
                runs.append("".join(cur))
                cur = []
            i += 2
            continue
        if ch in "?*{" and cur:
            cur.pop()  # the previous character is optional or repeated
        if ch in _SPECIAL or depth:
            runs.append("".join(cur))
            cur = []
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch == "[":
                in_class = True
            i += 1
            continue
        cur.append(ch)
        i += 1
    runs.append("".join(cur))
    best = max(runs, key=len).lower()
    return best if len(best) >= 3 else None


def _keys(pattern: str) -> tuple[str, ...] | None:
    """One required literal per alternative of ``pattern``, or ``None`` when an alternative has none."""
    keys = [_literal(a) for a in _alternatives(pattern)]
    return None if any(k is None for k in keys) else tuple(k for k in keys if k)


_BY_ID = {s.id: s for s in SIGNATURES}
_PATTERNED = tuple(s for s in SIGNATURES if s.pattern)
_KEYS = {s.id: _keys(s.pattern or "") for s in _PATTERNED}
_ALWAYS = tuple(s for s in _PATTERNED if _KEYS[s.id] is None)
_ALL_KEYS = tuple(sorted({k for ks in _KEYS.values() if ks for k in ks}))


def by_id(sig_id: str) -> Signature:
    """The signature named ``sig_id``. Raises ``KeyError`` for an unknown id."""
    return _BY_ID[sig_id]


def diagnose(lines: Iterable[str], *, multi: bool | None = None, fabric: str | None = None) -> list[tuple[Signature, str]]:
    """The signatures found in ``lines``, most specific first, each with the first line that matched it.

    Only signatures that :meth:`Signature.applies` to a run on ``multi`` nodes of ``fabric`` are
    returned (a single-node run never gets a network cause). Cost: one search for the patterns'
    required literal words per line (lower-cased), then the patterns themselves only on the lines
    that hold one of their words; linear in the length of the lines. Lines longer than
    :data:`~validate.parsers.bounds.MAX_LINE_CHARS` characters are not searched.
    """
    hits: dict[str, str] = {}
    cand = [s for s in _PATTERNED if s.applies(multi=multi, fabric=fabric)]
    always = [s for s in cand if _KEYS[s.id] is None]
    for line in lines:
        if too_long(line):
            continue
        low = line.lower()
        if any(k in low for k in _ALL_KEYS):
            todo = cand
        elif always:
            todo = always
        else:
            continue
        for s in todo:
            if s.id in hits:
                continue
            keys = _KEYS[s.id]
            if keys is not None and not any(k in low for k in keys):
                continue
            if s.regex.search(line):  # type: ignore[union-attr]
                hits[s.id] = line.strip()
    return [(s, hits[s.id]) for s in cand if s.id in hits]


def troubleshooting_markdown() -> str:
    """The text of ``docs/troubleshooting.md``: one section per signature, in table order."""
    out = [
        "# Troubleshooting validation results",
        "",
        ("<!-- Generated from validate/signatures.py by `python -m validate.troubleshooting > docs/troubleshooting.md`;"
         " do not edit by hand. -->"),
        "",
        "Every non-pass verdict of `clusterforge judge` and `clusterforge validate` names its cause and points",
        "here (`docs/troubleshooting.md#<id>`). Log signatures are searched in every line of a raw output",
        "(NCCL WARN and INFO lines, CUDA and NCCL errors), the most specific first; the entries without a",
        "log signature are diagnoses the judge derives from the measurements. Causes marked *network* are",
        "never given for a single-node run.",
        "",
        "| id | what | scope | recognised by |",
        "|---|---|---|---|",
    ]
    for s in SIGNATURES:
        how = "log line" if s.pattern else "derived from the results"
        out.append(f"| [`{s.id}`](#{s.id}) | {s.title} | {s.scope} | {how} |")
    out.append("")
    for s in SIGNATURES:
        out += [f"## {s.id}", "", f"**{s.title}** ({s.kind}, scope: {s.scope}"
                + (f", {s.nodes}-node runs" if s.nodes != "any" else "")
                + (f", fabrics: {', '.join(s.fabrics)}" if s.fabrics else "") + ")", ""]
        if s.pattern:
            out += [f"Log lines matching (case-insensitive): `{s.pattern}`", ""]
            if s.example:
                out += ["Example:", "", "```text", s.example, "```", ""]
        out += [f"- Cause: {s.cause}.", f"- Fix: {s.fix}.", f"- Source: <{s.source}>", ""]
    return "\n".join(out).rstrip() + "\n"
