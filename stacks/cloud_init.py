"""Cloud-init user data for AWS nodes, rendered from :class:`blueprints.settings.NodeSettings`.

The Ansible roles render the very same settings into group_vars; nothing here re-derives a
setting from the blueprint. A file both paths write is defined once, by its role: the role's
template task gives path, mode and template, rendered here with the same variables
(:func:`blueprints.role_vars.node_role_vars`, :func:`blueprints.role_templates.role_file`) and
written through ``write_files`` (:func:`role_files`). What a node gets at first boot:

* ``/etc/clusterforge/node-settings.json`` — the settings themselves, unset (``None``) values left out, for reading;
* from the ``host_tuning`` role: sysctls, locked-memory limit ``unlimited`` for PAM sessions and
  systemd services, the GRUB drop-in with the kernel command line;
* from the ``rdma`` role: ``/etc/nccl.conf``; then ``/etc/profile.d/clusterforge-nccl.sh``
  (every variable) and, on EFA, the OFI plugin and libfabric directories in
  ``/etc/ld.so.conf.d`` — NCCL silently falls back to TCP sockets when it cannot ``dlopen`` the
  plugin;
* on EFA node groups only: the EFA software when the AMI has none (the installer's record and the
  ``efa`` kernel module tell; what the AMI ships is never replaced), and a check that the OFI
  plugin is in one of the catalog's plugin directories (on EC2 the script is one of the group's programs the step
  runner fetches from SSM, :func:`node_programs`: a p5 group's user data has no room left for it);
* NVMe scratch: the Deep Learning AMI's own instance-store volume bound at the declared mount,
  or the ``nvme_scratch`` role's script ``clusterforge-nvme-scratch``, run at every boot (the
  instance store is blank after a stop/start): it finds the instance-store drives by their NVMe
  model ``Amazon EC2 NVMe Instance Storage`` (``/dev/disk/by-id`` links, else the controller
  model in sysfs — what ``nvme id-ctrl`` reports), never by device name, refuses drives holding a
  signature, builds RAID0 with ``mdadm``, formats, persists and mounts it;
* Lustre: the ``lustre_client`` role's install script with the catalog's FSx source (Amazon's
  FSx client repository on Ubuntu, ``lustre-client`` on Amazon Linux 2023), then the role's mount
  script: an ``/etc/fstab`` mount of
  ``<dns_name>@tcp:/<mount_name>`` with the blueprint's options and the declared
  ``lfs setstripe`` layouts;
* training nodes (EC2, not EKS): the ``nccl_stack`` role's script ``clusterforge-nccl-stack`` — NCCL at the
  stack's pinned build (held), nccl-tests built on the node against it with MPI from NVIDIA's source release
  (SHA-256 checked), the PyTorch venv of the stack (:func:`nccl_stack_file`);
* the sandbox runtime: the NVIDIA runtime as Docker's default, or the ``sandbox`` role's script
  ``clusterforge-sandbox-runtime`` — gVisor (``runsc``; ``nvproxy`` from the role's ``runsc.toml``),
  Kata Containers or libvirt/QEMU, registered with Docker on Ubuntu; passthrough hosts reboot once
  into the IOMMU kernel command line and the script binds their GPUs to ``vfio-pci`` at every boot.

Two platforms: ``ubuntu`` (the AWS Deep Learning Base AMI, EC2 instances: Docker is configured)
and ``al2023`` (EKS managed node groups: containerd is configured through a ``nodeadm``
``NodeConfig`` part, and the cloud-config travels in the MIME multipart document EKS merges).

Sources: instance-store discovery https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ssd-instance-store.html ;
RAID0 https://docs.aws.amazon.com/ebs/latest/userguide/raid-config.html ;
FSx client https://docs.aws.amazon.com/fsx/latest/LustreGuide/install-lustre-client.html ;
EFA installer https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html ;
EKS user data https://docs.aws.amazon.com/eks/latest/userguide/launch-templates.html ;
gVisor install https://gvisor.dev/docs/user_guide/install/ ;
cloud-init https://cloudinit.readthedocs.io/en/latest/reference/modules.html .
"""

from __future__ import annotations

import base64
import gzip
import io
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import LiteralScalarString

from blueprints.catalog import catalog
from blueprints.role_templates import OsFamily, RoleFile, role_file
from blueprints.role_vars import node_role_vars
from blueprints.settings import LustreMount, NodeSettings, ScratchSettings
from blueprints.values import shell_export

from . import node_status
from .node_status import (
    AWS_MODULE,
    NODE_COMMAND,
    NODE_MODULE,
    NODE_SETTINGS,
    READY_AFTER_REBOOT,
    RUNNER,
    STATUS_CONFIG,
    BootStep,
    NodeProgram,
    image_has_aws_cli,
    module_source,
    quick_checks,
    ready_after_reboot,
    shim,
    status_config,
)
from .pkg_shell import PKG_INSTALL as _PKG
from .slurm_boot import AWS_HELPER, SlurmBoot, sizing_boot, slurm_script

__all__ = [
    "COMPRESS_OVER_BYTES",
    "EKS_USER_DATA_BUDGET_BYTES",
    "INSTANCE_STORE_MODEL",
    "SANDBOX_SCRIPT",
    "SHARED_TEMPLATES",
    "USER_DATA_LIMIT_BYTES",
    "LustreEndpoint",
    "Platform",
    "cloud_role_vars",
    "encode_user_data",
    "lustre_source",
    "nccl_stack_file",
    "node_programs",
    "placeholder_endpoints",
    "placeholder_status_path",
    "render_cloud_config",
    "render_user_data",
    "role_files",
    "scratch_script",
    "sizing_endpoints",
    "user_data_payload",
]

