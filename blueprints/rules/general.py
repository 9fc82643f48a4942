"""Rules about the blueprint as a whole: node group shape, hosts, mount points, security."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from typing import Any, get_args

from ..models import NodeRole
from ..naming import INVENTORY_DEFAULT_GROUPS, generated_inventory_groups, inventory_group
from ..role_vars import ROLE_ORDER
from ._facts import fld, mounts, reprs
from .registry import Hit, RuleContext, rule

ANSIBLE_INVENTORY = "https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html"
PC_MOUNT_VALIDATORS = (
    "https://github.com/aws/aws-parallelcluster/blob/451cc53/cli/src/pcluster/validators/cluster_validators.py"
)


@rule(
    id="node-group-names-unique",
    severity="error",
    summary="Node group names must be unique (they prefix resource and inventory group names).",
    fix="rename one of the node groups",
    source="https://www.pulumi.com/docs/iac/concepts/resources/names/",
)
def node_group_names_unique(ctx: RuleContext) -> Iterator[Hit]:
    seen: set[str] = set()
    for i, g in enumerate(ctx.bp.node_groups):
        if g.name in seen:
            yield Hit(("node_groups", i, "name"), f"node group name `{g.name}` is used twice")
        seen.add(g.name)


@rule(
    id="aws-node-group-fields",
    severity="error",
    summary="AWS node groups launch `count` instances of an `instance_type`; `hosts` and `hardware` are on-prem only.",
    fix="set `instance_type` and `count`; remove `hosts` and `hardware` (the catalog knows the hardware)",
    source="https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_RunInstances.html",
)
def aws_node_group_fields(ctx: RuleContext) -> Iterator[Hit]:
    if not ctx.bp.is_aws:
        return
    for i, g in enumerate(ctx.bp.node_groups):
        p = ("node_groups", i)
        if not g.instance_type:
            yield Hit(p + ("name",), f"AWS node group `{g.name}` has no `{fld(p)}.instance_type`",
                      "add `instance_type:` (e.g. `p5.48xlarge`)")
        if g.count is None:
            yield Hit(p + ("name",), f"AWS node group `{g.name}` has no `{fld(p)}.count`", "add `count:` (number of instances)")
        if g.hosts:
            yield Hit(p + ("hosts",), f"`{fld(p)}.hosts` is for on-prem targets; AWS instances are created by the stack",
                      "remove `hosts` and set `count`")
        if g.hardware is not None:
            yield Hit(p + ("hardware",), f"`{fld(p)}.hardware` is for on-prem targets; AWS hardware comes from "
                      f"`instance_type` via the catalog", "remove `hardware`")


@rule(
    id="onprem-node-group-fields",
    severity="error",
    summary="On-prem node groups list their `hosts`; `instance_type`, `count` and `public_ip` are AWS only.",
    fix="list the servers under `hosts:`; remove the AWS-only keys",
    source=ANSIBLE_INVENTORY,
)
def onprem_node_group_fields(ctx: RuleContext) -> Iterator[Hit]:
    if ctx.bp.is_aws:
        return
    for i, g in enumerate(ctx.bp.node_groups):
        p = ("node_groups", i)
        if not g.hosts:
            yield Hit(p + ("name",), f"on-prem node group `{g.name}` has no `{fld(p)}.hosts`",
                      "add `hosts: [{name: ..., address: ...}]`")
        if g.instance_type:
            yield Hit(p + ("instance_type",), f"`{fld(p)}.instance_type` is AWS only; on-prem hardware is described "
                      f"by `hardware`", "remove `instance_type` and describe `hardware` (gpu, nics, nvme)")
        if g.count is not None and g.count != len(g.hosts):
            yield Hit(p + ("count",), f"`{fld(p)}.count` is {g.count} but the group lists {len(g.hosts)} host(s)",
                      "remove `count` (on-prem groups are sized by their `hosts`)")
        if g.public_ip:
            yield Hit(p + ("public_ip",), f"`{fld(p)}.public_ip` is AWS only", "remove `public_ip`")


@rule(
    id="onprem-network-placement",
    severity="warning",
    summary="`network.placement` is an EC2 placement group strategy (AWS only); on-prem servers are placed by where "
            "they are racked and cabled, so the key has no effect there.",
    fix="remove `network.placement`",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-groups.html",
)
def onprem_network_placement(ctx: RuleContext) -> Iterator[Hit]:
    if not ctx.bp.is_aws and ctx.bp.network.placement is not None:
        yield Hit(("network", "placement"), f"`network.placement` is `{ctx.bp.network.placement}` on an on-prem "
                  "cluster, where EC2 placement groups do not exist")


@rule(
    id="host-unique",
    severity="error",
    summary="Each host name and address appears once across all node groups (Ansible merges duplicate "
            "hosts, so one server would get two groups' settings, e.g. both IOMMU-on and ACS-off); host names "
            "and DNS addresses compare without case (DNS names are case-insensitive, RFC 4343) and IP "
            "addresses by value.",
    fix="list each server in one node group only",
    source="https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html#how-variables-are-merged",
)
def host_unique(ctx: RuleContext) -> Iterator[Hit]:
    names: dict[str, tuple[int, int]] = {}
    addresses: dict[str, tuple[int, int]] = {}
    groups = ctx.bp.node_groups
    for i, g in enumerate(groups):
        for j, h in enumerate(g.hosts):
            p = ("node_groups", i, "hosts", j)
            name = _host_key(h.name)
            if name in names:
                gi, hj = names[name]
                other = groups[gi].hosts[hj].name
                same = f"`{other}`, " if other != h.name else ""
                yield Hit(p + ("name",), f"host `{h.name}` is already {same}`node_groups.{gi}.hosts.{hj}` "
                          f"(group `{groups[gi].name}`){'; host names ignore case' if same else ''}")
            else:
                names[name] = (i, j)
            addr = _host_key(h.address)
            if addr in addresses:
                gi, hj = addresses[addr]
                yield Hit(p + ("address",), f"address `{h.address}` of host `{h.name}` is already used by "
                          f"`node_groups.{gi}.hosts.{hj}` (`{groups[gi].hosts[hj].name}`)",
                          "give every host its own address")
            else:
                addresses[addr] = (i, j)


@rule(
    id="inventory-group-name",
    severity="error",
    summary="An on-prem node group's Ansible inventory group (its name with `-` as `_`) must not be one the "
            "renderer generates (`role_<role>`, `with_<ansible role>`) or Ansible's own `all` / `ungrouped`: "
            "the groups would merge and the hosts get the wrong roles.",
    fix="rename the node group",
    source=ANSIBLE_INVENTORY + "#default-groups",
)
def inventory_group_name(ctx: RuleContext) -> Iterator[Hit]:
    if ctx.bp.target.provider != "onprem":
        return
    generated = generated_inventory_groups(get_args(NodeRole), ROLE_ORDER)
    for i, g in enumerate(ctx.bp.node_groups):
        name = inventory_group(g.name)
        if name in generated:
            yield Hit(("node_groups", i, "name"), f"node group `{g.name}` (`node_groups.{i}.name`) becomes the "
                      f"inventory group `{name}`, which clusterforge generates for "
                      + ("every inventory" if name in INVENTORY_DEFAULT_GROUPS else
                         "a node role" if name.startswith("role_") else "an Ansible role"),
                      f"rename the node group (e.g. `{g.name}-nodes`)")


def _host_key(text: str) -> str:
    """What two host names or addresses compare by: an IP address by value, a DNS name without case
    or a trailing dot (RFC 4343, https://www.rfc-editor.org/rfc/rfc4343)."""
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        return text.strip().rstrip(".").lower()


_HOSTNAME = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$")


def _valid_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return bool(_HOSTNAME.match(text)) and not re.fullmatch(r"[\d.]+", text)


@rule(
    id="host-address-valid",
    severity="error",
    summary="A host `address` is an IPv4/IPv6 address or an RFC 1123 DNS name.",
    fix="write an IP address (`10.0.0.11`) or a DNS name (`gpu-01.example.com`)",
    source="https://datatracker.ietf.org/doc/html/rfc1123#section-2.1",
)
def host_address_valid(ctx: RuleContext) -> Iterator[Hit]:
    for i, g in enumerate(ctx.bp.node_groups):
        for j, h in enumerate(g.hosts):
            if not _valid_address(h.address):
                yield Hit(("node_groups", i, "hosts", j, "address"),
                          f"`node_groups.{i}.hosts.{j}.address` `{reprs(h.address)}` is neither an IP address nor a DNS name")


@rule(
    id="local-connection-single",
    severity="error",
    summary="At most one host uses `connection: local` (it is the control machine itself).",
    fix="use `connection: ssh` for every other host",
    source="https://docs.ansible.com/ansible/latest/collections/ansible/builtin/local_connection.html",
)
def local_connection_single(ctx: RuleContext) -> Iterator[Hit]:
    first: tuple[int, int] | None = None
    for i, g in enumerate(ctx.bp.node_groups):
        for j, h in enumerate(g.hosts):
            if h.connection != "local":
                continue
            if first is None:
                first = (i, j)
            else:
                yield Hit(("node_groups", i, "hosts", j, "connection"),
                          f"host `{h.name}` uses `connection: local` like `node_groups.{first[0]}.hosts.{first[1]}`; "
                          f"both would run on the control machine")


def _same_node(a: Any, b: Any) -> bool:
    """Whether two mounts land on the same node: shared storage is on every node, NVMe scratch only on
    its own group's nodes."""
    return not (a.path[0] == "node_groups" and b.path[0] == "node_groups" and a.path[1] != b.path[1])


@rule(
    id="mount-dir-duplicate",
    severity="error",
    summary="Two file systems on the same node (shared storage or that group's NVMe scratch) cannot use the same "
            "mount point.",
    fix="give each file system its own mount point",
    source=PC_MOUNT_VALIDATORS,
)
def mount_dir_duplicate(ctx: RuleContext) -> Iterator[Hit]:
    ms = mounts(ctx.bp)
    for j, m in enumerate(ms):
        first = next((o for o in ms[:j] if o.mount == m.mount and _same_node(o, m)), None)
        if first is not None:
            yield Hit(m.path, f"`{fld(m.path)}` `{m.mount}` ({m.what}) is also the mount point of {first.what} "
                      f"(`{fld(first.path)}`)")


@rule(
    id="mount-dir-overlap",
    severity="error",
    summary="Mount points on one node must not be nested: the inner file system hides (or is hidden by) the outer one.",
    fix="use sibling mount points, e.g. `/fsx` and `/scratch`",
    source=PC_MOUNT_VALIDATORS,
)
def mount_dir_overlap(ctx: RuleContext) -> Iterator[Hit]:
    ms = mounts(ctx.bp)
    for m in ms:
        for o in ms:
            if o.mount != "/" and m.mount.startswith(o.mount + "/") and _same_node(o, m):
                yield Hit(m.path, f"`{fld(m.path)}` `{m.mount}` ({m.what}) is inside `{fld(o.path)}` `{o.mount}` ({o.what})")
                break


RESERVED_DIRS = ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/root", "/run", "/sbin",
                 "/sys", "/usr", "/var", "/tmp", "/home")
