"""The kinds of string a blueprint holds, each with its allow-list: blueprint values are data, never code.

A blueprint is often written by one person and run by another (a pull request that CI runs ``check`` and
``plan`` on, with cloud credentials in its environment). Its strings end up in files that run as root on
every node (shell scripts, systemd units, ``modprobe.d``), in files that define structure (containerd's
TOML, deb822 sources, fstab, sbatch scripts) and in Ansible variables, which Ansible templates. So every
string field has a *kind* (an interface name, an environment variable name, a mount option ...), and a
kind admits only the characters its consumer gives no meaning to: no quote, ``$``, backtick, ``;``,
newline or leading ``-`` where a shell or command line reads it, no ``,`` or whitespace in a mount
option, no ``]`` or newline where TOML or deb822 reads it. :data:`TEMPLATE_DELIMITERS` are refused in
every string (:func:`template_delimiter`; the loader reports each with its position as
``value-template-syntax``).

This is the first of three layers (``docs/security.md``): values also reach Ansible marked ``!unsafe``
(never templated) and every generated file quotes them by its own format's rules, so a kind that is
wider than it should be is not an exploit.

Each kind is metadata of an ``Annotated[str, KINDS[name]]`` type: the pattern shows in the JSON Schema (editor completion),
and a value outside it fails validation with a :class:`pydantic_core.PydanticCustomError` whose context
carries the fix, which the loader prints as ``FILE:LINE:COL: schema-invalid-value: ... — fix``.
"""

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

__all__ = [
    "DNS_LABEL_PATTERN",
    "KINDS",
    "TEMPLATE_DELIMITERS",
    "AnsibleExpression",
    "ValueKind",
    "env_name",
    "shell_export",
    "template_delimiter",
    "templated_strings",
]

TEMPLATE_DELIMITERS = ("{{", "}}", "{%", "%}", "{#", "#}")
"""Jinja2's default delimiters (expressions, statements, comments), which Ansible evaluates in every
variable it reads (https://jinja.palletsprojects.com/en/3.1.x/templates/#synopsis,
https://docs.ansible.com/ansible/latest/playbook_guide/playbooks_advanced_syntax.html#unsafe-or-raw-strings).
No blueprint string may hold one."""


class AnsibleExpression(str):
    """A variable value that clusterforge itself writes as an Ansible template (``"{{ playbook_dir }}/..."``).

    The one kind of string that is evaluated: :func:`blueprints.role_templates.role_variables` evaluates it, and
    the rendered ``group_vars`` leave it templatable, while every other value is data (``!unsafe``). Never built
    from a blueprint value."""


def template_delimiter(text: str) -> str | None:
    """The first of :data:`TEMPLATE_DELIMITERS` in ``text`` (``None`` when there is none)."""
    hits = [(text.find(d), d) for d in TEMPLATE_DELIMITERS if d in text]
    return min(hits)[1] if hits else None


def templated_strings(data: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str, str]]:
    """Every string in the YAML data ``data`` (mappings, lists, scalars) that holds a template delimiter:
    ``(path, "key" | "value", delimiter)``, where ``path`` is the document path of the key or value
    (a key's path ends with the key itself). Iterative, so any nesting depth is safe."""
    stack: list[tuple[tuple[Any, ...], Any]] = [(path, data)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, dict):
            for k, v in reversed(list(node.items())):
                if isinstance(k, str) and (d := template_delimiter(k)):
                    yield (*where, k), "key", d
                stack.append(((*where, k), v))
        elif isinstance(node, list):
            stack.extend(((*where, i), v) for i, v in reversed(list(enumerate(node))))
        elif isinstance(node, str) and (d := template_delimiter(node)):
            yield where, "value", d


