"""Rendering the Ansible run from a blueprint: golden inventory and group_vars for every on-prem example,
the variable mapping from the settings model, the plan, and the edges (AWS, secrets). Name clashes are
`check` rules (`host-unique`, `inventory-group-name`; tests/clusterforge/test_render_checks.py).

The golden files are ``tests/golden/ansible/<example>/``; regenerate them with
``CLUSTERFORGE_UPDATE_GOLDEN=1 pytest tests/clusterforge/ansible/test_render.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from blueprints import load_blueprint
from blueprints.settings import node_settings
from clusterforge.ansible.render import (
    ROLE_ORDER,
    ROLES_DIR,
    node_role_vars,
    plan_ansible,
    render_ansible,
    roles_for,
)
from clusterforge.errors import UsageError
from tests.ansible_vars import load_vars
from tests.conftest import EXAMPLES, REPO
from tests.golden_files import assert_golden, golden_dir

GOLDEN = golden_dir("ansible")
ON_PREM = ["onprem-dgx-h100-ib", "onprem-l40s-roce", "onprem-sandbox-kata", "local-workstation"]


def _golden_files(out: Path) -> dict[str, str]:
    files = {"inventory.yml": (out / "inventory.yml").read_text()}
    for f in sorted((out / "group_vars").glob("*.yml")):
        files[f"group_vars/{f.name}"] = f.read_text()
    return files


@pytest.mark.parametrize("example", ON_PREM)
def test_rendered_inventory_and_group_vars_match_golden(example, tmp_path):
    render_ansible(load_blueprint(EXAMPLES / f"{example}.yaml"), tmp_path)
    got = _golden_files(tmp_path)
    assert_golden(got, GOLDEN / example)


@pytest.mark.parametrize("example", ON_PREM)
def test_group_vars_are_the_settings_model_mapped_onto_role_variables(example, tmp_path):
    loaded = load_blueprint(EXAMPLES / f"{example}.yaml")
    render_ansible(loaded, tmp_path)
    bp = loaded.blueprint
    for g in bp.node_groups:
        gv = load_vars(tmp_path / "group_vars" / f"{g.name.replace('-', '_')}.yml")
        s = node_settings(bp, g)
        assert gv["host_tuning_sysctls"] == s.sysctls
        assert gv["host_tuning_kernel_cmdline"] == s.kernel_cmdline
        assert gv["host_tuning_disable_acs"] == s.disable_acs
        if "rdma" in roles_for(bp, s):
            assert gv["rdma_nccl_env"] == s.nccl_env
            assert gv["rdma_devices"] == s.rdma_devices
        if s.roce is not None:
            assert gv["rdma_roce_pfc_vector"] == s.roce.pfc_vector
            assert gv["rdma_roce_interfaces"] == s.roce.interfaces
        if s.scratch:
            assert gv["nvme_scratch_mount"] == s.scratch.mount
            assert gv["nvme_scratch_expected_drives"] == (s.scratch.expected_drives or 0)
        for name in gv:
            assert name.startswith(("clusterforge_", *[f"{r}_" for r in ROLE_ORDER])), f"unprefixed variable {name}"
        for role in roles_for(bp, s):
            defaults = yaml.safe_load((ROLES_DIR / role / "defaults/main.yml").read_text())
            assert set(node_role_vars(s, role)) <= set(defaults), f"{role}: group_vars set variables the role lacks"


def test_inventory_groups_hosts_and_connection(tmp_path):
    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    render_ansible(loaded, tmp_path)
    inv = load_vars(tmp_path / "inventory.yml")["all"]
    assert inv["vars"]["ansible_user"] == "ubuntu"
    assert inv["vars"]["ansible_ssh_private_key_file"] == "~/.ssh/id_ed25519"  # the path, never key material
    assert inv["vars"]["ansible_become"] is True
    children = inv["children"]
    assert set(children["dgx"]["hosts"]) == {"dgx-01", "dgx-02", "dgx-03", "dgx-04"}
    assert children["dgx"]["hosts"]["dgx-03"]["ansible_host"] == "10.0.0.13"
    assert set(children["role_compute"]["children"]) == {"dgx"}
    assert set(children["role_controller"]["children"]) == {"mgmt"}
    assert set(children["with_nvidia_driver"]["children"]) == {"dgx"}
    assert set(children["with_rdma"]["children"]) == {"dgx", "mgmt"}  # mgmt runs opensm
    assert children["with_sandbox"] == {}
    # IPoIB addresses in host order, skipping the Lustre MGS address 192.168.100.2
    ipoib = [children["dgx"]["hosts"][h]["rdma_ipoib_interfaces"][0]["address"] for h in sorted(children["dgx"]["hosts"])]
    assert ipoib == ["192.168.100.3/24", "192.168.100.4/24", "192.168.100.5/24", "192.168.100.6/24"]
    # mgmt-01 declares its InfiniBand port (opensm, Lustre over o2ib) and comes first
    assert children["mgmt"]["hosts"]["mgmt-01"]["rdma_ipoib_interfaces"] == [{"netdev": "ibp12s0", "address": "192.168.100.1/24"}]
    # ansible-inventory itself parses it and sees the group_vars
    out = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(tmp_path / "inventory.yml"),
                          "--host", "dgx-02", "--yaml"], capture_output=True, text=True, check=True).stdout
    hv = load_vars(out)
    assert hv["nvidia_driver_fabric_manager"] is True and hv["rdma_fabric"] == "infiniband"
    assert hv["ansible_host"] == "10.0.0.12"


def test_local_connection_host_uses_the_controller_python(tmp_path):
    render_ansible(load_blueprint(EXAMPLES / "local-workstation.yaml"), tmp_path)
    inv = load_vars(tmp_path / "inventory.yml")["all"]
    host = inv["children"]["local"]["hosts"]["localhost"]
    assert host["ansible_connection"] == "local"
    assert host["ansible_python_interpreter"] == "{{ ansible_playbook_python }}"
    assert inv["vars"]["ansible_become"] is False


def test_render_writes_a_self_contained_directory(tmp_path):
    written = render_ansible(load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml"), tmp_path)
    names = {p.relative_to(tmp_path).as_posix() for p in written}
    assert {"ansible.cfg", "inventory.yml", "group_vars/l40s.yml", "site.yml", "roles"} <= names
    assert (tmp_path / "site.yml").read_text() == (ROLES_DIR / "site.yml").read_text()
    for role in ROLE_ORDER:
        assert (tmp_path / "roles" / role / "tasks/main.yml").is_file()
    assert (tmp_path / "files/validate/collectives.py").is_file()
    cfg = (tmp_path / "ansible.cfg").read_text()
    assert "roles_path = roles" in cfg and "host_key_checking = True" in cfg
    # the playbook parses against the rendered inventory, by hand, from the output directory
    res = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory.yml", "site.yml",
                          "--syntax-check"], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    # a second render replaces its own roles copy; a foreign roles/ directory is refused
    render_ansible(load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml"), tmp_path)
    other = tmp_path / "other"
    (other / "roles").mkdir(parents=True)
    with pytest.raises(UsageError, match="not written by clusterforge"):
        render_ansible(load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml"), other)


def test_aws_blueprints_render_nothing_and_have_no_ansible_plan(tmp_path):
    loaded = load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml")
    with pytest.raises(UsageError, match="on-prem"):
        render_ansible(loaded, tmp_path)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UsageError, match="on-prem"):
        plan_ansible(loaded)


def test_plan_lists_every_host_with_groups_roles_and_vars():
    plan = plan_ansible(load_blueprint(EXAMPLES / "onprem-sandbox-kata.yaml"))
    hosts = {h["name"]: h for h in plan["hosts"]}
    assert set(hosts) == {"kata-01", "kata-02", "vm-host-01"}
    kata = hosts["kata-01"]
    assert kata["address"] == "10.2.0.31"
    assert kata["roles"] == ["host_tuning", "rdma", "nvme_scratch", "container_runtime", "sandbox", "validation_tools",
                             "kernel_updates"]  # software.kernel_updates: hold
    assert "nvidia_driver" not in kata["roles"]  # GPUs are passed through, the host runs no driver
    assert {"kata", "role_compute", "with_sandbox"} <= set(kata["groups"])
    assert kata["vars"]["sandbox_runtime"] == "kata" and kata["vars"]["host_tuning_kernel_cmdline"] == ["iommu=pt"]
    assert hosts["vm-host-01"]["vars"]["sandbox_vm_gpus_per_vm"] == 2
    assert kata["vars"]["ansible_user"] == "ubuntu"


def test_clusterforge_plan_and_render_cli_use_the_ansible_renderer(tmp_path):
    from clusterforge.cli import main

    assert main(["render", str(EXAMPLES / "local-workstation.yaml"), "-o", str(tmp_path)]) == 0
    assert (tmp_path / "ansible" / "inventory.yml").is_file()
    res = subprocess.run([sys.executable, "-m", "clusterforge.cli", "plan", str(EXAMPLES / "local-workstation.yaml"),
                          "--json"], capture_output=True, text=True, cwd=REPO, check=False)
    assert res.returncode == 0, res.stderr
    import json

    plan = json.loads(res.stdout)
    assert plan["hosts"][0]["name"] == "localhost" and "host_tuning" in plan["hosts"][0]["roles"]