Platform = Literal["ubuntu", "al2023"]

INSTANCE_STORE_MODEL = "Amazon EC2 NVMe Instance Storage"
"""NVMe model string of EC2 instance-store drives (``/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_*``)."""

USER_DATA_LIMIT_BYTES = 16 * 1024
"""EC2 user data limit: 16 KB of raw data before base64
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html)."""

EKS_USER_DATA_BUDGET_BYTES = USER_DATA_LIMIT_BYTES - int(catalog().aws["eks_user_data"]["reserve_bytes"])
"""What clusterforge's part of an EKS node group's user data may take: the EC2 limit less the room EKS's own
merged bootstrap part needs (catalog ``eks_user_data``, with its sources)."""

COMPRESS_OVER_BYTES = 512
"""Files larger than this travel compressed when user data must shrink (``write_files`` ``gz+b64``,
https://cloudinit.readthedocs.io/en/latest/reference/modules.html#write-files)."""

REBOOT_REQUIRED = "/run/clusterforge-reboot-required"
"""Flag file the kernel command line script leaves when the host must reboot into it (cloud-init ``power_state``
reboots on it; the node's ``ready`` step then waits for that reboot)."""

MIME_BOUNDARY = "==CLUSTERFORGE=="
NODECONFIG_CONTENT_TYPE = "application/node.eks.aws"


@dataclass(frozen=True)
class LustreEndpoint:
    """How a managed FSx for Lustre file system is reached: ``dns_name`` and ``mount_name``."""

    dns_name: str
    mount_name: str


def placeholder_endpoints(settings: NodeSettings) -> dict[str, LustreEndpoint]:
    """Stand-ins for FSx endpoints that only exist after deploy (used by ``clusterforge render``)."""
    return {
        m.name: LustreEndpoint(f"FSX_{m.name.upper().replace('-', '_')}_DNS_NAME", f"FSX_{m.name.upper().replace('-', '_')}_MOUNT_NAME")
        for m in settings.lustre
        if m.fsx
    }


def placeholder_status_path(settings: NodeSettings) -> str:
    """The status record path of a node of ``settings`` when the stack is not known (``clusterforge render``, whose
    project's stack is named after the blueprint): :func:`stacks.node_status.status_path` of the blueprint name."""
    return node_status.status_path(settings.blueprint)


def sizing_endpoints(settings: NodeSettings, region: str) -> dict[str, LustreEndpoint]:
    """Stand-ins for FSx endpoints with the length of real ones, for sizing user data before
    deploy: ``fs-<17 hex digits>.fsx.<region>.amazonaws.com`` and an 8-character mount name, the
    forms FSx for Lustre assigns (https://docs.aws.amazon.com/fsx/latest/LustreGuide/mounting-ec2-instance.html)."""
    return {m.name: LustreEndpoint(f"fs-{'0' * 17}.fsx.{region}.amazonaws.com", "a" * 8)
            for m in settings.lustre if m.fsx}


def lustre_source(mount: LustreMount, endpoints: Mapping[str, LustreEndpoint]) -> str:
    """Mount source ``NID:/fsname`` for ``mount``: its own source, or ``<dns>@tcp:/<mount_name>`` for FSx.

    Raises ``KeyError`` when an FSx mount has no endpoint in ``endpoints``.
    """
    if mount.source:
        return mount.source
    ep = endpoints[mount.name]
    return f"{ep.dns_name}@tcp:/{ep.mount_name}"


# ---------------------------------------------------------------------------------------------
# scripts
# ---------------------------------------------------------------------------------------------



def scratch_script(scratch: ScratchSettings) -> str:
    """Per-boot bash script for the NVMe scratch; idempotent, safe at every boot.

    When the AMI already combined the instance-store drives into its own volume (the Deep
    Learning AMIs mount it at the catalog's ``dlami.nvme_location``, ``/opt/dlami/nvme``, before
    user data runs) that volume is bind-mounted at the declared mount. Otherwise it runs the
    ``nvme_scratch`` role's own script, ``/usr/local/sbin/clusterforge-nvme-scratch`` (written by
    cloud-init from the role's template, :data:`SHARED_TEMPLATES`), with ``--require``: the same
    drive discovery by model (``INSTANCE_STORE_MODEL``), signature refusal, array assembly or
    creation (no ``--run``), filesystem, mdadm.conf and fstab rules as on bare metal. When there
    is neither a drive nor an array the script fails (exit 1, logged by cloud-init) and leaves the
    mount point absent, so validation jobs on it fail too.
    """
    q = shlex.quote
    ami_volume = str(catalog().aws["dlami"]["nvme_location"])
    tools = "mdadm xfsprogs" if scratch.filesystem == "xfs" else "mdadm e2fsprogs"
    mkfs = "mkfs.xfs" if scratch.filesystem == "xfs" else "mkfs.ext4"
    return f"""#!/bin/bash
# clusterforge: NVMe scratch on {scratch.mount} at every boot: the AMI's instance-store volume, else the nvme_scratch role's script.
set -euo pipefail
MOUNT={q(scratch.mount)}; FSTAB=${{FSTAB:-/etc/fstab}}
SCRIPT=${{SCRIPT:-/usr/local/sbin/clusterforge-nvme-scratch}}  # the role's template, written by cloud-init
AMI_VOLUME=${{AMI_VOLUME:-{ami_volume}}}  # the DLAMI's own instance-store volume
log() {{ echo "clusterforge-scratch: $*" >&2; }}
{_PKG}mountpoint -q "$MOUNT" && exit 0
if [ "$MOUNT" != "$AMI_VOLUME" ] && mountpoint -q "$AMI_VOLUME"; then
  # the AMI combined the instance-store drives before user data ran: use its volume
  mkdir -p "$MOUNT"
  grep -qs " $MOUNT none bind" "$FSTAB" || echo "$AMI_VOLUME $MOUNT none bind,nofail 0 0" >> "$FSTAB"
  mount --bind "$AMI_VOLUME" "$MOUNT" && chmod 1777 "$MOUNT"
  log "$AMI_VOLUME (the AMI's instance-store volume) bound on $MOUNT"; exit 0
fi
{{ command -v mdadm && command -v {mkfs}; }} >/dev/null 2>&1 || pkg_install {tools}
exec "$SCRIPT" --require
"""