"""Top-level directories of the Linux file hierarchy that a cluster mount must not replace."""


@rule(
    id="mount-dir-reserved",
    severity="error",
    summary="A mount point must not replace a system directory (`/`, `/usr`, `/var`, `/home`, `/tmp` ...) or sit "
            "under one that the OS owns (`/usr`, `/etc`, `/proc` ...).",
    fix="mount under a directory of its own, e.g. `/fsx`, `/lustre`, `/scratch`",
    source="https://refspecs.linuxfoundation.org/FHS_3.0/fhs/index.html",
)
def mount_dir_reserved(ctx: RuleContext) -> Iterator[Hit]:
    owned = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr")
    for m in mounts(ctx.bp):
        if m.mount in RESERVED_DIRS:
            yield Hit(m.path, f"`{fld(m.path)}` `{m.mount}` would hide the system directory `{m.mount}`")
        elif any(m.mount.startswith(d + "/") for d in owned):
            yield Hit(m.path, f"`{fld(m.path)}` `{m.mount}` is inside the OS-managed directory `/{m.mount.split('/')[1]}`")


@rule(
    id="fabric-provider",
    severity="error",
    summary="EFA exists only on AWS; InfiniBand and RoCE are on-prem fabrics (AWS instances reach each other over "
            "EFA or ENA Ethernet).",
    fix="use `fabric: efa` (or `ethernet`) on AWS and `infiniband`, `roce` or `ethernet` on-prem",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html",
)
def fabric_provider(ctx: RuleContext) -> Iterator[Hit]:
    fabric = ctx.bp.network.fabric
    if ctx.bp.is_aws and fabric in ("infiniband", "roce"):
        yield Hit(("network", "fabric"), f"`network.fabric` `{fabric}` is not available on AWS",
                  "use `fabric: efa` (EFA-capable instance types) or `fabric: ethernet`")
    if not ctx.bp.is_aws and fabric == "efa":
        yield Hit(("network", "fabric"), "`network.fabric` `efa` is an AWS-only adapter; this target is on-prem",
                  "use `fabric: infiniband`, `roce` or `ethernet`")


