"""First boot of a Slurm node on EC2: what a node of a ``orchestrator: slurm`` cluster gets besides the other roles'
files, rendered from :attr:`blueprints.settings.NodeSettings.slurm`.

Two channels, because EC2 caps user data at 16 KB (:data:`stacks.cloud_init.USER_DATA_LIMIT_BYTES`) and a p5 node's
user data is already 9 KB compressed before Slurm: the Slurm role files alone (the health check, prolog/epilog,
slurmd's unit drop-in) add 11 KB compressed.

* **The node's file bundle** (:func:`slurm_bundle`): one JSON document per node group, ``{"files": [{"path", "mode",
  "content"}]}``, stored by the stack as an object of the cluster's private, encrypted bucket and fetched at first
  boot with the instance role (``clusterforge-slurm-aws fetch-bundle``), its SHA-256 pinned in the user data. It holds
  the cluster's Slurm files as ``clusterforge render`` writes them (``NodeSettings.slurm.files``; ``slurmdbd.conf``
  without a password) and the files the Slurm roles write, each rendered from the role's own task (one definition
  for both targets): the slurm_node role's ``/etc/default/slurmd`` and unit drop-in (configless ``--conf-server``,
  ``Delegate=yes``, the bounded wait for the GPU device files), its device-wait program, health check and its
  expectations, prolog / epilog runners and their ``.d`` scripts; the slurm_dbd role's MariaDB settings, database
  script and boot unit; the munge role's key tool. No secret is ever in it.
* **The user data** (:func:`slurm_script`): ``clusterforge-slurm-aws`` (stdlib Python: IMDSv2, SigV4, S3 and
  Secrets Manager) and one ordered script. Every node: the hostname from its instance tag (:data:`NODE_NAME_TAG`),
  the cluster's private zone as DNS search domain (so ``controller-0`` resolves: slurm.conf's
  ``AccountingStorageHost`` and the configless server are short names), the bundle, the packages (daemons held back
  by ``policy-rc.d`` until key and files are in place), the munge key from the cluster's secret. The controller first
  mounts its persistent state volume (``/var/spool/slurmctld`` and MariaDB's data directory), then starts munge,
  MariaDB, slurmdbd (after appending the generated database password to ``slurmdbd.conf``, as the slurm_dbd role
  does), registers the cluster and starts slurmctld; compute nodes start munge and slurmd, whose drop-in waits for
  the GPU device files.

Sources: instance tags in IMDS https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/work-with-tags-in-IMDS.html ;
NVMe EBS device names https://docs.aws.amazon.com/ebs/latest/userguide/identify-nvme-ebs-device.html ;
Slurm configless https://slurm.schedmd.com/configless_slurm.html ; policy-rc.d
https://people.debian.org/~hmh/invokerc.d-policyrc.d-specification.txt .
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from blueprints.role_templates import ROLES_DIR, RoleFile, each_task, render_role_template, role_file
from blueprints.role_vars import node_role_vars
from blueprints.settings import NodeSettings
from blueprints.slurm import aws_dns_zone

from .pkg_shell import PKG_INSTALL as _PKG

ENROOT_PYXIS = "/usr/local/sbin/clusterforge-enroot-pyxis"
"""The enroot_pyxis role's install script (its ``configure.yml`` writes it there; cloud nodes run the same one)."""
ENROOT_CONF = "/etc/enroot/enroot.conf"
NCCL_STACK = "/usr/local/sbin/clusterforge-nccl-stack"
"""The nccl_stack role's install script (its ``configure.yml`` writes it there; cloud nodes run the same one)."""

__all__ = [
    "AWS_HELPER",
    "BUNDLE_KEY",
    "KEY_TOOL",
    "NODE_NAME_TAG",
    "STATE_DEVICE",
    "STATE_MOUNT",
    "SlurmBoot",
    "bundle_key",
    "placeholder_boot",
    "sizing_boot",
    "slurm_bundle",
    "slurm_bundle_files",
    "slurm_script",
]

NODE_NAME_TAG = "clusterforge:slurm-node"
"""Instance tag holding the node's Slurm ``NodeName`` (``<group>-<i>``, :func:`blueprints.slurm.slurm_settings`); its
key uses only the characters IMDS serves tags with (letters, digits, ``+ - = . , _ : @``)."""

