"""Every role keeps the same contract (style.md section 4, conventions 10): prefixed defaults mirrored by
``meta/argument_specs.yml``, preflight -> install-<os_family> -> configure with phase tags, full module
names, task names as sentences, reboots behind ``<role>_skip_reboot`` (the driver's behind a defer switch, on by
default); ``site.yml`` runs every role.
And ``ansible-lint --profile production`` is clean.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from blueprints.role_templates import each_task
from clusterforge.ansible.render import ROLE_ORDER, ROLES_DIR

TASK_KEYWORDS = {
    "name", "when", "loop", "loop_control", "register", "tags", "notify", "vars", "become", "become_user",
    "changed_when", "failed_when", "check_mode", "ignore_errors", "no_log", "delegate_to", "run_once", "until",
    "retries", "delay", "environment", "args", "block", "rescue", "always", "listen", "diff", "throttle",
    "any_errors_fatal", "with_items", "timeout",
}


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


SUPPORT_ROLE = "clusterforge_common"
"""The one role that is not run on its own: no tasks, a library of modules the other roles share."""
SHARED_MODULES = {p.stem for p in (ROLES_DIR / SUPPORT_ROLE / "library").glob("*.py")}
"""The support role's modules, called by their short name (their canonical name for ansible-lint's fqcn rule)."""


def test_roles_directory_holds_exactly_the_rendered_roles():
    found = sorted(p.name for p in ROLES_DIR.iterdir() if p.is_dir())
    assert found == sorted([*ROLE_ORDER, SUPPORT_ROLE])
    facts, *plays = _load(ROLES_DIR / "site.yml")
    assert facts["hosts"] == "all" and facts["tasks"] == [] and "roles" not in facts  # gathers facts, nothing else
    assert [p["hosts"] for p in plays] == [f"with_{r}" for r in ROLE_ORDER]
    assert [p["roles"][0]["role"] for p in plays] == list(ROLE_ORDER)
    assert all(p["roles"][0]["tags"] == [p["roles"][0]["role"]] for p in plays)
    # one definition of what is gathered: a role's play sets no gathering of its own
    assert all("gather_subset" not in p and "gather_facts" not in p for p in plays)


FACT_NAME = re.compile(r"ansible_facts\[['\"](\w+)['\"]\]|ansible_facts\.(\w+)")


def test_every_fact_the_roles_read_is_gathered(tmp_path):
    """site.yml's first play gathers a subset of the facts: every `ansible_facts[...]` a role reads (tasks,
    templates, variables) must be in what Ansible's own setup module returns for that subset."""
    read = set()
    for path in ROLES_DIR.rglob("*"):
        if path.is_file() and path.suffix in (".yml", ".yaml", ".j2"):
            read |= {a or b for a, b in FACT_NAME.findall(path.read_text())}
    assert {"os_family", "distribution", "is_chroot"} <= read  # the scan finds what the roles are known to read
    subset = _load(ROLES_DIR / "site.yml")[0]["gather_subset"]
    from clusterforge.ansible.runner import ansible_path

    env = {"PATH": ansible_path(), "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path)}
    out = subprocess.run(["ansible", "localhost", "-m", "ansible.builtin.setup", "-a",
                          f"gather_subset={','.join(subset)}", "-o"], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout
    gathered = {k.removeprefix("ansible_") for k in json.loads(out.split(" => ", 1)[1])["ansible_facts"]}
    assert read <= gathered, f"facts the roles read but site.yml does not gather: {sorted(read - gathered)}"


@pytest.mark.parametrize("role", ROLE_ORDER)
def test_defaults_and_argument_specs_agree(role):
    defaults = _load(ROLES_DIR / role / "defaults/main.yml")
    spec = _load(ROLES_DIR / role / "meta/argument_specs.yml")["argument_specs"]["main"]
    options = spec["options"]
    assert spec.get("short_description")
    assert set(defaults) == set(options), (f"only in defaults: {sorted(set(defaults) - set(options))}; "
                                           f"only in argument_specs: {sorted(set(options) - set(defaults))}")
    for name, value in defaults.items():
        assert name.startswith(f"{role}_"), f"{name} lacks the {role}_ prefix"
        opt = options[name]
        assert opt.get("description"), f"{name}: no description"
        assert opt.get("default") == value, f"{name}: argument_specs default {opt.get('default')!r} != {value!r}"
        kind = {"bool": bool, "int": int, "str": str, "path": str, "list": list, "dict": dict}[opt["type"]]
        assert isinstance(value, kind), f"{name}: default {value!r} is not {opt['type']}"
        if "choices" in opt:
            assert value in opt["choices"], f"{name}: default {value!r} not in choices"


@pytest.mark.parametrize("role", ROLE_ORDER)
def test_role_layout_phases_and_tasks(role):
    d = ROLES_DIR / role
    meta = _load(d / "meta/main.yml")
    assert meta["galaxy_info"]["role_name"] == role
    platforms = {p["name"]: p["versions"] for p in meta["galaxy_info"]["platforms"]}
    assert platforms["Debian"] == ["bookworm"] and set(platforms["Ubuntu"]) == {"jammy", "noble"}
    main = _load(d / "tasks/main.yml")
    assert [t.get("ansible.builtin.import_tasks") for t in main if "ansible.builtin.import_tasks" in t] == [
        "preflight.yml", "configure.yml"]
    install = next(t for t in main if "ansible.builtin.include_tasks" in t)
    assert install["ansible.builtin.include_tasks"]["file"] == "install-{{ ansible_facts['os_family'] }}.yml"
    assert install["ansible.builtin.include_tasks"]["apply"]["tags"] == [f"{role}_install"]
    assert set(main[0]["tags"]) == {f"{role}_preflight", f"{role}_install", f"{role}_configure"}
    assert main[-1]["tags"] == [f"{role}_configure"]
    # only the OS families the converge tests exercise are claimed (Debian and Ubuntu)
    assert (d / "tasks/install-Debian.yml").is_file()
    assert not (d / "tasks/install-RedHat.yml").exists(), "RHEL-family hosts are not converged, so not claimed"
    assert "EL" not in platforms
    defaults = _load(d / "defaults/main.yml")
    for path in [*(d / "tasks").glob("*.yml"), *(d / "handlers").glob("*.yml")]:
        for t in each_task(_load(path)):
            name = t.get("name", "")
            assert name and name[0].isupper() and name.endswith("."), f"{path.name}: task name not a sentence: {name!r}"
            modules = [k for k in t if k not in TASK_KEYWORDS]
            assert len(modules) <= 1, f"{path.name}: {name}: {modules}"
            for m in modules:
                if m in SHARED_MODULES:
                    continue
                assert m.count(".") >= 2, f"{path.name}: {name}: module {m} is not a full name"
                if m == "ansible.builtin.reboot" and role == "nvidia_driver":
                    # a new driver needs a reboot (NVML driver/library mismatch until then): on by default,
                    # with a switch to defer it; never inside an image
                    assert "not nvidia_driver_defer_reboot" in str(t.get("when")), name
                    assert "not __nvidia_driver_image_mode" in str(t.get("when")), name
                    assert defaults["nvidia_driver_defer_reboot"] is False
                elif m == "ansible.builtin.reboot":
                    assert f"not {role}_skip_reboot" in str(t.get("when")), f"{name}: reboot not behind {role}_skip_reboot"
                    assert defaults[f"{role}_skip_reboot"] is True


def test_feature_sections_are_included_with_their_phase_tags():
    """A section only some clusters use (DOCA-OFED, RoCE QoS, opensm, IPoIB, IMEX, LNet discovery ...) is a file of
    its own behind one ``include_tasks`` with the feature's condition (roles/README.md, "Reruns"). Tags on an ``include_tasks`` reach only the include
    itself, so each carries ``apply: tags`` of the phase it sits in (``--tags rdma_configure`` must still run RoCE
    QoS); its file exists and is included from exactly one place."""
    phase = {"preflight.yml": ["preflight", "install", "configure"], "configure.yml": ["configure"]}
    seen: dict[Path, int] = {}
    for role in ROLE_ORDER:
        tasks = ROLES_DIR / role / "tasks"
        for path in sorted(tasks.glob("*.yml")):
            if path.name == "main.yml":
                continue
            for t in each_task(_load(path)):
                inc = t.get("ansible.builtin.include_tasks")
                if inc is None:
                    continue
                target = tasks / inc["file"]
                assert target.is_file(), f"{role}/{path.name}: {t['name']} includes a missing {inc['file']}"
                seen[target] = seen.get(target, 0) + 1
                want = [f"{role}_{x}" for x in phase.get(path.name, ["install"])]
                assert inc.get("apply", {}).get("tags") == want, f"{role}/{path.name}: {t['name']}: apply tags {want}"
                assert t.get("when"), f"{role}/{path.name}: {t['name']} is included without the feature's condition"
    assert {str(k.relative_to(ROLES_DIR)) for k in seen} >= {
        "rdma/tasks/preflight-doca-ofed.yml", "rdma/tasks/doca-ofed-Debian.yml", "rdma/tasks/roce-qos.yml",
        "rdma/tasks/roce-gid-index.yml", "rdma/tasks/nvidia-peermem.yml", "rdma/tasks/opensm.yml", "rdma/tasks/ipoib.yml",
        "nvidia_driver/tasks/imex.yml", "lustre_client/tasks/lnet-discovery.yml", "lustre_client/tasks/tuning.yml"}
    assert set(seen.values()) == {1}


def test_shared_modules_come_from_the_support_role():
    """A role that calls a module of the support role depends on it (so Ansible loads its library wherever the
    role runs); the support role runs nothing itself."""
    support = ROLES_DIR / SUPPORT_ROLE
    assert not (support / "tasks").exists() and not (support / "defaults").exists()
    assert SHARED_MODULES == {"clusterforge_file_probe", "clusterforge_package_probe"}
    users = set()
    for role in ROLE_ORDER:
        used = {m for path in (ROLES_DIR / role / "tasks").glob("*.yml") for t in each_task(_load(path)) for m in t
                if m in SHARED_MODULES}
        deps = [d["role"] if isinstance(d, dict) else d for d in _load(ROLES_DIR / role / "meta/main.yml")["dependencies"]]
        assert bool(used) == (SUPPORT_ROLE in deps), f"{role}: uses {sorted(used)}, depends on {deps}"
        if used:
            users.add(role)
    assert len(users) >= 6


def test_roles_read_packages_only_through_the_package_probe():
    """The installed-package check is defined once (clusterforge_package_probe, tests/roles/test_package_probe.py):
    no role task runs dpkg-query itself."""
    for role in ROLE_ORDER:
        for path in (ROLES_DIR / role / "tasks").glob("*.yml"):
            for t in each_task(_load(path)):
                for module in ("ansible.builtin.command", "ansible.builtin.shell", "command", "shell"):
                    assert "dpkg-query" not in str(t.get(module, "")), f"{role}/{path.name}: {t['name']} runs dpkg-query"


def test_restarts_go_through_handlers():
    for role in ROLE_ORDER:
        for path in (ROLES_DIR / role / "tasks").glob("*.yml"):
            for t in each_task(_load(path)):
                svc = t.get("ansible.builtin.systemd_service") or {}
                assert svc.get("state") not in ("restarted", "reloaded"), f"{role}/{path.name}: {t['name']} restarts in a task"


@pytest.mark.slow
def test_ansible_lint_production_profile_is_clean(tmp_path):
    """ansible-lint runs on a copy so its cache (.ansible/) never lands in the checkout."""
    lint = Path(sys.executable).parent / "ansible-lint"
    if not lint.exists():
        lint = Path(shutil.which("ansible-lint") or "ansible-lint")
    shutil.copytree(ROLES_DIR, tmp_path / "roles")
    res = subprocess.run([str(lint), "--profile", "production", "--nocolor", "--offline", "roles"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in res.stdout + res.stderr


def test_vendor_unit_names_are_spelled_only_in_the_catalog():
    """Every vendor daemon's unit name (NVIDIA's, Lustre's LNet, DOCA-OFED's openibd) lives once, in the catalog
    (``blueprints.vendor.vendor_units``): no role task, template, default or variable file spells one; the roles
    get them from ``clusterforge render``."""
    from blueprints.vendor import nvidia_services, vendor_units

    names = set(vendor_units().values())
    assert set(nvidia_services().values()) <= names and {"lnet", "openibd"} <= names
    offenders = []
    for path in sorted(ROLES_DIR.rglob("*")):
        if not path.is_file() or path.suffix not in (".yml", ".j2") or path.parent.name == "meta":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            offenders += [f"{path.relative_to(ROLES_DIR)}:{n}: {name}" for name in names
                          if re.search(rf"(?<![\w/-]){re.escape(name)}\.service\b", code)]
    assert offenders == []
