"""The clusterforge Pulumi program: read config, load + check the blueprint, compose, export.

Run by ``pulumi up`` (``Pulumi.yaml``: ``main: stacks/``), by ``clusterforge up`` through the
Automation API, and in-process against a mock engine by ``clusterforge plan``.
"""

import sys
from pathlib import Path

if str(Path(__file__).resolve().parent.parent) not in sys.path:  # Pulumi runs this file as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from stacks import translate
from stacks.cloud_init import node_programs
from stacks.components import (
    EksAttachment,
    EksCluster,
    EksClusterArgs,
    FsxVolume,
    KubernetesAddons,
    LustreFileSystem,
    Network,
    NodeGroupComponent,
    NodeIam,
    NodeIamArgs,
    Placement,
    PlacementArgs,
    SlurmCluster,
)
from stacks.components.status import NodeStatus, NodeStatusArgs
from stacks.config import load_stack_blueprint, read_stack_config
from stacks.inventory import InventoryError, NotAwsBlueprint, inventory
from stacks.node_status import status_path
from stacks.outputs import ansible_inventory

stack_config = read_stack_config()
loaded = load_stack_blueprint(stack_config)
bp = loaded.blueprint
resolved = loaded.cluster  # the resolved cluster: every group's hardware, node settings and predicates
try:
    # what the stack creates, decided once (the inventory `clusterforge cost` prices)
    inv = inventory(bp, resolved)
except NotAwsBlueprint as e:  # `pulumi up` of a stack whose setting names an on-prem blueprint
    raise pulumi.RunError(f"{loaded.file}: {e}") from None
except InventoryError as e:  # a node group the stack cannot create (the message names the setting)
    raise pulumi.RunError(str(e)) from None
target = translate.aws_target(bp)
naming = inv.naming
orchestrator = translate.kubernetes(bp)


aws_provider = aws.Provider(naming.name("aws"), region=target.region)
aws_opts = pulumi.ResourceOptions(providers=[aws_provider])

network = Network(naming.name("network"), inv.network, aws_opts)
decision = inv.placement
placement = Placement(naming.name("placement"), PlacementArgs(naming=naming, decision=decision), aws_opts)
reserved = translate.reserved_group_names(bp)


def in_placement_group(name: str) -> bool:
    """Compute groups share the placement group; a reservation's own group holds only the groups
    that launch into the reservation."""
    return resolved.group(name).compute and (decision.use_existing is None or name in reserved)

slurm_settings = translate.slurm(bp)
slurm = SlurmCluster(naming.name("slurm"), translate.slurm_cluster_args(bp, resolved, naming, vpc_id=network.vpc_id),
                     aws_opts) if slurm_settings is not None else None
# EC2 nodes report each boot step to their status record under this path; `clusterforge up` waits on them
# (EKS managed node groups: EKS's own status, no record)
status_records = status_path(pulumi.get_stack())
node_status = NodeStatus(naming.name("node-status"), NodeStatusArgs(
    naming=naming, path=status_records, region=target.region,
    programs=tuple(p for r in resolved.groups for p in node_programs(r.settings))), aws_opts) \
    if orchestrator is None else None
status_policies = (node_status.policy_arn,) if node_status is not None else ()
iam = NodeIam(naming.name("node-iam"), NodeIamArgs(
    naming=naming, eks=orchestrator is not None,
    policy_arns=((slurm.node_policy_arn,) if slurm else ()) + status_policies), aws_opts)
# the Slurm controller has its own role: the only one that may store the munge key
controller_iam = NodeIam(naming.name("controller-iam"), NodeIamArgs(
    naming=naming, policy_arns=(slurm.controller_policy_arn, *status_policies), purpose="Slurm controller",
    role_tag="controller-role"), aws_opts) if slurm is not None else None


def profile_of(name: str):
    """The instance profile of node group ``name``: the controller's for the Slurm controller group."""
    if controller_iam is not None and slurm_settings is not None and name == slurm_settings.controller_group:
        return controller_iam.instance_profile_name
    return iam.instance_profile_name


filesystems = {
    fs.storage_name: LustreFileSystem(fs.component, translate.lustre_args(
        fs, naming, subnet_id=network.subnet_id, security_group_id=network.fsx_security_group_id,
        depends_on=network.lustre_rules), aws_opts)
    for fs in inv.file_systems if network.fsx_security_group_id is not None
}

