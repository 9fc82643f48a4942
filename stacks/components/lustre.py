"""``clusterforge:aws:LustreFileSystem``: FSx for Lustre with every validated argument.

Arguments are plain values that map one to one onto the pulumi_aws 7.x argument names
(:func:`stacks.translate.lustre_args` fills them from the blueprint's ``fsx`` settings);
combinations are checked before deploy by the blueprint rules. Notable facts:

* ``subnet_ids`` is ONE subnet id as a string (pulumi_aws 7.51 rejects a list) —
  the nodes' compute subnet, so the file system sits in the nodes' AZ;
* every FSx for Lustre file system is encrypted at rest; PERSISTENT_* file systems use a KMS key
  (``kms_key_id`` or the AWS managed ``aws/fsx`` key)
  (https://docs.aws.amazon.com/fsx/latest/LustreGuide/encryption-at-rest.html);
* ``per_unit_storage_throughput``, ``kms_key_id``, backups and ``metadata_configuration`` are only
  sent for the deployment types that accept them;
* an S3 bucket is linked with a data repository association (auto import / export policies);
* backups (daily automatic ones and the final one taken when ``down`` deletes the file system) where FSx
  takes them: PERSISTENT_* file systems without an S3 link (catalog ``fsx``: ``backups_with_s3_repository``,
  https://docs.aws.amazon.com/fsx/latest/LustreGuide/using-backups-fsx.html). FSx skips the final backup
  unless asked (``SkipFinalBackup`` defaults to true:
  https://docs.aws.amazon.com/fsx/latest/APIReference/API_DeleteFileSystemLustreConfiguration.html), so
  ``skip_final_backup`` is always sent: ``false`` unless the blueprint opts out (``fsx.final_backup: false``);
* the file system depends on the Lustre security-group rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from blueprints.naming import Naming

from ..inventory import FileSystemSpec, FsxS3Link

__all__ = ["FsxS3Link", "LustreFileSystem", "LustreFileSystemArgs"]

_EVENTS = ["NEW", "CHANGED", "DELETED"]


@dataclass(frozen=True)
class LustreFileSystemArgs:
    """Inputs of :class:`LustreFileSystem`: ``spec``, the file system as the stack's inventory decides it
    (:class:`stacks.inventory.FileSystemSpec`: every FSx argument, and which of them the deployment type takes);
    ``subnet_id``: the compute subnet; ``security_group_id``: the FSx SG; ``depends_on``: the SG rules."""

    naming: Naming
    spec: FileSystemSpec
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    depends_on: Sequence[pulumi.Resource] = ()


class LustreFileSystem(pulumi.ComponentResource):
    """One FSx for Lustre file system. Outputs: ``file_system_id``, ``dns_name``, ``mount_name``."""

    file_system_id: pulumi.Output[str]
    dns_name: pulumi.Output[str]
    mount_name: pulumi.Output[str]

    def __init__(self, name: str, args: LustreFileSystemArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("clusterforge:aws:LustreFileSystem", name, None, opts)
        f = args.spec
        n = args.naming
        backups = f.backups
        metadata = None
        if f.metadata is not None:
            mode, iops = f.metadata
            metadata = aws.fsx.LustreFileSystemMetadataConfigurationArgs(mode=mode, iops=iops)
        tags = n.tags(role="storage", name=n.name(f.storage_name))
        fs = aws.fsx.LustreFileSystem(
            f"{name}-fs",
            deployment_type=f.deployment_type,
            storage_capacity=f.storage_capacity_gib,
            storage_type=f.storage_type,
            per_unit_storage_throughput=f.per_unit_storage_throughput,
            drive_cache_type=f.drive_cache_type if f.storage_type == "HDD" else None,
            data_compression_type=f.data_compression_type,
            file_system_type_version=f.file_system_type_version,
            metadata_configuration=metadata,
            efa_enabled=True if f.efa_enabled else None,
            kms_key_id=f.kms_key_id if f.persistent else None,
            automatic_backup_retention_days=f.backup_retention_days,
            copy_tags_to_backups=True if backups else None,
            skip_final_backup=not f.final_backup if backups else None,
            final_backup_tags={**tags, "clusterforge:final-backup": n.blueprint} if backups and f.final_backup else None,
            subnet_ids=args.subnet_id,
            security_group_ids=[args.security_group_id],
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        if f.s3 is not None:
            s3 = f.s3
            aws.fsx.DataRepositoryAssociation(
                f"{name}-s3",
                file_system_id=fs.id,
                data_repository_path=s3.data_repository_path,
                file_system_path=s3.file_system_path,
                batch_import_meta_data_on_create=True,
                s3=aws.fsx.DataRepositoryAssociationS3Args(
                    auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(events=_EVENTS)
                    if s3.auto_import else None,
                    auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(events=_EVENTS)
                    if s3.auto_export else None,
                ),
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.file_system_id = fs.id
        self.dns_name = fs.dns_name
        self.mount_name = fs.mount_name
        self.register_outputs({"fileSystemId": fs.id, "dnsName": fs.dns_name, "mountName": fs.mount_name})