@dataclass(frozen=True)
class ValueKind:
    """One kind of blueprint string: a name, the full-match ``pattern`` it must satisfy (Python ``re``
    syntax that is also valid ECMA-262 for the JSON Schema), a one-line ``what`` (what the value is),
    the ``fix`` printed when a value does not match, an optional ``check`` that parses the value further
    (raises ``ValueError`` with a message), the ``max_length`` in characters and the ``source`` of the
    rule (a URL)."""

    name: str
    pattern: str
    what: str
    fix: str
    source: str
    max_length: int = 255
    check: Any = None

    def validate(self, value: str) -> str:
        """``value`` when it is of this kind; raises :class:`PydanticCustomError` (type ``value_kind``,
        context ``fix``) otherwise."""
        if len(value) > self.max_length:
            raise PydanticCustomError("value_kind", f"{{what}} is longer than {self.max_length} characters",
                                      {"what": self.what, "fix": self.fix})
        if not re.fullmatch(self.pattern, value):
            raise PydanticCustomError("value_kind", "{shown} is not {what}",
                                      {"shown": _shown(value), "what": self.what, "fix": self.fix})
        if self.check is not None:
            try:
                self.check(value)
            except ValueError as e:
                raise PydanticCustomError("value_kind", "{shown} is not {what} ({why})",
                                          {"shown": _shown(value), "what": self.what, "why": str(e),
                                           "fix": self.fix}) from None
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """As ``Annotated[str, kind]`` metadata: the string schema, then :meth:`validate`."""
        return core_schema.no_info_after_validator_function(self.validate, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        """The JSON Schema of the string with this kind's anchored ``pattern`` and ``maxLength``."""
        out = handler(schema)
        out.update({"pattern": f"^(?:{self.pattern})$", "maxLength": self.max_length})
        return out


def _shown(value: str, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _no_dot_dot(value: str) -> None:
    if ".." in value.split("/"):
        raise ValueError("`..` leaves the directory")


DNS_LABEL_PATTERN = r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?"
"""RFC 1123 label, lower case, starting with a letter: the blueprint's and node groups' names (resource prefixes)."""
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_K8S_NAME = r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_IFNAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}"
_PATH_CHARS = r"[A-Za-z0-9._/:@+~-]"

KINDS: dict[str, ValueKind] = {k.name: k for k in (
    ValueKind(
        "interface-name", rf"(?!\.{{1,2}}$){_IFNAME}",
        "a Linux network interface name",
        "use the interface's name as `ip link` shows it: at most 15 letters, digits, `_`, `.` and `-`, not "
        "starting with `-` or `.`",
        "https://github.com/torvalds/linux/blob/v6.12/net/core/dev.c#L1076 (dev_valid_name, IFNAMSIZ 16)",
        max_length=15),
    ValueKind(
        "interface-list", rf"\^?=?{_IFNAME}(,{_IFNAME})*",
        "an NCCL interface list (`eth0`, `ib`, `^docker,lo`, `=eth0`)",
        "write interface names or prefixes separated by `,`, optionally after `^` (exclude) or `=` (exact match)",
        "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-socket-ifname"),
    ValueKind(
        "rdma-device", r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}",
        "an RDMA device name (`mlx5_0`)",
        "use the device's name as `ibv_devices` or `rdma link` shows it (letters, digits, `_`, `.`, `-`)",
        "https://github.com/torvalds/linux/blob/v6.12/include/rdma/ib_verbs.h (IB_DEVICE_NAME_MAX 64)",
        max_length=63),
    ValueKind(
        "env-name", r"[A-Za-z_][A-Za-z0-9_]*",
        "an environment variable name",
        "use letters, digits and `_`, not starting with a digit (e.g. `NCCL_IB_HCA`)",
        "https://pubs.opengroup.org/onlinepubs/9799919799/basedefs/V1_chap08.html"),
    ValueKind(
        "env-value", r"[^\x00-\x1f\x7f]*",
        "an environment variable value on one line",
        "remove the newline or control character (each value is one line of text)",
        "https://pubs.opengroup.org/onlinepubs/9799919799/basedefs/V1_chap08.html", max_length=4096),
    ValueKind(
        "user-name", r"[a-z_][a-z0-9_-]{0,31}",
        "a Linux user name",
        "use lower-case letters, digits, `_` and `-`, starting with a letter or `_` (at most 32)",
        "https://manpages.debian.org/bookworm/passwd/useradd.8.en.html#CAVEATS", max_length=32),
    ValueKind(
        "host-address", r"[A-Za-z0-9][A-Za-z0-9_.:%-]*",
        "an IP address or DNS name",
        "write an IPv4 or IPv6 address or a DNS name (letters, digits, `-` and `.`)",
        "https://www.rfc-editor.org/rfc/rfc1123#section-2.1 (the rule `host-address-valid` checks the form)",
        max_length=253),
    ValueKind(
        "host-name", r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?",
        "a host name",
        "use letters, digits, `.`, `_` and `-`, starting and ending with a letter or digit",
        "https://www.rfc-editor.org/rfc/rfc1123#section-2.1", max_length=253),
    ValueKind(
        "cidr", r"[A-Za-z0-9:./-]+",
        "a CIDR block",
        "write an address and prefix length, e.g. `10.0.0.0/16` (the field's rule checks the network)",
        "https://www.rfc-editor.org/rfc/rfc4632", max_length=64),
    ValueKind(
        "abs-path", rf"/{_PATH_CHARS}*",
        "an absolute path without whitespace, quotes or shell characters",
        "write an absolute path of letters, digits and `._/:@+~-` (no spaces, quotes, `$`, `;` or `,`)",
        "https://man7.org/linux/man-pages/man5/fstab.5.html (fields are separated by whitespace)",
        max_length=4096, check=_no_dot_dot),
    ValueKind(
        "file-path", r"[^\x00]+",
        "a file path",
        "write the path of the file (the rule `ssh-key-material` refuses key material in its place)",
        "https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html#connecting-to-hosts-behavioral-inventory-parameters",
        max_length=4096),
    ValueKind(
        "rel-path", rf"{_PATH_CHARS}+",
        "a path without whitespace, quotes or shell characters",
        "write a path relative to the mount point, of letters, digits and `._/:@+~-` (the rule `lustre-stripe-path` "
        "checks that it stays below the mount)",
        "https://doc.lustre.org/lustre_manual.xhtml#managingstripingfreespace", max_length=4096),
    ValueKind(
        "mount-option", r"[A-Za-z0-9_][A-Za-z0-9_.:@+/-]*(=[A-Za-z0-9_.:@+/-]*)?",
        "one mount option (`noatime`, `nconnect=8`)",
        "write one option per list entry, `name` or `name=value` of letters, digits and `_.:@+/-` (no `,`, "
        "spaces or quotes)",
        "https://man7.org/linux/man-pages/man8/mount.8.html#FILESYSTEM-INDEPENDENT_MOUNT_OPTIONS"),
    ValueKind(
        "deb-package", r"[a-z0-9][a-z0-9+.-]*(\{kernel\}[a-z0-9+.-]*)?",
        "a Debian package name",
        "use lower-case letters, digits, `+`, `-` and `.`, starting with a letter or digit (`{kernel}` stands for "
        "the kernel release)",
        "https://www.debian.org/doc/debian-policy/ch-controlfields.html#source"),
    ValueKind(
        "apt-suite", r"\./|([A-Za-z0-9]|\{codename\})([A-Za-z0-9._+~/-]|\{codename\})*",
        "an apt suite (`./` for a flat repository, or a name)",
        "write `./` or a suite name of letters, digits and `._+~/-` (`{codename}` stands for the distribution's "
        "codename)",
        "https://manpages.debian.org/bookworm/apt/sources.list.5.en.html#DEB822-STYLE_FORMAT", max_length=128),
    ValueKind(
        "apt-component", r"[A-Za-z0-9][A-Za-z0-9._+-]*",
        "an apt component (`main`)",
        "write a component name of letters, digits and `._+-`",
        "https://manpages.debian.org/bookworm/apt/sources.list.5.en.html#DEB822-STYLE_FORMAT", max_length=128),
    ValueKind(
        "url", r"(https?|file)://[A-Za-z0-9._~:/?#\[\]@!&()*+,;=%-]+",
        "an http(s) or file URL",
        "write a URL that starts with `https://` (or `http://`, `file://`), with special characters "
        "percent-encoded",
        "https://www.rfc-editor.org/rfc/rfc3986#section-2", max_length=2048),
    ValueKind(
        "key-url", r"(https://|file:///|http://(127\.\d+\.\d+\.\d+|localhost|\[::1\])[:/])"
                   r"[A-Za-z0-9._~:/?#\[\]@!&()*+,;=%-]*",
        "a signing key URL over https",
        "serve the signing key over `https://` (or from a `file:///` path on the node): a key fetched over plain "
        "http can be replaced on the way, and it decides which packages the node trusts",
        "https://wiki.debian.org/DebianRepository/UseThirdParty#OpenPGP_certificate_distribution", max_length=2048),
    ValueKind(
        "dns-subdomain", r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*",
        "a DNS-1123 subdomain (Kubernetes object name)",
        "use lower-case letters, digits, `-` and `.`, starting and ending with a letter or digit",
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-subdomain-names",
        max_length=253),
    ValueKind(
        "node-group-name", DNS_LABEL_PATTERN,
        "a node group name",
        "name a node group of this blueprint",
        "https://www.rfc-editor.org/rfc/rfc1123#section-2.1", max_length=63),
    ValueKind(
        "label-key", rf"({_LABEL}(\.{_LABEL})*/)?{_K8S_NAME}",
        "a label key (`[prefix/]name`)",
        "use letters, digits, `-`, `_` and `.` (at most 63), optionally after a DNS prefix and `/`",
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set",
        max_length=317),
    ValueKind(
        "label-value", rf"({_K8S_NAME})?",
        "a label value",
        "use at most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit",
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set",
        max_length=63),
    ValueKind(
        "selector-value", rf"({_K8S_NAME}|[A-Za-z0-9_.-]*\{{group\}}[A-Za-z0-9_.-]*)?",
        "a label value (`{group}` stands for the node group's name)",
        "use at most 63 letters, digits, `-`, `_` and `.` (or `{group}`)",
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set",
        max_length=63),
    ValueKind(
        "aws-tag-key", r"[\w .:/=+@-]+",
        "an AWS tag key",
        "use letters, digits, spaces and `_.:/=+-@` (the rule `aws-tags` checks lengths and reserved prefixes)",
        "https://docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html#tag-conventions", max_length=4096),
    ValueKind(
        "aws-tag-value", r"[\w .:/=+@-]*",
        "an AWS tag value",
        "use letters, digits, spaces and `_.:/=+-@` (the rule `aws-tags` checks lengths)",
        "https://docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html#tag-conventions", max_length=4096),
    ValueKind(
        "aws-name", r"[A-Za-z0-9][A-Za-z0-9._+=@-]*",
        "an AWS resource name (key pair, placement group)",
        "use letters, digits and `._+=@-`",
        "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreatePlacementGroup.html"),
    ValueKind(
        "aws-id", r"[a-z]+-[0-9A-Za-z]+",
        "an AWS resource id (`vpc-...`, `subnet-...`, `ami-...`)",
        "copy the id from the AWS console or CLI, e.g. `subnet-0abc12345def67890`",
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/resource-ids.html", max_length=32),
    ValueKind(
        "s3-url", r"s3://[a-z0-9.-]{3,63}(/[A-Za-z0-9!_.*()/-]*)?",
        "an S3 URL (`s3://bucket/prefix`)",
        "write `s3://BUCKET/PREFIX` with a bucket name of lower-case letters, digits, `.` and `-`, and a prefix of "
        "letters, digits and `!_.*()/-`",
        "https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html#object-key-guidelines-safe-characters",
        max_length=1024),
    ValueKind(
        "lustre-nid", r"[A-Za-z0-9.:-]+@(o2ib|tcp|kfi|efa)\d*",
        "a Lustre NID",
        "write ADDRESS@o2ib or ADDRESS@tcp (e.g. `10.0.0.5@o2ib`)",
        "https://doc.lustre.org/lustre_manual.xhtml#lnet_config.lnetaddr", max_length=128),
    ValueKind(
        "aws-kms-key", r"(arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:(key|alias)/)?[A-Za-z0-9/_-]+",
        "a KMS key id, alias or ARN",
        "write the key id (`1234abcd-...`), `alias/NAME` or the key's ARN",
        "https://docs.aws.amazon.com/kms/latest/developerguide/concepts.html#key-id", max_length=2048),
    ValueKind(
        "aws-az", r"[a-z]{2}(-gov)?-[a-z]+-\d[a-z]",
        "an availability zone (`us-east-1a`)",
        "write the zone's name, e.g. `us-east-1a`",
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-regions-availability-zones.html", max_length=32),
    ValueKind(
        "instance-type", r"[A-Za-z0-9.-]+",
        "an EC2 instance type (`p5.48xlarge`)",
        "write the instance type as EC2 names it, e.g. `p5.48xlarge` (the rules `instance-type-format` and "
        "`instance-type-exists` check the name)",
        "https://docs.aws.amazon.com/ec2/latest/instancetypes/instance-type-names.html", max_length=64),
    ValueKind(
        "catalog-key", r"[a-z0-9][a-z0-9._-]*",
        "a catalog key (`samsung-pm1743`, `dgx-h100`)",
        "use a key of the hardware catalog (`clusterforge rules` and blueprints/data/hardware-catalog.yaml)",
        "blueprints/data/hardware-catalog.yaml", max_length=128),
    ValueKind(
        "gpu-name", r"[A-Za-z0-9][A-Za-z0-9 ._()+/:-]*",
        "a GPU catalog key or nvidia-smi name",
        "write a catalog key (`h100-sxm`) or the name nvidia-smi prints (`NVIDIA H100 80GB HBM3`)",
        "blueprints/data/hardware-catalog.yaml", max_length=128),
    ValueKind(
        "version", r"v?[0-9][0-9A-Za-z.+~-]*",
        "a version (`1.2.3`, `v0.6.0`)",
        "write the release's version as its project publishes it, e.g. `3.32.0` or `v0.6.0`",
        "https://semver.org/", max_length=64),
    ValueKind(
        "release", r"latest|\d{8}(\.\d+)?",
        "a gVisor release (`YYYYMMDD.N` or `latest`)",
        "write a release such as `20260504.0` (https://gvisor.dev/docs/user_guide/install/)",
        "https://gvisor.dev/docs/user_guide/install/#specific-release", max_length=32),
    ValueKind(
        "slurm-name", r"[A-Za-z0-9_][A-Za-z0-9_.,-]*",
        "a Slurm partition or account name",
        "use letters, digits, `_`, `.` and `-` (the rule `slurm-partition-name` checks for one partition)",
        "https://slurm.schedmd.com/sacctmgr.html#SECTION_SPECIFICATIONS-FOR-ACCOUNTS", max_length=64),
    ValueKind(
        "slurm-partition", r"[A-Za-z0-9_][A-Za-z0-9_.-]*",
        "a Slurm partition name",
        "use letters, digits, `_`, `.` and `-` (no `,`: slurm.conf separates lists with it)",
        "https://slurm.schedmd.com/slurm.conf.html#OPT_PartitionName", max_length=64),
    ValueKind(
        "slurm-cluster-name", r"[a-z][a-z0-9_-]*",
        "a Slurm cluster name",
        "use lower-case letters, digits, `_` and `-`, starting with a letter (slurmdbd stores it lower-cased)",
        "https://slurm.schedmd.com/slurm.conf.html#OPT_ClusterName", max_length=40),
    ValueKind(
        "slurm-key", r"[A-Za-z][A-Za-z0-9]*",
        "a slurm.conf option name",
        "write the option as the slurm.conf man page spells it, e.g. `MaxJobCount`",
        "https://slurm.schedmd.com/slurm.conf.html#SECTION_PARAMETERS", max_length=64),
    ValueKind(
        "slurm-value", r"[A-Za-z0-9_.,:/@%+=*()\[\]-]+",
        "a slurm.conf option value",
        "write one value without spaces, quotes or `#` (lists comma-separated, as slurm.conf wants them)",
        "https://slurm.schedmd.com/slurm.conf.html#SECTION_PARAMETERS", max_length=1024),
    ValueKind(
        "sha256", r"[0-9a-f]{64}",
        "a SHA-256 digest",
        "write the file's SHA-256 as 64 lower-case hex digits (`sha256sum FILE`)",
        "https://csrc.nist.gov/pubs/fips/180-4/upd1/final", max_length=64),
    ValueKind(
        "container-pin-file", r"(enroot|enroot\+caps)_[0-9][0-9.]*-1_(amd64|arm64)\.deb|pyxis-[0-9][0-9.]*\.tar\.gz",
        "an enroot package or pyxis tarball file name",
        "write the release file's name, e.g. `enroot_4.1.2-1_amd64.deb` or `pyxis-0.24.0.tar.gz`",
        "https://github.com/NVIDIA/enroot/blob/master/doc/installation.md", max_length=64),
    ValueKind(
        "slurm-time", r"UNLIMITED|INFINITE|\d+|\d+:\d{2}(:\d{2})?|\d+-\d+(:\d{2}(:\d{2})?)?",
        "a Slurm time limit",
        "write `UNLIMITED`, minutes (`90`), `HH:MM:SS` or `D-HH[:MM[:SS]]`",
        "https://slurm.schedmd.com/slurm.conf.html#OPT_MaxTime", max_length=16),
    ValueKind(
        "image-ref", r"(/|(https?|file)://)[A-Za-z0-9._~:/?#\[\]@!&()*+,;=%-]*",
        "an image path or URL",
        "write an absolute path or an http(s) URL, with special characters percent-encoded",
        "https://www.rfc-editor.org/rfc/rfc3986#section-2", max_length=2048),
    ValueKind(
        "text", r"[^\x00-\x08\x0b-\x1f\x7f]*",
        "free text",
        "remove control characters",
        "https://yaml.org/spec/1.2.2/#51-character-set", max_length=4096),
)}
"""Every kind of blueprint string by name. Each field of :mod:`blueprints.models` that holds a string names
one, or a pattern of its own (``tests/blueprints/test_value_kinds.py`` checks that no string is left without one)."""


def env_name(name: str) -> str:
    """``name`` when it is an environment variable name (kind ``env-name``); raises ``ValueError`` otherwise.
    For code that writes a name into a shell line (``export NAME=...``, ``mpirun -x NAME``): a name is not
    quoted there, so it is checked again where it is written."""
    if not re.fullmatch(KINDS["env-name"].pattern, name):
        raise ValueError(f"{name!r} is not an environment variable name")
    return name


def shell_export(name: str, value: str) -> str:
    """One ``export NAME=VALUE`` line of a POSIX shell file, newline included: the name checked
    (:func:`env_name`), the value one shell word (``shlex.quote``)."""
    return f"export {env_name(name)}={shlex.quote(value)}\n"