@rule(
    id="ssh-ingress-open",
    severity="error",
    summary="SSH (port 22) must not be open to the whole internet (`0.0.0.0/0` or `::/0`).",
    fix="list your office/VPN CIDRs in `target.ssh_ingress_cidrs`, or leave it empty and use SSM Session Manager",
    source="https://docs.aws.amazon.com/securityhub/latest/userguide/ec2-controls.html#ec2-13",
)
def ssh_ingress_open(ctx: RuleContext) -> Iterator[Hit]:
    if not ctx.bp.is_aws:
        return
    for i, c in enumerate(ctx.bp.target.ssh_ingress_cidrs):  # type: ignore[union-attr]
        try:
            net = ipaddress.ip_network(c, strict=False)
        except ValueError:
            continue
        if net.prefixlen == 0:
            yield Hit(("target", "ssh_ingress_cidrs", i), f"`target.ssh_ingress_cidrs.{i}` `{c}` opens SSH to the whole internet")


_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----|PuTTY-User-Key-File|^(ssh-(rsa|ed25519)|ecdsa-sha2-\S+) AAAA", re.MULTILINE)


@rule(
    id="ssh-key-material",
    severity="error",
    summary="`target.ssh.private_key_file` is a path to a key file, never the key itself.",
    fix="store the key in a file (mode 0600) and set `private_key_file: ~/.ssh/id_ed25519`",
    source="https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html#connecting-to-hosts-behavioral-inventory-parameters",
)
def ssh_key_material(ctx: RuleContext) -> Iterator[Hit]:
    if ctx.bp.is_aws:
        return
    key = ctx.bp.target.ssh.private_key_file  # type: ignore[union-attr]
    if key and (_PEM.search(key) or "\n" in key or len(key) > 512):
        yield Hit(("target", "ssh", "private_key_file"),
                  "`target.ssh.private_key_file` holds key material; it would be copied into inventories and logs")