TUNING = """systemctl daemon-reload && systemctl enable clusterforge-lustre-tuning.service
/usr/local/sbin/clusterforge-lustre-tuning
"""
"""The first-boot Lustre script's last lines on a node with the role's tuning script (:func:`_lustre_script`): AWS's
client tunings now, and through the role's unit after the mounts at every boot (``lctl set_param`` does not persist).
No comment lines: a p5 group with FSx, NVMe scratch and gVisor is within a few dozen bytes of EC2's 16 KiB."""


def _lustre_script(tuning: bool = False) -> str:
    """First-boot Lustre script: the client, unless the AMI already has the ``lustre`` module, from
    the ``lustre_client`` role's install script (its source chosen by the settings: Amazon's FSx
    client repository and ``lustre-client-modules-<kernel>`` on Ubuntu, ``lustre-client`` with dnf
    on AL2023, catalog ``aws.fsx_client``), then the role's mount script; with ``tuning`` (the node has the role's
    tuning script) then the client tunings, enabled for every boot (``lctl set_param`` does not persist)."""
    return """#!/bin/bash
# clusterforge: Lustre client (the lustre_client role's install script), then the mounts (NodeSettings.lustre).
set -euo pipefail
modinfo lustre >/dev/null 2>&1 || /usr/local/sbin/clusterforge-lustre-client-install
# fstab entries, mounts and stripe layouts: the lustre_client role's script (written by cloud-init)
/usr/local/sbin/clusterforge-lustre-mounts
""" + (TUNING if tuning else "")


EFA_SCRIPT = "/usr/local/sbin/clusterforge-efa.sh"
"""The EFA software script (:func:`_efa_script`), boot step ``efa``."""


def node_programs(settings: NodeSettings) -> tuple[NodeProgram, ...]:
    """The programs of an EC2 node of ``settings``'s group that the stack keeps in SSM parameters instead of the user
    data (:class:`stacks.node_status.NodeProgram`, ``programs/<program>/<group>``): the step runner fetches each,
    checked against the SHA-256 its status settings pin, before the step that runs it. Today the EFA script of an EFA
    group (``efa/<group>``; the largest file of the user data that no role writes); ``()`` for other groups. EKS nodes
    have no runner: their user data carries theirs."""
    if not settings.efa_installer:
        return ()
    return (NodeProgram(f"efa/{settings.group}", EFA_SCRIPT, content=_efa_script(settings, "ubuntu")),)


def _efa_script(settings: NodeSettings, platform: Platform) -> str:
    """EFA software check. What the AMI provides is detected from the EFA installer's own record
    (catalog ``efa_software.installed_packages_file``) and the ``efa`` kernel module: the DLAMIs
    ship the full stack, the EKS AL2023 AMIs a ``--minimal`` one (kernel module and rdma-core;
    libfabric comes with the container image, catalog ``eks_al2023_efa``). Anything installed is
    kept, never replaced by the pinned (possibly older) version; the pinned installer runs only on
    a node without EFA software, in the mode the platform needs. On GPU nodes the OFI plugin must
    then be found in one of the catalog's plugin directories, which go into the linker cache."""
    v = settings.efa_installer
    sw = catalog().aws["efa_software"]
    q = shlex.quote
    minimal = platform == "al2023"
    plugin_dirs = " ".join(q(d) for d in sw["ofi_nccl_plugin_dirs"]) if settings.aws_ofi_nccl and not minimal else ""
    mode = " --minimal" if minimal else ""
    return f"""#!/bin/bash
# clusterforge: EFA software ({'EKS AL2023: kernel module + rdma-core' if minimal else 'full stack'}); install {v} only if none is present.
set -euo pipefail
RECORD=${{RECORD:-{q(sw['installed_packages_file'])}}}; PLUGIN_DIRS=({plugin_dirs}); PLUGIN={q(sw['ofi_nccl_plugin_library'])}
LDCONF=${{LDCONF:-/etc/ld.so.conf.d/clusterforge-ofi-nccl.conf}}
log() {{ echo "clusterforge-efa: $*" >&2; }}
have_efa() {{ [ -s "$RECORD" ] || [ -d /sys/module/efa ] || modinfo efa >/dev/null 2>&1; }}
if have_efa; then
  have=$(sed -n 's/.*EFA installer version: *//p' "$RECORD" 2>/dev/null | head -n1 || true)
  log "EFA software present (installer ${{have:-unknown}}); the pinned {v} is not installed over it"
else
{_efa_verified_download(str(v))}  tar -xzf i.tgz && cd aws-efa-installer && ./efa_installer.sh -y{mode}
fi
if [ ${{#PLUGIN_DIRS[@]}} -gt 0 ]; then
  found=()
  for d in "${{PLUGIN_DIRS[@]}}"; do if [ -e "$d/$PLUGIN" ]; then found+=("$d"); fi; done
  if [ ${{#found[@]}} -eq 0 ]; then log "ERROR: $PLUGIN not found in ${{PLUGIN_DIRS[*]}}: NCCL would fall back to TCP sockets"; exit 1; fi
  printf '%s\\n' "${{found[@]}}" > "$LDCONF"
  log "aws-ofi-nccl plugin in ${{found[*]}}"
fi
command -v ldconfig >/dev/null 2>&1 && ldconfig || true
"""


