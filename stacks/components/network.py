"""``clusterforge:aws:Network``: VPC, subnets, gateways and the node / FSx security groups.

Security groups follow the rules AWS documents for EFA and FSx for Lustre:

* node SG: all traffic **in from** and **out to** itself (EFA OS-bypass traffic needs both; a
  ``0.0.0.0/0`` egress does not cover it:
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html#efa-start-security);
  SSH (TCP 22) only from ``target.ssh_ingress_cidrs`` (none by default: use SSM Session
  Manager); egress to the internet (through the NAT gateway) for packages;
* Lustre TCP 988 and 1018-1023 both ways between the file system and its clients, as AWS
  documents for both groups (https://docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html,
  catalog ``fsx.security_groups``): the FSx SG admits and reaches the node SG and itself; the node
  SG admits and reaches the FSx SG. The file system depends on these rule resources so it is
  never created before them.

New VPCs get one private compute subnet in ``target.availability_zone`` (every EFA peer must be
in one subnet), a public subnet with the NAT gateway when ``vpc.nat_gateway`` is on,
and, for EKS, one small control-plane subnet in a second AZ (EKS requires subnets in two AZs).
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from blueprints.catalog import catalog

from ..inventory import LUSTRE_PORTS, NetworkArgs

__all__ = ["LUSTRE_PORTS", "Network", "NetworkArgs"]


class Network(pulumi.ComponentResource):
    """The cluster's network. Outputs: ``vpc_id``, ``subnet_id`` (private compute subnet),
    ``public_subnet_id`` (or ``None``), ``control_plane_subnet_ids`` (EKS), ``node_security_group_id``,
    ``fsx_security_group_id`` (or ``None``) and ``lustre_rules`` (the SG rule resources the file
    system must depend on)."""

    vpc_id: pulumi.Output[str]
    subnet_id: pulumi.Output[str]
    public_subnet_id: pulumi.Output[str] | None
    control_plane_subnet_ids: list[pulumi.Output[str]]
    node_security_group_id: pulumi.Output[str]
    fsx_security_group_id: pulumi.Output[str] | None
    lustre_rules: list[pulumi.Resource]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("clusterforge:aws:Network", name, None, opts)
        n = args.naming
        child = pulumi.ResourceOptions(parent=self)
        self.public_subnet_id = None
        self.control_plane_subnet_ids = []

        def tags(what: str) -> dict[str, str]:
            return n.tags(role="network", name=n.name(what))

        if not args.creates_vpc:
            self._existing(name, args)
        else:
            vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=args.cidr_block, enable_dns_support=True,
                              enable_dns_hostnames=True, tags=tags("vpc"), opts=child)
            self.vpc_id = vpc.id
            # Private compute subnet: never maps public IPs (multi-NIC EFA instances cannot get one).
            subnet = aws.ec2.Subnet(f"{name}-compute", vpc_id=vpc.id, cidr_block=args.subnet_cidr_block,
                                    availability_zone=args.availability_zone, map_public_ip_on_launch=False,
                                    tags=tags("compute"), opts=child)
            self.subnet_id = subnet.id
            private_rt = aws.ec2.RouteTable(f"{name}-private-rt", vpc_id=vpc.id, tags=tags("private"), opts=child)
            aws.ec2.RouteTableAssociation(f"{name}-compute-rta", subnet_id=subnet.id, route_table_id=private_rt.id,
                                          opts=child)
            if args.public:
                igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=tags("igw"), opts=child)
                public = aws.ec2.Subnet(f"{name}-public", vpc_id=vpc.id, cidr_block=args.public_subnet_cidr_block,
                                        availability_zone=args.availability_zone, map_public_ip_on_launch=False,
                                        tags=tags("public"), opts=child)
                self.public_subnet_id = public.id
                public_rt = aws.ec2.RouteTable(f"{name}-public-rt", vpc_id=vpc.id, tags=tags("public"), opts=child)
                aws.ec2.Route(f"{name}-public-default", route_table_id=public_rt.id,
                              destination_cidr_block="0.0.0.0/0", gateway_id=igw.id, opts=child)
                aws.ec2.RouteTableAssociation(f"{name}-public-rta", subnet_id=public.id,
                                              route_table_id=public_rt.id, opts=child)
                if args.nat:
                    eip = aws.ec2.Eip(f"{name}-nat-eip", domain="vpc", tags=tags("nat"), opts=child)
                    nat = aws.ec2.NatGateway(f"{name}-nat", allocation_id=eip.id, subnet_id=public.id,
                                             tags=tags("nat"), opts=pulumi.ResourceOptions(parent=self,
                                                                                           depends_on=[igw]))
                    aws.ec2.Route(f"{name}-private-default", route_table_id=private_rt.id,
                                  destination_cidr_block="0.0.0.0/0", nat_gateway_id=nat.id, opts=child)
            if args.control_plane_subnet:
                # availability zones only: a Local or Wavelength Zone (opt-in) cannot hold the EKS control
                # plane (catalog eks_zones, with its sources)
                zones = aws.get_availability_zones_output(
                    state="available", filters=[aws.GetAvailabilityZonesFilterArgs(name=str(f["name"]), values=list(f["values"]))
                                                for f in catalog().aws["eks_zones"]["filters"]],
                    opts=pulumi.InvokeOutputOptions(parent=self))
                other = zones.names.apply(lambda names: _other_zone(names, args.availability_zone))
                cp = aws.ec2.Subnet(f"{name}-control-plane", vpc_id=vpc.id,
                                    cidr_block=args.control_plane_subnet_cidr_block, availability_zone=other,
                                    map_public_ip_on_launch=False, tags=tags("control-plane"), opts=child)
                aws.ec2.RouteTableAssociation(f"{name}-control-plane-rta", subnet_id=cp.id,
                                              route_table_id=private_rt.id, opts=child)
                self.control_plane_subnet_ids = [subnet.id, cp.id]

        self._security_groups(name, args)
        self.register_outputs({
            "vpcId": self.vpc_id,
            "subnetId": self.subnet_id,
            "nodeSecurityGroupId": self.node_security_group_id,
            "fsxSecurityGroupId": self.fsx_security_group_id,
        })

    # ---- existing VPC / subnet ----------------------------------------------------------------
    def _existing(self, name: str, args: NetworkArgs) -> None:
        assert args.subnet_id is not None
        self.subnet_id = pulumi.Output.from_input(args.subnet_id)
        if args.vpc_id:
            self.vpc_id = pulumi.Output.from_input(args.vpc_id)
        else:
            found = aws.ec2.get_subnet_output(id=args.subnet_id, opts=pulumi.InvokeOutputOptions(parent=self))
            self.vpc_id = found.vpc_id
        if args.eks:  # two AZs' subnets: rule `eks-control-plane-subnets` makes sure they are listed
            self.control_plane_subnet_ids = [pulumi.Output.from_input(s) for s in args.control_plane_subnet_ids]

    # ---- security groups ----------------------------------------------------------------------
    def _security_groups(self, name: str, args: NetworkArgs) -> None:
        n = args.naming
        child = pulumi.ResourceOptions(parent=self)
        node_sg = aws.ec2.SecurityGroup(
            f"{name}-nodes", vpc_id=self.vpc_id,
            description=f"clusterforge {n.blueprint}: nodes (EFA self-reference, Lustre client, SSH from declared CIDRs)",
            revoke_rules_on_delete=True, tags=n.tags(role="network", name=n.name("nodes")), opts=child)
        self.node_security_group_id = node_sg.id
        rule_tags = n.tags(role="network", name=n.name("nodes"))
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-nodes-self-ingress", security_group_id=node_sg.id, referenced_security_group_id=node_sg.id,
            ip_protocol="-1", description="all traffic from the node SG itself (EFA, NCCL bootstrap, MPI)",
            tags=rule_tags, opts=child)
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-nodes-self-egress", security_group_id=node_sg.id, referenced_security_group_id=node_sg.id,
            ip_protocol="-1", description="all traffic to the node SG itself (EFA needs the explicit egress)",
            tags=rule_tags, opts=child)
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-nodes-internet-egress", security_group_id=node_sg.id, cidr_ipv4="0.0.0.0/0", ip_protocol="-1",
            description="outbound to the internet through the NAT gateway (packages, SSM, ECR)",
            tags=rule_tags, opts=child)
        for i, cidr in enumerate(args.ssh_ingress_cidrs):
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-nodes-ssh-{i}", security_group_id=node_sg.id, cidr_ipv4=cidr, ip_protocol="tcp",
                from_port=22, to_port=22, description=f"SSH from declared CIDR {cidr}", tags=rule_tags, opts=child)
        self.fsx_security_group_id = None
        self.lustre_rules = []
        if not args.lustre:
            return
        fsx_sg = aws.ec2.SecurityGroup(
            f"{name}-fsx", vpc_id=self.vpc_id,
            description=f"clusterforge {n.blueprint}: FSx for Lustre (LNET 988, 1018-1023 from nodes)",
            revoke_rules_on_delete=True, tags=n.tags(role="storage", name=n.name("fsx")), opts=child)
        self.fsx_security_group_id = fsx_sg.id
        fsx_tags = n.tags(role="storage", name=n.name("fsx"))
        for lo, hi in LUSTRE_PORTS:
            ports = f"{lo}" if lo == hi else f"{lo}-{hi}"
            self.lustre_rules += [
                aws.vpc.SecurityGroupIngressRule(
                    f"{name}-fsx-lustre-{ports}-from-nodes", security_group_id=fsx_sg.id,
                    referenced_security_group_id=node_sg.id, ip_protocol="tcp", from_port=lo, to_port=hi,
                    description=f"Lustre TCP {ports} from the nodes", tags=fsx_tags, opts=child),
                aws.vpc.SecurityGroupIngressRule(
                    f"{name}-fsx-lustre-{ports}-from-self", security_group_id=fsx_sg.id,
                    referenced_security_group_id=fsx_sg.id, ip_protocol="tcp", from_port=lo, to_port=hi,
                    description=f"Lustre TCP {ports} between file servers", tags=fsx_tags, opts=child),
                aws.vpc.SecurityGroupEgressRule(
                    f"{name}-fsx-lustre-{ports}-to-self", security_group_id=fsx_sg.id,
                    referenced_security_group_id=fsx_sg.id, ip_protocol="tcp", from_port=lo, to_port=hi,
                    description=f"Lustre TCP {ports} between file servers", tags=fsx_tags, opts=child),
                aws.vpc.SecurityGroupEgressRule(
                    f"{name}-fsx-lustre-{ports}-to-nodes", security_group_id=fsx_sg.id,
                    referenced_security_group_id=node_sg.id, ip_protocol="tcp", from_port=lo, to_port=hi,
                    description=f"Lustre TCP {ports} to the clients", tags=fsx_tags, opts=child),
                aws.vpc.SecurityGroupEgressRule(
                    f"{name}-nodes-lustre-{ports}-to-fsx", security_group_id=node_sg.id,
                    referenced_security_group_id=fsx_sg.id, ip_protocol="tcp", from_port=lo, to_port=hi,
                    description=f"Lustre TCP {ports} to the file system", tags=rule_tags, opts=child),
                aws.vpc.SecurityGroupIngressRule(
                    f"{name}-nodes-lustre-{ports}-from-fsx", security_group_id=node_sg.id,
                    referenced_security_group_id=fsx_sg.id, ip_protocol="tcp", from_port=lo, to_port=hi,
                    description=f"Lustre TCP {ports} from the file system", tags=rule_tags, opts=child),
            ]


def _other_zone(names: list[str], zone: str) -> str:
    """The first available zone of the region other than ``zone`` (EKS control-plane subnet)."""
    for z in sorted(names):
        if z != zone:
            return z
    raise pulumi.RunError(f"EKS needs a second availability zone besides {zone}; the region reports {names}")