AWS_HELPER = "/usr/local/sbin/clusterforge-slurm-aws"
KEY_TOOL = "/usr/local/lib/clusterforge/munge-key.py"
"""Where the munge role's key tool (``roles/munge/files/munge-key.py``) lands on a cloud node."""
STATE_MOUNT = "/var/lib/clusterforge/slurm-state"
"""Mount point of the controller's persistent state volume; ``slurmctld/`` and ``mysql/`` below it are bound on
``/var/spool/slurmctld`` (StateSaveLocation) and ``/var/lib/mysql``."""
STATE_DEVICE = "/dev/sdf"
"""Device name the state volume is attached under (on Nitro instances it appears as an NVMe device whose serial is the
volume id, ``/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol...``)."""
DBD_BASE = "/etc/clusterforge/slurmdbd.conf.base"
"""``slurmdbd.conf`` as rendered (no ``StoragePass``); the boot script appends the password into ``/etc/slurm``."""
BUNDLE_KEY = "slurm/{group}.json"

_HELPER_SOURCE = Path(__file__).resolve().parent / "files" / "clusterforge-slurm-aws.py"


@dataclass(frozen=True)
class SlurmBoot:
    """Deploy-time values of a Slurm node's user data: ``munge_secret_arn`` (the cluster's munge key secret, never its
    value), ``bundle_url`` (``https://<bucket>.s3.<region>.amazonaws.com/slurm/<group>.json``) and the controller's
    ``state_volume_id`` (``None`` for other groups)."""

    munge_secret_arn: str
    bundle_url: str
    state_volume_id: str | None = None


def bundle_key(group: str) -> str:
    """The bucket key of a node group's file bundle."""
    return BUNDLE_KEY.format(group=group)


def placeholder_boot(settings: NodeSettings, region: str = "REGION") -> SlurmBoot:
    """Readable stand-ins for the values known only after deploy (``clusterforge render``)."""
    return SlurmBoot("MUNGE_SECRET_ARN", f"https://BUCKET.s3.{region}.amazonaws.com/{bundle_key(settings.group)}",
                     "STATE_VOLUME_ID" if settings.slurm is not None and settings.slurm.part == "controller" else None)


def sizing_boot(settings: NodeSettings, region: str = "us-east-1") -> SlurmBoot:
    """Stand-ins with the length of the real values, for sizing user data before deploy: a Secrets Manager ARN with
    the 6-character suffix AWS appends, a bucket name of Pulumi's auto-naming length, a ``vol-`` id of 17 hex digits."""
    bucket = f"{settings.blueprint}-slurm-files-{'0' * 7}"
    return SlurmBoot(f"arn:aws:secretsmanager:{region}:{'0' * 12}:secret:{settings.blueprint}-munge-{'0' * 7}-AbCdEf",
                     f"https://{bucket}.s3.{region}.amazonaws.com/{bundle_key(settings.group)}",
                     f"vol-{'0' * 17}" if settings.slurm is not None and settings.slurm.part == "controller" else None)


# ---------------------------------------------------------------------------------------------
# the bundle: files rendered from the roles' own tasks
# ---------------------------------------------------------------------------------------------

@cache
def _role_tasks(role: str) -> tuple[dict[str, Any], ...]:
    from blueprints.datacache import parse_yaml

    out: list[dict[str, Any]] = []
    for path in sorted((ROLES_DIR / role / "tasks").glob("*.yml")):
        out += list(each_task(parse_yaml(path.read_bytes())))
    return tuple(out)


def _role_facts(role: str) -> dict[str, str]:
    """The role's internal facts that are plain strings (``set_fact`` values without a template), e.g. the slurmd
    drop-in's path: what a template task's ``dest`` may name."""
    out: dict[str, str] = {}
    for task in _role_tasks(role):
        facts = task.get("ansible.builtin.set_fact") or task.get("set_fact") or {}
        for k, v in facts.items() if isinstance(facts, dict) else ():
            if isinstance(v, str) and "{{" not in v and "{%" not in v:
                out[k] = v
    return out