def _efa_verified_download(v: str) -> str:
    """Shell lines (inside the ``else`` branch of :func:`_efa_script`) that download EFA installer ``v`` into a
    private ``mktemp -d`` directory as ``i.tgz`` and stop the script unless it is the real one: the catalog's
    SHA-256 when it pins one for ``v`` (a digest from a trusted source is sufficient, and keeps the user data
    small), else AWS's detached signature, checked with ``gpgv`` against the key whose fingerprint the catalog
    pins (the key file alone proves nothing: it comes from the same origin as the tarball). Only the branch
    that applies is emitted."""
    from blueprints.vendor import EFA_SHA256_KEY, efa_installer_pins

    pins, q = efa_installer_pins(v), shlex.quote
    head = (f'  U={q(pins.url)}; w=$(umask 077; mktemp -d "${{TMPDIR:-/tmp}}/clusterforge-efa.XXXXXXXXXX")\n'
            '  trap \'rm -rf -- "$w"\' EXIT; cd "$w"; curl -fsSLo i.tgz "$U"\n')
    if pins.sha256:
        return (f"  # runs as root: unpacked only if its SHA-256 is the one catalog {EFA_SHA256_KEY} pins for {v}\n"
                + head
                + f"  echo '{pins.sha256}  i.tgz' | sha256sum -c --quiet - >&2 || {{ log \"ERROR: $U does not match "
                f"its pinned SHA-256 ({EFA_SHA256_KEY}.{v})\"; exit 1; }}\n")
    fpr = "aws.efa_software.installer_key_fingerprint"
    return (f"  # runs as root; no SHA-256 pinned for {v} ({EFA_SHA256_KEY}): AWS's signature by the pinned key ({fpr})\n"
            + head
            + f'  F={q(pins.key_fingerprint)}; curl -fsSLo i.sig "$U.sig"; curl -fsSLo k.asc {q(pins.key_url)}\n'
            '  export GNUPGHOME=$w/g; mkdir -m 0700 "$GNUPGHOME"\n'
            "  k=$(gpg --batch --with-colons --show-keys k.asc 2>/dev/null | awk -F: '$1==\"pub\"{p=1} $1==\"fpr\"&&p{print $10;p=0}' || :)\n"
            f'  [ "$k" = "$F" ] || {{ log "ERROR: {pins.key_url} is not AWS\'s EFA installer key (${{k:-none}}; pinned $F, '
            f'{fpr})"; exit 1; }}\n'
            '  gpg --batch --dearmor <k.asc >k.gpg\n'
            '  gpgv --keyring "$w/k.gpg" --status-fd 1 i.sig i.tgz 2>/dev/null | grep "VALIDSIG .* $F$" >/dev/null || '
            '{ log "ERROR: $U does not carry a valid signature by $F"; exit 1; }\n')


SANDBOX_SCRIPT = "/usr/local/sbin/clusterforge-sandbox-runtime"
"""The ``sandbox`` role's script (template ``sandbox-runtime.sh.j2``, :data:`SHARED_TEMPLATES`)."""


def _sandbox_script(settings: NodeSettings, platform: Platform) -> str | None:
    """First-boot (or, on passthrough hosts, every-boot) script of the sandbox runtime, or ``None``.

    Everything a sandbox needs is the ``sandbox`` role's script :data:`SANDBOX_SCRIPT` (written by
    cloud-init from the role's template): the gVisor binaries of the pinned release with their
    SHA-512 checked, the Kata static release (``.tar.zst`` or ``.tar.xz``, the catalog's file
    name) unpacked into ``/opt/kata`` with its containerd shim links, libvirt/QEMU, and the GPUs
    bound to ``vfio-pci``. On ``ubuntu`` (the Deep Learning AMI, whose engine is Docker) it runs
    with ``--docker``, which registers ``runsc`` / ``kata`` in ``/etc/docker/daemon.json``; on
    ``al2023`` (EKS) containerd gets the runtimes from the ``NodeConfig`` part instead.

    One piece stays cloud-only: the NVIDIA runtime as Docker's default on Ubuntu EC2 nodes whose
    sandbox is plain containers. Bare-metal hosts run containerd, whose ``default_runtime_name``
    the ``container_runtime`` role's ``config.toml`` sets; no role manages Docker, the engine the
    DLAMI ships. EKS: the AL2023 NVIDIA AMI and the GPU Operator set the runtime.
    """
    sb = settings.sandbox
    docker = platform == "ubuntu"
    if sb.runtime == "container" and not sb.gpu_passthrough:
        if settings.container_default_runtime != "nvidia" or not docker:
            return None
        body = ["# NVIDIA runtime as Docker's default (pods/containers without it see no GPU); cloud-only: the",
                "# roles configure containerd, the DLAMI's engine is Docker.",
                "nvidia-ctk runtime configure --runtime=docker --set-as-default && systemctl restart docker"]
        what = "NVIDIA runtime as Docker's default"
    else:
        body = [f"exec {SANDBOX_SCRIPT}{' --docker' if docker else ''}"]
        what = f"sandbox runtime `{sb.runtime}`" + (" and vfio-pci binding (every boot)" if sb.gpu_passthrough else "")
    head = ["#!/bin/bash", f"# clusterforge: {what}; the sandbox role's script (rendered from NodeSettings.sandbox).",
            "set -euo pipefail"]
    return "\n".join(head + body) + "\n"


