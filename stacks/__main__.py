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

from blueprints.aws import capacity_for, reserved_groups
from blueprints.models import AwsTarget, EfaNetwork, KubernetesOrchestrator, LustreStorage, NodeGroup
from blueprints.naming import Naming
from stacks.cloud_init import runtime_handler
from stacks.components import (
    AddonsArgs,
    EksAttachment,
    EksCluster,
    EksClusterArgs,
    FsxVolume,
    KubernetesAddons,
    LustreFileSystem,
    LustreFileSystemArgs,
    Network,
    NetworkArgs,
    NodeGroupArgs,
    NodeGroupComponent,
    NodeIam,
    NodeIamArgs,
    Placement,
    PlacementArgs,
    SandboxClass,
    decide_placement,
)
from stacks.config import load_stack_blueprint, read_stack_config
from stacks.outputs import ansible_inventory

loaded = load_stack_blueprint(read_stack_config())
bp = loaded.blueprint
target = bp.target
assert isinstance(target, AwsTarget)
naming = Naming(bp.name, target.tags)
orchestrator = bp.orchestrator if isinstance(bp.orchestrator, KubernetesOrchestrator) else None
fsx_storage = [s for s in bp.storage if isinstance(s, LustreStorage) and s.fsx is not None]
efa = bp.network if isinstance(bp.network, EfaNetwork) else None
resolved = loaded.cluster  # the resolved cluster: every group's hardware, node settings and predicates
settings = resolved.node_settings


aws_provider = aws.Provider(naming.name("aws"), region=target.region)
aws_opts = pulumi.ResourceOptions(providers=[aws_provider])

network = Network(naming.name("network"), NetworkArgs(
    naming=naming, availability_zone=target.availability_zone, cidr_block=target.vpc.cidr_block,
    subnet_cidr_block=target.vpc.subnet_cidr_block, public_subnet_cidr_block=target.vpc.public_subnet_cidr_block,
    control_plane_subnet_cidr_block=target.vpc.control_plane_subnet_cidr_block, vpc_id=target.vpc.vpc_id,
    subnet_id=target.vpc.subnet_id, control_plane_subnet_ids=tuple(target.vpc.control_plane_subnet_ids),
    nat_gateway=target.vpc.nat_gateway, public_subnet_for_nodes=any(g.public_ip for g in bp.node_groups),
    ssh_ingress_cidrs=tuple(target.ssh_ingress_cidrs), lustre=bool(fsx_storage),
    eks=orchestrator is not None,
), aws_opts)
decision = decide_placement(bp)
placement = Placement(naming.name("placement"), PlacementArgs(naming=naming, decision=decision), aws_opts)
reserved = {g.name for g in reserved_groups(bp)}


def in_placement_group(g: NodeGroup) -> bool:
    """Compute groups share the placement group; a reservation's own group holds only the groups
    that launch into the reservation."""
    return resolved.group(g).compute and (decision.use_existing is None or g.name in reserved)

iam = NodeIam(naming.name("node-iam"), NodeIamArgs(naming=naming, eks=orchestrator is not None), aws_opts)

filesystems = {
    s.name: LustreFileSystem(naming.name("fsx", s.name), LustreFileSystemArgs(
        naming=naming, storage_name=s.name, fsx=s.fsx, subnet_id=network.subnet_id,
        security_group_id=network.fsx_security_group_id, depends_on=network.lustre_rules), aws_opts)
    for s in fsx_storage if s.fsx is not None and network.fsx_security_group_id is not None
}

cluster = None
security_groups = [network.node_security_group_id]
if orchestrator is not None:
    cluster = EksCluster(naming.name("eks"), EksClusterArgs(
        naming=naming, version=orchestrator.version, subnet_ids=network.control_plane_subnet_ids,
        region=target.region, public_access_cidrs=tuple(target.ssh_ingress_cidrs)), aws_opts)
    security_groups.append(cluster.cluster_security_group_id)

