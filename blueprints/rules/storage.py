"""Storage rules: FSx for Lustre parameters (capacity steps, throughput, metadata, EFA, versions),
existing Lustre servers (LNet networks, IPoIB), stripe settings and mount options."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

from ..models import AwsTarget, FsxLustre, InfinibandNetwork, LustreStorage, NfsStorage
from .registry import Hit, RuleContext, rule

BOTOCORE_FSX = (
    "https://github.com/boto/botocore/blob/0e6e2404b85dc336dd2889814e089bde7d1a4c55/botocore/data/fsx/2018-03-01/service-2.json"
)
PC_FSX = "https://github.com/aws/aws-parallelcluster/blob/451cc53/cli/src/pcluster/validators/fsx_validators.py"
PULUMI_FSX = "https://www.pulumi.com/registry/packages/aws/api-docs/fsx/lustrefilesystem/"


def _fsx(ctx: RuleContext) -> Iterator[tuple[int, LustreStorage, FsxLustre]]:
    for i, s in enumerate(ctx.bp.storage):
        if isinstance(s, LustreStorage) and s.fsx is not None:
            yield i, s, s.fsx


def _p(i: int, *rest: str) -> tuple[object, ...]:
    return ("storage", i, "fsx", *rest)


@rule(
    id="fsx-only-on-aws",
    severity="error",
    summary="`storage[].fsx` creates an Amazon FSx for Lustre file system, which exists only on AWS targets.",
    fix="on-prem, mount an existing Lustre file system with `server: {mgs_nids: [...], fsname: ...}`",
    source="https://docs.aws.amazon.com/fsx/latest/LustreGuide/what-is.html",
)
def fsx_only_on_aws(ctx: RuleContext) -> Iterator[Hit]:
    if ctx.bp.is_aws:
        return
    for i, s, _ in _fsx(ctx):
        yield Hit(_p(i), f"`storage.{i}.fsx` (file system `{s.name}`) needs an AWS target; `target.provider` is "
                  f"`{ctx.bp.target.provider}`")


@rule(
    id="nfs-on-aws",
    severity="error",
    summary="The AWS targets create and mount FSx for Lustre only: no node mounts an NFS export, so the node's "
            "quick checks at first boot (and the node suite) would find the mount missing.",
    fix="declare the shared file system as `kind: lustre` with `fsx:` (the stack creates and mounts it), or remove "
        "the NFS entry and mount it yourself",
    source="https://docs.aws.amazon.com/fsx/latest/LustreGuide/what-is.html",
)
def nfs_on_aws(ctx: RuleContext) -> Iterator[Hit]:
    if not ctx.bp.is_aws:
        return
    for i, s in enumerate(ctx.bp.storage):
        if isinstance(s, NfsStorage):
            yield Hit(("storage", i, "kind"), f"`storage.{i}` (`{s.name}` at {s.mount}) is an NFS export on an AWS "
                      "target, which mounts none")


def _capacity_steps(fsx: FsxLustre, table: dict[str, Any]) -> tuple[list[int], int] | None:
    """``(first allowed values, increment)`` for the deployment/storage type; ``None`` when unknown."""
    if fsx.storage_type == "HDD":
        if fsx.throughput_per_tib_mbps in (12, 40):
            step = int(table["PERSISTENT_1_HDD"][f"increment_{fsx.throughput_per_tib_mbps}_mbps_per_tib"])
            return [], step
        return None
    key = fsx.deployment_type if fsx.deployment_type.startswith("SCRATCH") else f"{fsx.deployment_type}_SSD"
    entry = table.get(key)
    if not entry:
        return None
    return [int(v) for v in entry["first_values"]], int(entry["increment_after"])


@rule(
    id="fsx-storage-capacity-step",
    severity="error",
    summary="FSx for Lustre capacity comes in steps: SSD 1200, 2400 or multiples of 2400 GiB (SCRATCH_1: of 3600); "
            "PERSISTENT_1 HDD multiples of 6000 (12 MB/s/TiB) or 1800 GiB (40 MB/s/TiB).",
    fix="round `storage_capacity_gib` to an allowed step",
    source=BOTOCORE_FSX,
)
def fsx_storage_capacity_step(ctx: RuleContext) -> Iterator[Hit]:
    table = ctx.catalog.fsx["storage_capacity_gib"]
    for i, s, fsx in _fsx(ctx):
        steps = _capacity_steps(fsx, table)
        if steps is None:
            continue
        first, inc = steps
        cap = fsx.storage_capacity_gib
        if cap in first or cap % inc == 0:
            continue
        candidates = sorted(set(first) | {inc * k for k in range(1, cap // inc + 3)})
        lower = max((c for c in candidates if c < cap), default=None)
        upper = min(c for c in candidates if c > cap)
        around = f"{lower} or {upper}" if lower else f"{upper}"
        kind = f"{fsx.deployment_type} {fsx.storage_type}"
        allowed = (f"{', '.join(map(str, first))} or a multiple of {inc}" if first else f"a multiple of {inc}")
        yield Hit(_p(i, "storage_capacity_gib"),
                  f"`storage.{i}.fsx.storage_capacity_gib` {cap} is not a {kind} size ({allowed} GiB)",
                  f"use {around} GiB")


@rule(
    id="fsx-throughput-required",
    severity="error",
    summary="PERSISTENT_1 and PERSISTENT_2 file systems need `throughput_per_tib_mbps` (per-unit storage throughput).",
    fix="set `throughput_per_tib_mbps` (PERSISTENT_2: 125, 250, 500 or 1000)",
    source=PC_FSX,
)
def fsx_throughput_required(ctx: RuleContext) -> Iterator[Hit]:
    opts = ctx.catalog.fsx["per_unit_storage_throughput_mb_s_per_tib"]
    for i, s, fsx in _fsx(ctx):
        if fsx.deployment_type.startswith("PERSISTENT") and fsx.throughput_per_tib_mbps is None:
            values = opts.get(f"{fsx.deployment_type}_{fsx.storage_type}") or []
            yield Hit(_p(i, "deployment_type"), f"`storage.{i}.fsx` is {fsx.deployment_type} without "
                      f"`throughput_per_tib_mbps`", f"add `throughput_per_tib_mbps:` ({', '.join(map(str, values))})")


@rule(
    id="fsx-throughput-scratch",
    severity="error",
    summary="SCRATCH file systems have a fixed throughput: `throughput_per_tib_mbps` is not accepted.",
    fix="remove `throughput_per_tib_mbps`, or use PERSISTENT_2 to choose the throughput",
    source=PC_FSX,
)
def fsx_throughput_scratch(ctx: RuleContext) -> Iterator[Hit]:
    for i, s, fsx in _fsx(ctx):
        if fsx.deployment_type.startswith("SCRATCH") and fsx.throughput_per_tib_mbps is not None:
            yield Hit(_p(i, "throughput_per_tib_mbps"),
                      f"`storage.{i}.fsx.throughput_per_tib_mbps` is set on a {fsx.deployment_type} file system")


@rule(
    id="fsx-throughput-value",
    severity="error",
    summary="Per-unit throughput options: PERSISTENT_1 SSD 50/100/200, PERSISTENT_1 HDD 12/40, PERSISTENT_2 SSD "
            "125/250/500/1000 MB/s/TiB.",
    fix="use one of the offered values",
    source=BOTOCORE_FSX,
)
def fsx_throughput_value(ctx: RuleContext) -> Iterator[Hit]:
    opts = ctx.catalog.fsx["per_unit_storage_throughput_mb_s_per_tib"]
    for i, s, fsx in _fsx(ctx):
        t = fsx.throughput_per_tib_mbps
        values = opts.get(f"{fsx.deployment_type}_{fsx.storage_type}")
        if t is None or not values or t in values:
            continue
        yield Hit(_p(i, "throughput_per_tib_mbps"),
                  f"`storage.{i}.fsx.throughput_per_tib_mbps` {t} is not offered for {fsx.deployment_type} "
                  f"{fsx.storage_type}", f"use one of {', '.join(map(str, values))}")


@rule(
    id="fsx-hdd-persistent1",
    severity="error",
    summary="HDD storage exists only for PERSISTENT_1 file systems.",
    fix="use `storage_type: SSD`, or `deployment_type: PERSISTENT_1` for HDD",
    source=PC_FSX,
)
def fsx_hdd_persistent1(ctx: RuleContext) -> Iterator[Hit]:
    for i, s, fsx in _fsx(ctx):
        if fsx.storage_type == "HDD" and fsx.deployment_type != "PERSISTENT_1":
            yield Hit(_p(i, "storage_type"), f"`storage.{i}.fsx.storage_type` is HDD but `deployment_type` is "
                      f"{fsx.deployment_type}")


@rule(
    id="fsx-drive-cache",
    severity="error",
    summary="`drive_cache_type` (READ or NONE) is required for HDD and not allowed for SSD file systems.",
    fix="set `drive_cache_type: READ` on HDD file systems; remove it on SSD",
    source=PC_FSX,
)
def fsx_drive_cache(ctx: RuleContext) -> Iterator[Hit]:
    for i, s, fsx in _fsx(ctx):
        if fsx.storage_type == "HDD" and fsx.drive_cache_type is None:
            yield Hit(_p(i, "storage_type"), f"`storage.{i}.fsx` is HDD without `drive_cache_type`",
                      "add `drive_cache_type: READ` (or NONE)")
        elif fsx.storage_type == "SSD" and fsx.drive_cache_type is not None:
            yield Hit(_p(i, "drive_cache_type"), f"`storage.{i}.fsx.drive_cache_type` is set on an SSD file system",
                      "remove `drive_cache_type`")


@rule(
    id="fsx-metadata-persistent2",
    severity="error",
    summary="A metadata configuration exists only on PERSISTENT_2 file systems.",
    fix="remove `metadata`, or use `deployment_type: PERSISTENT_2`",
    source=PULUMI_FSX,
)
def fsx_metadata_persistent2(ctx: RuleContext) -> Iterator[Hit]:
    for i, s, fsx in _fsx(ctx):
        if fsx.metadata is not None and fsx.deployment_type != "PERSISTENT_2":
            yield Hit(_p(i, "metadata"), f"`storage.{i}.fsx.metadata` is set on a {fsx.deployment_type} file system")


def _iops_ok(iops: int) -> bool:
    return iops in (1500, 3000, 6000) or (iops % 12000 == 0 and 12000 <= iops <= 192000)


@rule(
    id="fsx-metadata-iops",
    severity="error",
    summary="Metadata `iops` is set only in USER_PROVISIONED mode and must be 1500, 3000, 6000 or a multiple of 12000 "
            "up to 192000.",
    fix="use `mode: AUTOMATIC` without `iops`, or `mode: USER_PROVISIONED` with a valid `iops`",
    source=BOTOCORE_FSX,
)
def fsx_metadata_iops(ctx: RuleContext) -> Iterator[Hit]:
    for i, s, fsx in _fsx(ctx):
        md = fsx.metadata
        if md is None:
            continue
        if md.mode == "AUTOMATIC" and md.iops is not None:
            yield Hit(_p(i, "metadata", "iops"), f"`storage.{i}.fsx.metadata.iops` is set in AUTOMATIC mode",
                      "remove `iops` or set `mode: USER_PROVISIONED`")
        elif md.mode == "USER_PROVISIONED" and md.iops is None:
            yield Hit(_p(i, "metadata", "mode"), f"`storage.{i}.fsx.metadata` is USER_PROVISIONED without `iops`",
                      "add `iops:` (1500, 3000, 6000 or a multiple of 12000 up to 192000)")
        elif md.mode == "USER_PROVISIONED" and md.iops is not None and not _iops_ok(md.iops):
            yield Hit(_p(i, "metadata", "iops"), f"`storage.{i}.fsx.metadata.iops` {md.iops} is not an offered value",
                      "use 1500, 3000, 6000 or a multiple of 12000 up to 192000")


@rule(
    id="fsx-deployment-feature",
    severity="error",
    summary="FSx for Lustre features differ per deployment type (catalog `aws.fsx.features`): an S3 link (data "
            "repository association) needs Lustre 2.12 or newer and is not offered on SCRATCH_1; the file system "
            "would be created and billed, then the association would fail.",
    fix="use SCRATCH_2 or PERSISTENT_2 (Lustre 2.15) for an S3-linked file system, or remove `s3`",
    source="https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateDataRepositoryAssociation.html",
)
def fsx_deployment_feature(ctx: RuleContext) -> Iterator[Hit]:
    facts = ctx.catalog.aws["fsx"]
    oldest = tuple(int(x) for x in str(facts["features_min_lustre_for_data_repository_association"]).split("."))
    for i, s, fsx in _fsx(ctx):
        if fsx.s3 is None:
            continue
        if not facts["features"][fsx.deployment_type]["data_repository_association"]:
            yield Hit(_p(i, "s3"), f"`storage.{i}.fsx.s3` links S3 to a {fsx.deployment_type} file system, which "
                      "has no data repository associations")
        elif tuple(int(x) for x in fsx.file_system_type_version.split(".")) < oldest:
            yield Hit(_p(i, "s3"), f"`storage.{i}.fsx.s3` needs Lustre {'.'.join(map(str, oldest))} or newer for a "
                      f"data repository association; `file_system_type_version` is {fsx.file_system_type_version}",
                      "set `file_system_type_version: \"2.15\"`")


@rule(
    id="fsx-efa-requirements",
    severity="error",
    summary="`efa_enabled` (EFA + GPUDirect Storage) needs PERSISTENT_2 with a metadata configuration.",
    fix="use `deployment_type: PERSISTENT_2` and add `metadata: {mode: AUTOMATIC}`, or remove `efa_enabled`",
    source="https://pub.dev/documentation/pulumi_aws/latest/fsx/LustreFileSystemArgs/efaEnabled.html",
)
def fsx_efa_requirements(ctx: RuleContext) -> Iterator[Hit]:
    for i, s, fsx in _fsx(ctx):
        if not fsx.efa_enabled:
            continue
        if fsx.deployment_type != "PERSISTENT_2":
            yield Hit(_p(i, "efa_enabled"), f"`storage.{i}.fsx.efa_enabled` needs PERSISTENT_2, not {fsx.deployment_type}")
        elif fsx.metadata is None:
            yield Hit(_p(i, "efa_enabled"), f"`storage.{i}.fsx.efa_enabled` needs `storage.{i}.fsx.metadata`",
                      "add `metadata: {mode: AUTOMATIC}`")


@rule(
    id="fsx-efa-clients",
    severity="warning",
    summary="An EFA-enabled file system only pays off when the clients use EFA (`network.fabric: efa` on EFA-capable "
            "instances); otherwise it is reached over TCP.",
    fix="set `network.fabric: efa`, or remove `efa_enabled`",
    source="https://docs.aws.amazon.com/eks/latest/userguide/fsx-csi-tuning-efa.html",
)
def fsx_efa_clients(ctx: RuleContext) -> Iterator[Hit]:
    for i, s, fsx in _fsx(ctx):
        if fsx.efa_enabled and ctx.bp.network.fabric != "efa":
            yield Hit(_p(i, "efa_enabled"), f"`storage.{i}.fsx.efa_enabled` is true but `network.fabric` is "
                      f"`{ctx.bp.network.fabric}`")


@rule(
    id="fsx-lustre-version",
    severity="error",
    summary="Lustre 2.10 is not available on PERSISTENT_2, and PERSISTENT_2 with a metadata configuration needs 2.15.",
    fix="use `file_system_type_version: \"2.15\"`",
    source=BOTOCORE_FSX,
)
def fsx_lustre_version(ctx: RuleContext) -> Iterator[Hit]:
    for i, s, fsx in _fsx(ctx):
        v = fsx.file_system_type_version
        if fsx.deployment_type == "PERSISTENT_2" and v == "2.10":
            yield Hit(_p(i, "file_system_type_version"), f"`storage.{i}.fsx.file_system_type_version` 2.10 is not "
                      f"offered for PERSISTENT_2")
        elif fsx.deployment_type == "PERSISTENT_2" and fsx.metadata is not None and v != "2.15":
            yield Hit(_p(i, "file_system_type_version"), f"`storage.{i}.fsx.file_system_type_version` {v} does not "
                      f"support a metadata configuration")


@rule(
    id="fsx-kms-persistent",
    severity="error",
    summary="A customer KMS key (`kms_key_id`) can be set only on PERSISTENT file systems (SCRATCH ones use an AWS key).",
    fix="remove `kms_key_id`, or use a PERSISTENT deployment type",
    source=PC_FSX,
)
def fsx_kms_persistent(ctx: RuleContext) -> Iterator[Hit]:
    for i, s, fsx in _fsx(ctx):
        if fsx.kms_key_id and fsx.deployment_type.startswith("SCRATCH"):
            yield Hit(_p(i, "kms_key_id"), f"`storage.{i}.fsx.kms_key_id` is set on a {fsx.deployment_type} file system")


@rule(
    id="fsx-backup-scratch",
    severity="error",
    summary="FSx does not back up SCRATCH file systems: `automatic_backup_retention_days` must be 0.",
    fix="set `automatic_backup_retention_days: 0`, or use PERSISTENT_2 for data that needs backups",
    source="https://repost.aws/knowledge-center/fsx-for-lustre-scratch-file-system",
)
def fsx_backup_scratch(ctx: RuleContext) -> Iterator[Hit]:
    for i, s, fsx in _fsx(ctx):
        if fsx.deployment_type.startswith("SCRATCH") and (fsx.automatic_backup_retention_days or 0) > 0:
            yield Hit(_p(i, "automatic_backup_retention_days"),
                      f"`storage.{i}.fsx.automatic_backup_retention_days` is {fsx.automatic_backup_retention_days} on a "
                      f"{fsx.deployment_type} file system")


@rule(
    id="fsx-availability-zone",
    severity="warning",
    summary="An FSx file system outside the compute AZ adds latency and cross-AZ transfer charges on every I/O.",
    fix="remove `storage[].fsx.availability_zone` (the file system then goes into `target.availability_zone`)",
    source="https://github.com/aws/aws-parallelcluster/pull/4573",
)
def fsx_availability_zone(ctx: RuleContext) -> Iterator[Hit]:
    t = ctx.bp.target
    if not isinstance(t, AwsTarget):
        return
    for i, s, fsx in _fsx(ctx):
        if fsx.availability_zone and fsx.availability_zone != t.availability_zone:
            yield Hit(_p(i, "availability_zone"), f"`storage.{i}.fsx.availability_zone` `{fsx.availability_zone}` is not "
                      f"the compute zone `{t.availability_zone}`")


def _nid_nets(s: LustreStorage) -> set[str]:
    return {nid.split("@", 1)[1].rstrip("0123456789") for nid in (s.server.mgs_nids if s.server else [])}


@rule(
    id="lustre-nid-network",
    severity="error",
    summary="LNet `o2ib` NIDs need an RDMA fabric (InfiniBand or RoCE) on the clients; `efa`/`kfi` NIDs are for "
            "AWS EFA clients only.",
    fix="use the server's `@tcp` NIDs on Ethernet clients, or declare the RDMA fabric the server is reached over",
    source="https://wiki.lustre.org/Mounting_a_Lustre_File_System_on_Client_Nodes",
)
def lustre_nid_network(ctx: RuleContext) -> Iterator[Hit]:
    fabric = ctx.bp.network.fabric
    for i, s in enumerate(ctx.bp.storage):
        if not isinstance(s, LustreStorage) or s.server is None:
            continue
        nets = _nid_nets(s)
        if "o2ib" in nets and fabric not in ("infiniband", "roce"):
            yield Hit(("storage", i, "server", "mgs_nids"), f"`storage.{i}.server.mgs_nids` uses `o2ib` but "
                      f"`network.fabric` is `{fabric}` (no RDMA to reach the server)")
        if nets & {"efa", "kfi"} and fabric != "efa":
            yield Hit(("storage", i, "server", "mgs_nids"), f"`storage.{i}.server.mgs_nids` uses "
                      f"`{'/'.join(sorted(nets & {'efa', 'kfi'}))}` NIDs but `network.fabric` is `{fabric}`")


@rule(
    id="lustre-o2ib-ipoib",
    severity="error",
    summary="LNet over InfiniBand (`o2ib`) addresses nodes by their IPoIB addresses: IPoIB must be on, and MGS NIDs "
            "should be in the IPoIB subnet.",
    fix="set `network.infiniband.ipoib.enabled: true` with a `cidr` that contains the MGS NIDs",
    source="https://wiki.lustre.org/Mounting_a_Lustre_File_System_on_Client_Nodes",
)
def lustre_o2ib_ipoib(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    if not isinstance(net, InfinibandNetwork):
        return
    ipoib = net.infiniband.ipoib
    cidr = None
    if ipoib.cidr:
        try:
            cidr = ipaddress.ip_network(ipoib.cidr, strict=False)
        except ValueError:
            cidr = None
    for i, s in enumerate(ctx.bp.storage):
        if not isinstance(s, LustreStorage) or s.server is None or "o2ib" not in _nid_nets(s):
            continue
        if not ipoib.enabled:
            yield Hit(("network", "infiniband", "ipoib", "enabled"), f"`storage.{i}.server.mgs_nids` uses `o2ib` but "
                      f"`network.infiniband.ipoib.enabled` is false")
            continue
        if cidr is None:
            continue
        for j, nid in enumerate(s.server.mgs_nids):
            addr, _, lnet = nid.partition("@")
            try:
                ip = ipaddress.ip_address(addr)
            except ValueError:
                continue
            if lnet.startswith("o2ib") and ip not in cidr:
                yield Hit(("storage", i, "server", "mgs_nids", j), f"MGS NID `{nid}` is outside the IPoIB subnet "
                          f"`{ipoib.cidr}` (`network.infiniband.ipoib.cidr`); LNet would need a router",
                          "set `network.infiniband.ipoib.cidr` to the IPoIB subnet the MGS NIDs are in")


WHAMCLOUD_CLIENT_BUILDS = "https://downloads.whamcloud.com/public/lustre/"


@rule(
    id="lustre-client-source",
    severity="error",
    summary="On-prem hosts that mount a Lustre `server` need the client packages from a declared source: neither "
            "Debian nor Ubuntu ship a Lustre client, and Whamcloud builds it per distribution and kernel.",
    fix="add `software.lustre_client_repos.<target.os>: {url: ..., key_url: ...}`, a signed apt repository with the "
        "client built for that distribution (Whamcloud's client builds or a site DKMS build)",
    source=WHAMCLOUD_CLIENT_BUILDS,
)
def lustre_client_source(ctx: RuleContext) -> Iterator[Hit]:
    bp = ctx.bp
    if bp.target.provider != "onprem":
        return
    os_name = bp.target.os
    repos = bp.software.lustre_client_repos
    if os_name in repos:
        return
    for i, s in enumerate(bp.storage):
        if not isinstance(s, LustreStorage) or s.server is None:
            continue
        declared = ("software", "lustre_client_repos")
        where = declared if declared in ctx.loaded.positions else ("storage", i, "server")
        others = f" (declared only for {', '.join(f'`{o}`' for o in sorted(repos))})" if repos else ""
        yield Hit(where, f"`storage.{i}` (`{s.name}`, mounted on every host) needs the Lustre client, but "
                  f"`software.lustre_client_repos` has no package source for `target.os` `{os_name}`{others}; "
                  f"the hosts could not install the client and the mount could never work",
                  f"add `software.lustre_client_repos.{os_name}: {{url: ..., key_url: ...}}` (a signed apt "
                  f"repository with the client built for {os_name})")
        return


@rule(
    id="lustre-stripe-path",
    severity="error",
    summary="`stripes[].path` is a directory relative to the Lustre mount point, without `..`.",
    fix="write the path relative to the mount, e.g. `checkpoints`",
    source="https://wiki.lustre.org/Lustre_Striping_Best_Practices",
)
def lustre_stripe_path(ctx: RuleContext) -> Iterator[Hit]:
    for i, s in enumerate(ctx.bp.storage):
        if not isinstance(s, LustreStorage):
            continue
        for j, st in enumerate(s.stripes):
            parts = st.path.split("/")
            if st.path.startswith("/") or ".." in parts or not st.path.strip():
                yield Hit(("storage", i, "stripes", j, "path"), f"`storage.{i}.stripes.{j}.path` `{st.path}` is not a "
                          f"directory below `{s.mount}`", f"use a relative path such as `{parts[-1] or 'checkpoints'}`")


@rule(
    id="shared-mount-netdev",
    severity="warning",
    summary="Network file systems need the `_netdev` mount option, or boot tries to mount them before the network "
            "is up and may hang.",
    fix="add `_netdev` to `mount_options`",
    source="https://www.freedesktop.org/software/systemd/man/latest/systemd.mount.html",
)
def shared_mount_netdev(ctx: RuleContext) -> Iterator[Hit]:
    for i, s in enumerate(ctx.bp.storage):
        if isinstance(s, (LustreStorage, NfsStorage)) and "_netdev" not in s.mount_options:
            yield Hit(("storage", i, "mount_options"), f"`storage.{i}.mount_options` of `{s.name}` lacks `_netdev`")