def _cmdline_script(settings: NodeSettings) -> str:
    args = " ".join(settings.kernel_cmdline)
    if settings.passthrough_host:  # vfio passthrough needs the IOMMU now: reboot once (cloud-init power_state)
        tail = f'for a in $ARGS; do grep -qw -- "$a" /proc/cmdline || touch {REBOOT_REQUIRED}; done\n'
    else:  # EC2 guests expose no IOMMU: the parameters take effect at the next boot, no reboot forced
        tail = ""
    return f"""#!/bin/bash
# clusterforge: kernel command line {args} (NodeSettings.kernel_cmdline).
set -euo pipefail
ARGS={shlex.quote(args)}
# GRUB reads the host_tuning role's drop-in (written by cloud-init); grubby (AL2023) takes the arguments.
if command -v update-grub >/dev/null 2>&1; then update-grub
else grubby --update-kernel=ALL --args="$ARGS"; fi
{tail}"""


# ---------------------------------------------------------------------------------------------
# cloud-config
# ---------------------------------------------------------------------------------------------

def _file(path: str, content: str, mode: str = "0644") -> dict[str, Any]:
    return {"path": path, "permissions": mode, "owner": "root:root", "content": LiteralScalarString(content)}


_OS_FAMILY: dict[str, OsFamily] = {"ubuntu": "Debian", "al2023": "RedHat"}


_ALL: tuple[Platform, ...] = ("ubuntu", "al2023")

SHARED_TEMPLATES: tuple[tuple[str, str, tuple[Platform, ...]], ...] = (
    ("host_tuning", "sysctl.conf.j2", _ALL),
    ("host_tuning", "memlock.conf.j2", _ALL),
    ("host_tuning", "systemd-limits.conf.j2", _ALL),
    ("host_tuning", "grub-cmdline.cfg.j2", ("ubuntu",)),  # AL2023: grubby takes the arguments
    ("rdma", "nccl.conf.j2", _ALL),
    ("lustre_client", "lustre-client-install.sh.j2", _ALL),
    ("lustre_client", "lustre-mounts.sh.j2", _ALL),
    ("lustre_client", "lustre-tuning.conf.j2", _ALL),
    ("lustre_client", "lustre-tuning.sh.j2", _ALL),
    ("lustre_client", "lustre-tuning.service.j2", _ALL),
    ("nvme_scratch", "nvme-scratch.sh.j2", _ALL),
    ("sandbox", "runsc.toml.j2", _ALL),
    ("sandbox", "sandbox-runtime.sh.j2", _ALL),
)
"""The role templates a cloud node gets, as ``(role, template, platforms)``: sysctls and
hugepages, memlock limits for PAM sessions and systemd services, the GRUB kernel command line
(Ubuntu's GRUB reads drop-ins; AL2023 boots through BLS entries that ``grubby`` edits),
``/etc/nccl.conf``, the Lustre client install and mount scripts (repository and packages; fstab
entries, mounts, stripe layouts) and its client tunings where ``NodeSettings.lustre_tuning`` has any (module
options, the ``lctl`` parameters and their boot-time unit), the NVMe
scratch script (drive discovery and signature refusal, RAID0, filesystem, mdadm.conf, fstab; its
task is skipped where no scratch is declared), gVisor's ``runsc.toml`` and the sandbox runtime
script (gVisor / Kata / libvirt install, containerd shim links, ``vfio-pci`` binding; skipped for
plain containers without passthrough)."""


def nccl_stack_file(settings: NodeSettings, platform: Platform) -> RoleFile | None:
    """The ``nccl_stack`` role's install script for a training node (:attr:`NodeSettings.nccl_stack`), rendered from the
    role's template with the role's variables (:func:`blueprints.role_vars.node_role_vars`): pinned NCCL from NVIDIA's
    CUDA repository, nccl-tests built on the node against it with MPI (source archive checked against its SHA-256),
    the PyTorch venv. ``None`` elsewhere, on ``al2023`` (EKS: pods bring their stack in the image), and for Slurm
    nodes, whose bundle carries it (:func:`stacks.slurm_boot.slurm_bundle_files`). The script
    installs from the CUDA repository apt already knows (the Deep Learning AMI's); it fails naming that repository when
    the pinned NCCL build is not there."""
    if settings.nccl_stack is None or platform != "ubuntu" or settings.slurm is not None:
        return None  # a Slurm node gets it in its bundle (stacks.slurm_boot), run before slurmd
    return role_file("nccl_stack", "nccl-stack.sh.j2", node_role_vars(settings, "nccl_stack"), _OS_FAMILY[platform])