groups = {}
for r in resolved.groups:
    g = r.group
    # instance: the catalog entry (None: unknown to the catalog, so no EFA)
    groups[g.name] = NodeGroupComponent(naming.name(g.name), NodeGroupArgs(
        naming=naming, group=g, settings=r.settings, instance=r.hardware.instance,
        efa_interfaces=efa.efa.interfaces if efa else 0, capacity=capacity_for(bp, g),
        availability_zone=target.availability_zone,
        subnet_id=network.public_subnet_id if g.public_ip and network.public_subnet_id is not None else network.subnet_id,
        security_group_ids=security_groups, placement_group=placement.group_name if in_placement_group(g) else None,
        instance_profile_name=iam.instance_profile_name, node_role_arn=iam.role_arn, ami_id=target.ami_id,
        root_volume_gib=target.root_volume_gib, key_name=target.key_name,
        lustre={k: (fs.dns_name, fs.mount_name) for k, fs in filesystems.items()},
        eks=EksAttachment(cluster_name=cluster.cluster_name, version=orchestrator.version)
        if cluster is not None and orchestrator is not None else None,
    ), aws_opts)

if cluster is not None and orchestrator is not None:
    k8s_provider = k8s.Provider(naming.name("k8s"), kubeconfig=cluster.kubeconfig, enable_server_side_apply=True,
                                opts=pulumi.ResourceOptions(depends_on=[cluster]))
    sandboxes = {
        (s.runtime_class or "", s.runtime): s for s in (ns.sandbox for ns in settings.values())
        if s.runtime in ("kata", "gvisor") and s.runtime_class
    }
    KubernetesAddons(naming.name("addons"), AddonsArgs(
        naming=naming, namespace=orchestrator.namespace, gpu_operator_version=orchestrator.gpu_operator_version,
        efa_device_plugin_version=orchestrator.efa_device_plugin_version,
        mpi_operator_version=orchestrator.mpi_operator_version,
        gpu=any(s.gpu_count for s in settings.values()),
        efa_instance_types=[g.instance_type for g in bp.node_groups
                            if g.instance_type and len(groups[g.name].nic_layout) > 1],
        sandbox_workloads=any(s.passthrough_host for s in settings.values()),
        # the handler is the containerd runtime the nodes' user data registers (kata / gvisor: never None)
        sandboxes=[SandboxClass(name=name, handler=runtime_handler(sandboxes[name, rt]) or name, runtime=rt)
                   for (name, rt) in sorted(sandboxes)],
        fsx=[FsxVolume(name=k, capacity_gib=s.fsx.storage_capacity_gib, file_system_id=filesystems[k].file_system_id,
                       dns_name=filesystems[k].dns_name, mount_name=filesystems[k].mount_name)
             for k, s in ((s.name, s) for s in fsx_storage) if s.fsx is not None and k in filesystems],
        depends_on=list(groups.values()),
    ), pulumi.ResourceOptions(providers=[k8s_provider]))
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("eksClusterName", cluster.cluster_name)

ec2_groups = {k: v for k, v in groups.items() if v.instance_names}
pulumi.export("vpcId", network.vpc_id)
pulumi.export("subnetId", network.subnet_id)
pulumi.export("placementGroup", placement.group_name)
pulumi.export("nodePrivateIps", {k: v.private_ips for k, v in groups.items()})
pulumi.export("fsx", {k: {"fileSystemId": fs.file_system_id, "dnsName": fs.dns_name, "mountName": fs.mount_name}
                      for k, fs in filesystems.items()})
pulumi.export("ansibleInventory", pulumi.Output.all(*[v.private_ips for v in ec2_groups.values()]).apply(
    lambda ips: ansible_inventory(bp.name, {
        k: (bp.group(k).role, v.instance_names, list(ips[i])) for i, (k, v) in enumerate(ec2_groups.items())})))