# Slack documents token prefixes (xoxb- bot, xoxp- user, ...) and "token strings up to 255 characters", no minimum
# (https://api.slack.com/authentication/token-types); the pattern below takes 10 characters after the prefix.
_SECRETS = [
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"), "a private key"),
    (re.compile(r"(?<![A-Z0-9])(AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"), "an AWS access key id"),
    (re.compile(r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{36,}"), "a GitHub token"),
    (re.compile(r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}"), "a Slack token"),
]
_SHORTEST_SECRET = 15
"""The shortest string a pattern of ``_SECRETS`` matches ("xoxb-" + 10); shorter strings are not scanned. It was 16,
which skipped every 15-character value the Slack pattern reports."""


def _strings(node: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], str]]:
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(k, str):
                yield path + (k,), k
            yield from _strings(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, path + (i,))
    elif isinstance(node, str):
        yield path, node


@rule(
    id="secret-in-blueprint",
    severity="error",
    summary="A blueprint is committed and rendered into inventories, stacks and logs: it must not contain secrets "
            "(private keys, AWS access keys, API tokens).",
    fix="remove the secret; reference a key file path or use the provider's credential chain / a secret store",
    source="https://docs.aws.amazon.com/IAM/latest/UserGuide/best-practices.html",
)
def secret_in_blueprint(ctx: RuleContext) -> Iterator[Hit]:
    skip = ("target", "ssh", "private_key_file")  # reported by ssh-key-material
    for path, text in _strings(ctx.loaded.data, ()):
        if path == skip or len(text) < _SHORTEST_SECRET:
            continue
        for pattern, what in _SECRETS:
            if pattern.search(text):
                yield Hit(path, f"`{fld(path)}` contains what looks like {what}")
                break