def cloud_role_vars(settings: NodeSettings, role: str, lustre: Mapping[str, LustreEndpoint]) -> dict[str, Any]:
    """:func:`blueprints.role_vars.node_role_vars` of a cloud node: the FSx mounts get their
    deploy-time sources from ``lustre`` (:func:`lustre_source`). Raises ``KeyError`` when an FSx
    mount has no endpoint."""
    sources = {m.name: lustre_source(m, lustre) for m in settings.lustre} if role == "lustre_client" else None
    return node_role_vars(settings, role, lustre_sources=sources)


def role_files(settings: NodeSettings, platform: Platform = "ubuntu",
               lustre: Mapping[str, LustreEndpoint] | None = None) -> list[RoleFile]:
    """The files a cloud node with ``settings`` gets from the Ansible roles' own templates.

    Each is what the role's template task writes on bare metal for the same settings: same path,
    mode and bytes, under the same ``when`` (:func:`blueprints.role_templates.role_file`), with
    the variables of :func:`cloud_role_vars` (``lustre``: the FSx endpoints, default
    :func:`placeholder_endpoints`). ``platform`` picks the role's OS-family vars (``ubuntu``:
    Debian, ``al2023``: RedHat, where grubby, not a GRUB drop-in, takes the kernel command line).
    Raises :class:`blueprints.role_templates.RoleTemplateError` when a role no longer has the task,
    ``KeyError`` when an FSx mount has no endpoint.
    """
    fam = _OS_FAMILY[platform]
    endpoints = placeholder_endpoints(settings) if lustre is None else lustre
    out = []
    for role, template, platforms in SHARED_TEMPLATES:
        if platform not in platforms:
            continue
        f = role_file(role, template, cloud_role_vars(settings, role, endpoints), fam)
        if f is not None:
            out.append(f)
    return out