cluster = None
security_groups = [network.node_security_group_id]
if orchestrator is not None:
    cluster = EksCluster(naming.name("eks"), EksClusterArgs(
        naming=naming, version=orchestrator.version, subnet_ids=network.control_plane_subnet_ids,
        region=target.region, public_access_cidrs=tuple(orchestrator.api_access_cidrs)), aws_opts)
    security_groups.append(cluster.cluster_security_group_id)

groups = {}
for r in resolved.groups:
    spec = inv.node_group(r.name)
    groups[r.name] = NodeGroupComponent(spec.component, translate.node_group_args(
        bp, r, spec, naming,
        subnet_id=network.public_subnet_id if r.group.public_ip and network.public_subnet_id is not None
        else network.subnet_id,
        security_group_ids=security_groups, placement_group=placement.group_name if in_placement_group(r.name) else None,
        instance_profile_name=profile_of(r.name), node_role_arn=iam.role_arn,
        lustre={k: (fs.dns_name, fs.mount_name) for k, fs in filesystems.items()},
        eks=EksAttachment(cluster_name=cluster.cluster_name, version=orchestrator.version)
        if cluster is not None and orchestrator is not None else None,
        slurm=translate.slurm_group_args(
            bp, r, zone_id=slurm.zone_id, munge_secret_arn=slurm.munge_secret_arn, bundle_urls=slurm.bundle_urls,
            bundles=slurm.bundle_objects, state_volume_id=slurm.state_volume_id) if slurm is not None else None,
        recorded_image=stack_config.images.get(r.name),
        status_path=status_records if node_status is not None else None,
    ), aws_opts)

if cluster is not None and orchestrator is not None:
    k8s_provider = k8s.Provider(naming.name("k8s"), kubeconfig=cluster.kubeconfig, enable_server_side_apply=True,
                                opts=pulumi.ResourceOptions(depends_on=[cluster]))
    KubernetesAddons(naming.name("addons"), translate.addons_args(
        bp, resolved, naming,
        efa_instance_types=[g.instance_type for g in inv.node_groups if len(g.nic_layout) > 1],
        fsx=[FsxVolume(name=fs.storage_name, capacity_gib=fs.storage_capacity_gib,
                       file_system_id=filesystems[fs.storage_name].file_system_id,
                       dns_name=filesystems[fs.storage_name].dns_name, mount_name=filesystems[fs.storage_name].mount_name)
             for fs in inv.file_systems if fs.storage_name in filesystems],
        depends_on=list(groups.values()),
    ), pulumi.ResourceOptions(providers=[k8s_provider]))
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("eksClusterName", cluster.cluster_name)

ec2_groups = {k: v for k, v in groups.items() if v.instance_names}
pulumi.export("vpcId", network.vpc_id)
pulumi.export("subnetId", network.subnet_id)
pulumi.export("placementGroup", placement.group_name)
pulumi.export("nodePrivateIps", {k: v.private_ips for k, v in groups.items()})
# the image each EC2 group runs: `clusterforge up` records it and gives it back (stack setting `images`)
pulumi.export("nodeImages", {k: v.image_id for k, v in ec2_groups.items() if v.image_id is not None})
pulumi.export("fsx", {k: {"fileSystemId": fs.file_system_id, "dnsName": fs.dns_name, "mountName": fs.mount_name}
                      for k, fs in filesystems.items()})


def readiness(group: NodeGroupComponent) -> dict[str, object]:
    """What `clusterforge up` waits for in one node group (clusterforge.readiness): its EC2 nodes' status records by
    instance name and id, or an EKS node group's own status."""
    if group.eks_node_group_name is not None:
        return {"eksCluster": cluster.cluster_name if cluster is not None else "",
                "eksNodeGroup": group.eks_node_group_name}
    names = list(group.instance_names)
    return {"nodes": group.instance_ids.apply(lambda ids: dict(zip(names, ids, strict=True)))}


pulumi.export("nodeReadiness", {"path": status_records,
                                "groups": {k: readiness(v) for k, v in groups.items()}})
pulumi.export("ansibleInventory", pulumi.Output.all(*[v.private_ips for v in ec2_groups.values()]).apply(
    lambda ips: ansible_inventory(bp.name, {
        k: (bp.group(k).role, v.instance_names, list(ips[i])) for i, (k, v) in enumerate(ec2_groups.items())})))