def _copied(role: str, src: str) -> RoleFile:
    """The file a role's ``ansible.builtin.copy`` task with ``src`` writes: its ``dest`` and ``mode`` from the task,
    the bytes of ``roles/<role>/files/<src>``."""
    for task in _role_tasks(role):
        args = task.get("ansible.builtin.copy") or task.get("copy")
        if isinstance(args, dict) and args.get("src") == src:
            return RoleFile(str(args["dest"]), str(args.get("mode", "0644")),
                            (ROLES_DIR / role / "files" / src).read_text())
    raise KeyError(f"roles/{role}: no copy task for {src}")


def _templated(role: str, template: str, variables: dict[str, Any]) -> RoleFile | None:
    return role_file(role, template, {**variables, **_role_facts(role)})


def _hooks(variables: dict[str, Any]) -> list[RoleFile]:
    """The slurm_node role's prolog / epilog runners (``/etc/slurm/{prolog,epilog}.sh``) and every template of its
    ``templates/prolog.d`` and ``templates/epilog.d`` (written to ``/etc/slurm/<dir>/<name>`` without ``.j2``), all
    0755: the role's two looped template tasks ("Write the prolog and epilog runners", "Write the prolog.d and
    epilog.d scripts")."""
    out = [RoleFile(f"/etc/slurm/{item}.sh", "0755", render_role_template("slurm_node", f"{item}.sh.j2", variables))
           for item in ("prolog", "epilog")]
    for d in ("prolog.d", "epilog.d"):
        for t in sorted((ROLES_DIR / "slurm_node" / "templates" / d).glob("*")):
            out.append(RoleFile(f"/etc/slurm/{d}/{t.name.removesuffix('.j2')}", "0755",
                                render_role_template("slurm_node", f"{d}/{t.name}", variables)))
    return out


def slurm_bundle_files(settings: NodeSettings) -> list[RoleFile]:
    """Every file of a Slurm node group's bundle (see the module docstring), in a fixed order; ``[]`` for a group
    that has no part in a Slurm cluster."""
    sl = settings.slurm
    if sl is None:
        return []
    out = [RoleFile(p, "0644", t) for p, t in sl.files.items()]
    out.append(RoleFile(KEY_TOOL, "0755", _copied_text("munge", "munge-key.py")))
    if sl.part == "controller" and sl.dbd_conf is not None:
        out.append(RoleFile(DBD_BASE, "0600", sl.dbd_conf))
        v = node_role_vars(settings, "slurm_dbd")
        out += [f for t in ("mariadb-slurmdbd.cnf.j2", "slurmdbd-db.sh.j2", "slurmdbd-db.service.j2")
                if (f := _templated("slurm_dbd", t, v)) is not None]
    if sl.part == "node":
        v = node_role_vars(settings, "slurm_node")
        out += [f for t in ("slurmd-default.j2", "slurmd-dropin.conf.j2") if (f := _templated("slurm_node", t, v))]
        out += [_copied("slurm_node", "clusterforge-wait-devices"), _copied("slurm_node", "clusterforge-slurm-health")]
        # the role's "Write the health check's expectations" (to_nice_json(indent=2, sort_keys=True) and a newline)
        out.append(RoleFile("/etc/clusterforge/slurm-health.json", "0644",
                            json.dumps(sl.health, indent=2, sort_keys=True, separators=(",", ": ")) + "\n"))
        out += _hooks(v)
    if sl.pyxis:  # the enroot_pyxis role's install script and enroot.conf (the role's configure tasks)
        ev = node_role_vars(settings, "enroot_pyxis")
        out += [f for t in ("enroot-pyxis.sh.j2",) if (f := _templated("enroot_pyxis", t, ev)) is not None]
        out.append(RoleFile(ENROOT_CONF, "0644", sl.enroot_conf))
    if settings.nccl_stack is not None:  # the nccl_stack role's install script (too large for the user data beside Slurm's)
        nv = node_role_vars(settings, "nccl_stack")
        out += [f for t in ("nccl-stack.sh.j2",) if (f := _templated("nccl_stack", t, nv)) is not None]
    return out


def _copied_text(role: str, name: str) -> str:
    return (ROLES_DIR / role / "files" / name).read_text()


def slurm_bundle(settings: NodeSettings) -> str | None:
    """The bundle document of ``settings``'s group (deterministic JSON text), ``None`` without Slurm."""
    if settings.slurm is None:
        return None
    files = [{"path": f.path, "mode": f.mode, "content": f.content} for f in slurm_bundle_files(settings)]
    return json.dumps({"group": settings.group, "files": files}, indent=1, sort_keys=True) + "\n"