def render_cloud_config(
    settings: NodeSettings,
    lustre: Mapping[str, LustreEndpoint],
    *,
    platform: Platform = "ubuntu",
    compress_files: bool = False,
    slurm: SlurmBoot | None = None,
    status_path: str | None = None,
) -> str:
    """The ``#cloud-config`` document for one node group.

    ``lustre`` maps each FSx-backed storage name to its endpoint (from the deployed file system,
    or :func:`placeholder_endpoints`). ``compress_files``: every file over
    :data:`COMPRESS_OVER_BYTES` travels gzip'd and base64-encoded (``encoding: gz+b64``, which
    cloud-init's ``write_files`` unpacks), for user data that must stay text (EKS).
    ``slurm``: the deploy-time values of a Slurm node (:class:`stacks.slurm_boot.SlurmBoot`; ``None``: stand-ins
    of their real length, :func:`stacks.slurm_boot.sizing_boot`) for a group with ``settings.slurm``: the group then
    also gets ``clusterforge-slurm-aws`` and its Slurm boot script (:func:`stacks.slurm_boot.slurm_script`), run
    last, and cloud-init keeps the hostname that script sets from the node's tag (``preserve_hostname``).
    ``status_path``: the SSM parameter path of the stack's status records (:func:`stacks.node_status.status_path`;
    ``None``: :func:`placeholder_status_path`). Every step (the per-boot scripts, then each ``runcmd`` entry) runs as a
    reported step (:class:`stacks.node_status.BootStep`), and ``runcmd`` ends with ``clusterforge-node ready``, which
    runs the node's quick checks where it has something to check (:func:`stacks.node_status.quick_checks`).
    Returns YAML text starting with ``#cloud-config``.
    Raises ``KeyError`` when an FSx mount has no endpoint.
    """
    files: list[dict[str, Any]] = [
        _file(NODE_SETTINGS, settings.model_dump_json(indent=None, exclude_none=True) + "\n"),
    ]
    files += [_file(f.path, f.content, f.mode) for f in role_files(settings, platform, lustre)]
    # on EC2 every step runs through the node's status record (stacks.node_status): per-boot ones, then runcmd's;
    # EKS nodes have no room for the step runner (EKS reports on its nodes): their steps run as they are
    reported = platform != "al2023"
    per_boot: list[BootStep] = []

    def every_boot(path: str, step: BootStep, script: str) -> None:
        """A per-boot script (cloud-init's final stage, before runcmd, on the first boot too): on EC2 the script in
        place and a per-boot line running it as a reported step."""
        per_boot.append(step)
        if reported:
            files.extend([_file(step.command, script, "0755"), _file(path, f"#!/bin/sh\nexec {step.runcmd()}\n", "0755")])
        else:
            files.append(_file(path, script, "0755"))
    steps = [BootStep("sysctl", "sysctl --system"), BootStep("systemd", "systemctl daemon-reexec")]
    env = settings.nccl_env
    if env:
        exports = "".join(
            shell_export(k, v) if k != "LD_LIBRARY_PATH"
            else shell_export(k, v).rstrip("\n") + "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n"
            for k, v in sorted(env.items())
        )
        files.append(_file("/etc/profile.d/clusterforge-nccl.sh", exports))
        libdirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
        if libdirs:
            files.append(_file("/etc/ld.so.conf.d/clusterforge-nccl.conf", "".join(d + "\n" for d in libdirs)))
    if settings.efa_installer:  # set for EFA fabrics only; on EC2 the runner fetches the script (node_programs)
        if not reported:
            files.append(_file(EFA_SCRIPT, _efa_script(settings, platform), "0755"))
        steps.append(BootStep("efa", EFA_SCRIPT))
    if env.get("LD_LIBRARY_PATH"):
        steps.append(BootStep("ldconfig", "ldconfig"))
    stack = nccl_stack_file(settings, platform)
    if stack is not None:  # after the EFA script: the OFI plugin NCCL needs on EFA is checked first
        files.append(_file(stack.path, stack.content, stack.mode))
        steps.append(BootStep("nccl-stack", stack.path))
    if settings.scratch is not None:
        every_boot("/var/lib/cloud/scripts/per-boot/10-clusterforge-scratch.sh",
                   BootStep("scratch", "/usr/local/sbin/clusterforge-scratch.sh"), scratch_script(settings.scratch))
    if settings.lustre:
        tuning = settings.lustre_tuning is not None and bool(settings.lustre_tuning.params)  # the role writes the script
        files.append(_file("/usr/local/sbin/clusterforge-lustre.sh", _lustre_script(tuning), "0755"))
        steps.append(BootStep("lustre", "/usr/local/sbin/clusterforge-lustre.sh"))
    sandbox = _sandbox_script(settings, platform)
    if sandbox and settings.sandbox.gpu_passthrough:
        # the binding needs the IOMMU, on after the reboot into its command line: every boot
        every_boot("/var/lib/cloud/scripts/per-boot/20-clusterforge-sandbox.sh",
                   BootStep("sandbox", "/usr/local/sbin/clusterforge-sandbox.sh"), sandbox)
    elif sandbox:
        files.append(_file("/usr/local/sbin/clusterforge-sandbox.sh", sandbox, "0755"))
        steps.append(BootStep("sandbox", "/usr/local/sbin/clusterforge-sandbox.sh"))
    doc: dict[str, Any] = {"write_files": files}
    if settings.kernel_cmdline:
        files.append(_file("/usr/local/sbin/clusterforge-cmdline.sh", _cmdline_script(settings), "0755"))
        steps.append(BootStep("kernel-cmdline", "/usr/local/sbin/clusterforge-cmdline.sh"))
        if settings.passthrough_host:
            doc["power_state"] = {"mode": "reboot", "message": "clusterforge: reboot into the IOMMU kernel command line",
                                  "condition": f"test -f {REBOOT_REQUIRED}"}
    if settings.slurm is not None:
        files.append(_file(AWS_HELPER, module_source("clusterforge-slurm-aws.py"), "0755"))
        files.append(_file("/usr/local/sbin/clusterforge-slurm.sh",
                           slurm_script(settings, slurm or sizing_boot(settings)), "0755"))
        steps.append(BootStep("slurm", "/usr/local/sbin/clusterforge-slurm.sh"))
        doc["preserve_hostname"] = True  # the Slurm NodeName set from the instance tag survives reboots
    if not reported:
        doc["runcmd"] = [st.command for st in steps]
    else:
        checks = quick_checks(settings)
        names = [st.name for st in per_boot + steps] + (["checks"] if checks else []) + ["ready"]
        path = status_path or placeholder_status_path(settings)
        cli = image_has_aws_cli(settings)  # then the runner comes from SSM and puts the records with the CLI
        files += [_file(NODE_COMMAND, shim(RUNNER.parameters(path) if cli else None), "0755"),
                  _file(STATUS_CONFIG, status_config(path, settings.group, names, checks, node_programs(settings)))]
        if not cli:
            files.append(_file(NODE_MODULE, module_source("clusterforge_node.py"), "0755"))
        if settings.kernel_cmdline and settings.passthrough_host:  # `ready` waits for power_state's reboot
            files.append(_file(READY_AFTER_REBOOT, ready_after_reboot(), "0755"))
        if settings.slurm is not None or not cli:  # the Slurm helper's SigV4 client, and the runner's without CLI
            # (its PutParameter for the records, its GetParameter for the quick checks' program)
            files.append(_file(AWS_MODULE, module_source("clusterforge_aws.py"), "0644"))
        doc["runcmd"] = [st.runcmd() for st in steps] + [f"{NODE_COMMAND} ready"]
    if compress_files:
        for f in files:
            raw = str(f["content"]).encode("utf-8")
            if len(raw) > COMPRESS_OVER_BYTES:
                f["encoding"] = "gz+b64"
                # one base64 line: a line-wrapped literal would spend its indentation on every 76 characters
                f["content"] = base64.b64encode(gzip.compress(raw, 9, mtime=0)).decode("ascii")
    yaml = YAML()
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    buf = io.StringIO()
    yaml.dump(doc, buf)
    header = (f"#cloud-config\n# clusterforge: blueprint {settings.blueprint}, node group {settings.group} "
              f"(role {settings.role}); rendered from blueprints.settings.node_settings\n")
    return header + buf.getvalue()


