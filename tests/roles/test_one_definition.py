"""One definition of a node file: what a cloud node gets in its user data is, byte for byte, what
Ansible's own template action writes from the same role task for the same settings.

Ansible runs for real (``ansible-playbook``, local connection) on a probe copy of each role whose
tasks are the role's template tasks for the shared files, copied verbatim (same ``src``, ``when``,
``mode`` and task ``vars``) with the destination moved under a per-case directory. The cases are
every node group of every example, on both cloud platforms (Debian and RedHat OS-family vars), and
generated variants (sysctls, hugepages, memlock off, kernel command lines, NCCL / libfabric
variables with shell-hostile values, gVisor). The set of files, their paths, modes and bytes must
match :func:`stacks.cloud_init.role_files`; then the cloud-config must carry exactly those files.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from blueprints import load_blueprint
from blueprints.role_templates import ROLES_DIR, template_task
from blueprints.settings import NodeSettings, node_settings
from clusterforge.ansible.render import ANSIBLE_CFG
from clusterforge.ansible.runner import ansible_path
from stacks.cloud_init import (
    SHARED_TEMPLATES,
    cloud_role_vars,
    placeholder_endpoints,
    render_cloud_config,
    role_files,
)
from tests.conftest import EXAMPLES

PLATFORMS = {"ubuntu": "Debian", "al2023": "RedHat"}
ROLES = sorted({r for r, _, _ in SHARED_TEMPLATES})


def _example_settings() -> list[tuple[str, NodeSettings]]:
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        bp = load_blueprint(path).blueprint
        out += [(f"{path.stem}-{g.name}", node_settings(bp, g)) for g in bp.node_groups]
    return out


def _variants(base: NodeSettings, n: int, seed: int = 9) -> list[tuple[str, NodeSettings]]:
    """Generated members of the kind: values a blueprint can produce, including hostile ones."""
    rnd = random.Random(seed)
    words = ["a b", "x=y", "'q'", '"dq"', "$HOME", "50%", "", "é", "1,2;3", "\\n"]
    out = []
    for i in range(n):
        sysctls = {f"net.core.clusterforge_{rnd.randint(0, 99)}": rnd.choice(["0", "1", "4096", "4096 87380 16777216"])
                   for _ in range(rnd.randint(0, 5))}
        env = {f"NCCL_{k}": rnd.choice(words) for k in rnd.sample(["IB_HCA", "DEBUG", "SOCKET_IFNAME", "ALGO"], rnd.randint(0, 4))}
        env |= {k: rnd.choice(words) for k in rnd.sample(["FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "LD_LIBRARY_PATH"],
                                                          rnd.randint(0, 3))}
        sandbox = base.sandbox.model_copy(update={"runtime": rnd.choice(["container", "gvisor", "kata"])})
        out.append((f"variant-{i}", base.model_copy(update={
            "sysctls": sysctls,
            "hugepages_2m": rnd.choice([0, 0, 512, 16384]),
            "memlock_unlimited": rnd.random() < 0.6,
            "kernel_cmdline": rnd.sample(["iommu=pt", "intel_iommu=on", "pci=realloc", "hugepagesz=2M"], rnd.randint(0, 3)),
            "nccl_env": env,
            "sandbox": sandbox,
        })))
    return out


def _cases() -> list[tuple[str, str, NodeSettings]]:
    settings = _example_settings()
    base = next(s for name, s in settings if name.startswith("aws-p5-efa-lustre"))
    cases = [(f"{name}-{platform}", platform, s) for name, s in settings for platform in PLATFORMS]
    # variants alternate between the platforms (the platform only picks the OS-family vars)
    return cases + [(f"{name}-{p}", p, s) for (name, s), p in zip(_variants(base, 8), list(PLATFORMS) * 4, strict=True)]


def _probe_role(role: str, dest: Path) -> None:
    """A copy of ``role`` (defaults, vars, templates) whose tasks are its shared template tasks,
    verbatim except that the destination sits under ``probe_root``."""
    shutil.copytree(ROLES_DIR / role, dest, ignore=shutil.ignore_patterns("tasks", "handlers", "meta"))
    tasks: list[dict[str, Any]] = [
        {"name": "Load the OS-family variables.",
         "ansible.builtin.include_vars": "{{ role_path }}/vars/{{ probe_os_family }}.yml",
         "when": "(role_path ~ '/vars/' ~ probe_os_family ~ '.yml') is file"},
    ]
    templates: list[dict[str, Any]] = []
    facts: list[str] = []
    for i, (r, template, platforms) in enumerate(SHARED_TEMPLATES):
        if r != role:
            continue
        task = dict(template_task(role, template))
        task.pop("notify", None)
        when = task.get("when", [])
        # the task runs for the platforms it is shared on, under its own condition
        task["when"] = [f"probe_platform in {list(platforms)}", *(when if isinstance(when, list) else [when])]
        args = dict(task.pop("ansible.builtin.template", None) or task.pop("template"))
        fact = f"probe_dest_{i}"
        facts.append(fact)
        tasks.append({"name": f"Destination of {template}.", "when": task["when"][0],
                      "ansible.builtin.set_fact": {fact: "{{ probe_root }}" + str(args["dest"])}})
        templates.append({**task, "ansible.builtin.template": {**args, "dest": "{{ " + fact + " }}"}})
    # one mkdir for the role's destination directories (a `file` task per template ran a module per file)
    dirs = "[" + ", ".join(f"{f} | default('')" for f in facts) + "] | select | map('dirname') | unique"
    tasks.append({"name": "Directories of the destinations.", "changed_when": False,
                  "ansible.builtin.command": {"argv": "{{ ['mkdir', '-p'] + (" + dirs + ") }}"}})
    tasks += templates
    (dest / "tasks").mkdir()
    (dest / "tasks" / "main.yml").write_text(yaml.safe_dump(tasks, sort_keys=False))
    # the roles' encoding filters come from clusterforge_common, as every real role depends on it
    (dest / "meta").mkdir()
    (dest / "meta" / "main.yml").write_text(yaml.safe_dump({"dependencies": ["clusterforge_common"]}))


@pytest.fixture(scope="module")
def ansible_wrote(tmp_path_factory) -> tuple[dict[str, Path], list[tuple[str, str, NodeSettings]]]:
    """Run Ansible once over every case; returns each case's output directory and the cases.

    Cases whose role variables and platform are the same (the three AWS P5 examples' GPU group, the L40S example's
    controller and login groups) are one host: Ansible would write the same files from the same variables, so
    they share its output."""
    tmp = tmp_path_factory.mktemp("one-definition")
    cases = _cases()
    for role in ROLES:
        _probe_role(role, tmp / "roles" / f"probe_{role}")
    shutil.copytree(ROLES_DIR / "clusterforge_common", tmp / "roles" / "clusterforge_common")
    hosts: dict[str, dict[str, Any]] = {}
    seen: dict[str, str] = {}
    dirs: dict[str, Path] = {}
    for name, platform, s in cases:
        hv: dict[str, Any] = {"probe_os_family": PLATFORMS[platform], "probe_platform": platform}
        for role in ROLES:
            hv.update(cloud_role_vars(s, role, placeholder_endpoints(s)))
        host = seen.setdefault(json.dumps(hv, sort_keys=True, default=str), name)
        dirs[name] = tmp / "out" / host
        if host == name:
            hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                           "probe_root": str(dirs[name]), **hv}
    assert len(hosts) < len(cases), "the shared-output rule above is exercised"
    # JSON is YAML: values reach Ansible with their types, strings untouched.
    (tmp / "inventory.yml").write_text(json.dumps({"all": {"hosts": hosts}}))
    (tmp / "site.yml").write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False,
        "roles": [f"probe_{r}" for r in ROLES],
    }]))
    cfg = tmp / "ansible.cfg"
    cfg.write_text(ANSIBLE_CFG.replace("forks = 50", "forks = 8"))
    env = {**os.environ, "ANSIBLE_CONFIG": str(cfg), "ANSIBLE_ROLES_PATH": str(tmp / "roles"),
           "ANSIBLE_NOCOLOR": "1", "PATH": ansible_path()}
    res = subprocess.run(["ansible-playbook", "-i", "inventory.yml", "site.yml"], cwd=tmp, env=env,
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    return dirs, cases


def _written(root: Path) -> dict[str, tuple[str, bytes]]:
    out = {}
    for p in sorted(root.rglob("*")) if root.is_dir() else []:
        if p.is_file():
            out["/" + str(p.relative_to(root))] = (f"{stat.S_IMODE(p.stat().st_mode):04o}", p.read_bytes())
    return out


def test_cloud_files_are_what_the_role_writes(ansible_wrote) -> None:
    dirs, cases = ansible_wrote
    assert len(cases) >= 20
    for name, platform, s in cases:
        by_ansible = _written(dirs[name])
        ours = {f.path: (f.mode, f.content.encode()) for f in role_files(s, platform)}
        assert sorted(ours) == sorted(by_ansible), f"{name}: the role writes {sorted(by_ansible)}, the cloud path {sorted(ours)}"
        for path, (mode, content) in ours.items():
            assert by_ansible[path][1] == content, f"{name}: {path} differs from the role's rendering"
            assert by_ansible[path][0] == mode, f"{name}: {path} mode"


def test_the_cases_exercise_every_shared_file_and_condition(ansible_wrote) -> None:
    """Guards the test above against vacuity: every shared file is written for some case and left
    out for another where its role has a condition, on both platforms."""
    dirs, cases = ansible_wrote
    seen: dict[str, set[bool]] = {}
    for name, _platform, _s in cases:
        written = set(_written(dirs[name]))
        for path in ("/etc/sysctl.d/90-clusterforge.conf", "/etc/security/limits.d/90-clusterforge-memlock.conf",
                     "/etc/default/grub.d/90-clusterforge.cfg", "/etc/nccl.conf", "/etc/containerd/runsc.toml",
                     "/usr/local/sbin/clusterforge-lustre-mounts", "/usr/local/sbin/clusterforge-nvme-scratch"):
            seen.setdefault(path, set()).add(path in written)
    assert seen.pop("/etc/sysctl.d/90-clusterforge.conf") == {True}
    assert all(v == {True, False} for v in seen.values()), seen


@pytest.mark.parametrize("platform", list(PLATFORMS))
def test_user_data_carries_exactly_the_role_files(platform: str) -> None:
    for name, s in _example_settings() + _variants(_example_settings()[0][1], 4):
        doc = yaml.safe_load(render_cloud_config(s, placeholder_endpoints(s), platform=platform))  # type: ignore[arg-type]
        files = {f["path"]: f for f in doc["write_files"]}
        for f in role_files(s, platform):  # type: ignore[arg-type]
            assert files[f.path]["content"] == f.content, f"{name}: {f.path}"
            assert files[f.path]["permissions"] == f.mode