def bundle_sha256(settings: NodeSettings) -> str:
    """SHA-256 of :func:`slurm_bundle` (pinned in the user data)."""
    text = slurm_bundle(settings)
    if text is None:
        raise ValueError(f"node group `{settings.group}` has no part in a Slurm cluster")
    return hashlib.sha256(text.encode()).hexdigest()


def helper_source() -> str:
    """The text of ``clusterforge-slurm-aws`` (``stacks/files/clusterforge-slurm-aws.py``)."""
    return _HELPER_SOURCE.read_text()


# ---------------------------------------------------------------------------------------------
# the boot script
# ---------------------------------------------------------------------------------------------

def _state_steps(volume_id: str, local_database: bool) -> str:
    q = shlex.quote
    binds = "slurmctld:/var/spool/slurmctld" + (" mysql:/var/lib/mysql" if local_database else "")
    return f"""# --- the controller's persistent state volume (kept when the instance is replaced) -------------------------
VOL={q(volume_id)}; STATE={STATE_MOUNT}; BYID=${{BYID:-/dev/disk/by-id}}; FSTAB=${{FSTAB:-/etc/fstab}}
DEV=""
for _ in $(seq "${{STATE_WAIT_TRIES:-120}}"); do  # attached by the stack once the instance runs
  for d in "$BYID/nvme-Amazon_Elastic_Block_Store_${{VOL//-/}}" {STATE_DEVICE} /dev/xvdf; do
    if [ -b "$d" ]; then DEV=$d; break 2; fi
  done
  sleep "${{STATE_WAIT_S:-5}}"
done
[ -n "$DEV" ] || {{ log "ERROR: state volume $VOL is not attached (see the stack's VolumeAttachment); slurmctld not started"; exit 1; }}
blkid "$DEV" >/dev/null 2>&1 || mkfs.ext4 -q -L cf-slurm-state "$DEV"  # a blank volume only, never over data
UUID=$(blkid -s UUID -o value "$DEV")
mkdir -p "$STATE"
grep -qs " $STATE " "$FSTAB" || echo "UUID=$UUID $STATE ext4 defaults,nofail,x-systemd.device-timeout=300 0 2" >> "$FSTAB"
mountpoint -q "$STATE" || mount "$STATE"
for pair in {binds}; do
  src=$STATE/${{pair%%:*}}; dst=${{pair#*:}}
  mkdir -p "$src" "$dst"
  grep -qs " $dst none bind" "$FSTAB" || echo "$src $dst none bind,nofail,x-systemd.requires-mounts-for=$STATE 0 0" >> "$FSTAB"
  mountpoint -q "$dst" || mount --bind "$src" "$dst"
done
"""


def _packages(settings: NodeSettings) -> list[str]:
    sl = settings.slurm
    assert sl is not None
    pk = sl.packages
    names = list(pk["munge"])
    if sl.part == "controller":
        names += list(pk["controller"])
        if sl.accounting:
            names += list(pk["dbd"]) + (list(pk["database"]) if sl.local_database else [])
    else:
        names += list(pk["node" if sl.part == "node" else "login"])
        if sl.pyxis:
            names += list(pk["pyxis_build"])
    return list(dict.fromkeys(names))