def _nodeconfig(settings: NodeSettings) -> str | None:
    """nodeadm NodeConfig merging containerd runtimes for the group's sandbox (EKS AL2023)."""
    handler = settings.sandbox.runtime_handler
    if settings.sandbox.runtime == "gvisor":
        toml = (f'[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.{handler}]\n'
                'runtime_type = "io.containerd.runsc.v1"\n'
                f'[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.{handler}.options]\n'
                'TypeUrl = "io.containerd.runsc.v1.options"\nConfigPath = "/etc/containerd/runsc.toml"\n')
    elif settings.sandbox.runtime == "kata":
        toml = (f'[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."{handler}"]\n'
                'runtime_type = "io.containerd.kata.v2"\n')
    else:
        return None
    indented = "".join("      " + line + "\n" for line in toml.splitlines())
    return ("---\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  containerd:\n    config: |\n"
            + indented)


def render_user_data(
    settings: NodeSettings,
    lustre: Mapping[str, LustreEndpoint],
    *,
    eks: bool = False,
    slurm: SlurmBoot | None = None,
    status_path: str | None = None,
) -> str:
    """User data text for a launch template (not yet base64).

    EC2 instances (``eks=False``): the ``#cloud-config`` document for the Ubuntu DLAMI.
    EKS managed node groups (``eks=True``): a MIME multipart document (EKS merges it with its
    own bootstrap) holding an optional ``NodeConfig`` and the AL2023 cloud-config; EKS merges it
    as text, so when it would exceed :data:`EKS_USER_DATA_BUDGET_BYTES` the cloud-config's larger
    files travel ``gz+b64``-encoded instead, and when that is still too large the whole
    cloud-config part travels gzip'd (``application/x-gzip``, base64; an EC2 cloud-config is
    compressed as a whole by :func:`encode_user_data`). ``slurm``, ``status_path``: see :func:`render_cloud_config`.
    """
    if not eks:
        return render_cloud_config(settings, lustre, platform="ubuntu", slurm=slurm, status_path=status_path)
    cc = render_cloud_config(settings, lustre, platform="al2023", status_path=status_path)
    text = _mime(settings, cc)
    if len(text.encode("utf-8")) <= EKS_USER_DATA_BUDGET_BYTES:
        return text
    tried = [text]
    for text in (_mime(settings, render_cloud_config(settings, lustre, platform="al2023", compress_files=True,
                                                     status_path=status_path)),
                 _mime(settings, cc, gzip_cloud_config=True)):
        if len(text.encode("utf-8")) <= EKS_USER_DATA_BUDGET_BYTES:
            return text
        tried.append(text)
    return min(tried, key=lambda t: len(t.encode("utf-8")))  # too large either way: the preflight says so


def _mime(settings: NodeSettings, cc: str, *, gzip_cloud_config: bool = False) -> str:
    """The MIME multipart document: the ``NodeConfig`` part (if any), then the cloud-config.

    ``gzip_cloud_config``: the cloud-config part travels gzip'd and base64-encoded as
    ``application/x-gzip``; cloud-init decompresses parts of that type and detects the content
    (``#cloud-config``) itself (``DECOMP_TYPES`` in
    https://github.com/canonical/cloud-init/blob/main/cloudinit/user_data.py); nodeadm reads
    only the ``application/node.eks.aws`` parts.
    """
    parts: list[tuple[str, str]] = []
    nc = _nodeconfig(settings)
    if nc:
        parts.append((NODECONFIG_CONTENT_TYPE, nc))
    if gzip_cloud_config:
        b64 = base64.b64encode(gzip.compress(cc.encode("utf-8"), 9, mtime=0)).decode("ascii")
        lines = "\n".join(b64[i:i + 76] for i in range(0, len(b64), 76)) + "\n"
        parts.append(("application/x-gzip\nContent-Transfer-Encoding: base64", lines))
    else:
        parts.append(('text/cloud-config; charset="us-ascii"', cc))
    out = [f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"\n']
    for ctype, body in parts:
        out.append(f"\n--{MIME_BOUNDARY}\nContent-Type: {ctype}\n\n{body}")
    out.append(f"\n--{MIME_BOUNDARY}--\n")
    return "".join(out)


def user_data_payload(text: str) -> bytes:
    """The bytes EC2 receives as user data for ``text`` (before base64).

    A ``#cloud-config`` document (EC2 instances) larger than :data:`USER_DATA_LIMIT_BYTES` is
    gzip-compressed (fixed timestamp, so the plan stays stable); cloud-init detects and unpacks
    gzip'd user data (https://cloudinit.readthedocs.io/en/latest/explanation/format.html). EKS MIME
    documents are never compressed: the EKS node group merges them with its own bootstrap part as
    text. The result may still exceed the limit: :func:`encode_user_data` refuses it."""
    raw = text.encode("utf-8")
    if len(raw) > USER_DATA_LIMIT_BYTES and text.startswith("#cloud-config"):
        raw = gzip.compress(raw, compresslevel=9, mtime=0)
    return raw


def encode_user_data(text: str) -> str:
    """Base64 of :func:`user_data_payload` of ``text``, as launch templates want it.

    Raises ``ValueError`` when the data (compressed where allowed) still exceeds
    :data:`USER_DATA_LIMIT_BYTES`; ``clusterforge plan``, ``render`` and ``up`` report that
    earlier, with the node group's position (``AwsTarget.preflight``).
    """
    raw = user_data_payload(text)
    if len(raw) > USER_DATA_LIMIT_BYTES:
        raise ValueError(f"user data is {len(raw)} bytes; EC2 allows {USER_DATA_LIMIT_BYTES} — "
                         "drop stripe settings or sandbox features from this node group")
    return base64.b64encode(raw).decode("ascii")