def slurm_script(settings: NodeSettings, boot: SlurmBoot) -> str:
    """The first-boot script of a Slurm node group (run from ``runcmd``, after the other clusterforge steps): see the
    module docstring for the order. Raises ``ValueError`` for a group without Slurm or a controller without its state
    volume."""

    sl = settings.slurm
    if sl is None:
        raise ValueError(f"node group `{settings.group}` has no part in a Slurm cluster")
    q = shlex.quote
    zone = aws_dns_zone(settings.blueprint)
    head = f"""#!/bin/bash
# clusterforge: Slurm {sl.part} of cluster `{sl.cluster_name}` (Slurm {sl.version}), node group `{settings.group}`:
# name from the instance tag, files from the bundle, packages, munge key, then the daemons in order.
set -euo pipefail
AWS={AWS_HELPER}; KEYTOOL={KEY_TOOL}
log() {{ echo "clusterforge-slurm: $*" >&2; }}
{_PKG}# --- who this node is: the Slurm NodeName of its instance tag; short names resolve in the cluster's private zone
python3 "$AWS" hostname {NODE_NAME_TAG}
mkdir -p /etc/systemd/resolved.conf.d
printf '[Resolve]\\nDomains=%s\\n' {q(zone)} > /etc/systemd/resolved.conf.d/90-clusterforge-slurm.conf
systemctl try-restart systemd-resolved.service || true
# --- the node's files (bundle pinned by its SHA-256) ----------------------------------------------------------------
python3 "$AWS" fetch-bundle {q(boot.bundle_url)} {bundle_sha256(settings)}
"""
    body = ""
    if sl.part == "controller":
        if boot.state_volume_id is None:
            raise ValueError(f"controller group `{settings.group}` needs its state volume")
        body += _state_steps(boot.state_volume_id, sl.local_database)
    body += f"""# --- packages: their daemons start below, once key and files are in place --------------------------------------
held=""
if [ ! -e /usr/sbin/policy-rc.d ]; then  # one that was there already stays, untouched
  printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d && held=1
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
pkg_install {" ".join(q(p) for p in _packages(settings))}
if [ -n "$held" ]; then rm -f /usr/sbin/policy-rc.d; trap - EXIT; fi
# --- the cluster's munge key: the secret's value (the controller makes it once); never printed -------------------
python3 "$AWS" munge-key {"controller" if sl.part == "controller" else "node"} {q(boot.munge_secret_arn)} "$KEYTOOL"
systemctl enable munge.service && systemctl restart munge.service
install -d -o slurm -g slurm -m 0755 /var/log/slurm
systemctl daemon-reload
"""
    if sl.part == "controller":
        body += "install -d -o slurm -g slurm -m 0700 /var/spool/slurmctld\n"
        if sl.accounting:
            pw = q(sl.password_file)
            if sl.local_database:
                body += f"""# slurmdbd's database password: generated once here (0600 root), as the slurm_dbd role does
[ -s {pw} ] || (umask 077; python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > {pw})
chmod 0600 {pw}
"""
            else:
                body += f"""[ -s {pw} ] || {{ log "ERROR: {sl.password_file} (the external database's password) is missing: put it there from your secret store"; exit 1; }}
"""
            body += f"""(umask 077; {{ cat {DBD_BASE}; printf 'StoragePass=%s\\n' "$(head -n 1 {pw})"; }} > /etc/slurm/slurmdbd.conf.new)
chown slurm:slurm /etc/slurm/slurmdbd.conf.new && mv -f /etc/slurm/slurmdbd.conf.new /etc/slurm/slurmdbd.conf
"""
            if sl.local_database:
                body += ("systemctl enable --now mariadb.service\n"
                         "systemctl enable --now clusterforge-slurmdbd-db.service  # the slurm_dbd role's database unit\n")
            body += f"""systemctl enable --now slurmdbd.service
# slurmctld registers with slurmdbd when it starts: the cluster must be known there first
for _ in $(seq 30); do
  if sacctmgr --noheader --parsable2 list cluster {q(sl.cluster_name)} format=cluster 2>/dev/null | grep -qx {q(sl.cluster_name)}; then break; fi
  sacctmgr --immediate add cluster {q(sl.cluster_name)} >/dev/null 2>&1 || sleep 2
done
"""
        body += "systemctl enable slurmctld.service && systemctl restart slurmctld.service\n"
    if sl.pyxis:
        body += f"""# enroot from its pinned release packages, pyxis built against this node's Slurm (the enroot_pyxis role's script)
{ENROOT_PYXIS} && {ENROOT_PYXIS} --dirs
"""
    if settings.nccl_stack is not None:
        body += f"""# pinned NCCL, nccl-tests built against it, the PyTorch venv (the nccl_stack role's script): before slurmd takes jobs
{NCCL_STACK}
"""
    if sl.part == "node":
        body += """install -d -m 0755 /var/spool/slurmd
# slurmd's drop-in (the slurm_node role's) waits for the GPU device files before it starts
systemctl enable slurmd.service && systemctl restart slurmd.service
"""
    return head + body + f'log "Slurm {sl.part} ready"\n'
