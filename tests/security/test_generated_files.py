"""Issue #33, kinds 1 and 2, behind the loader: each generated file keeps a value as data by its own format.

Every test hands a role template (or the code that writes a file) a value the blueprint loader would have
refused, as if a validator had missed it, and checks the file the node would get: the value is evaluated
nowhere, sits inside one word or string, or the render is refused. Each of these failed before the fix
(values were evaluated as templates, written raw into shell, systemd, TOML, deb822, fstab and sbatch lines).
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from blueprints import load_blueprint
from blueprints.role_templates import RoleTemplateError, render_role_template, role_variables
from blueprints.role_vars import node_role_vars
from blueprints.settings import node_settings
from blueprints.values import env_name, shell_export
from validate.launchers.slurm import sbatch_script
from validate.runner import plan_tests

EXAMPLES = Path(__file__).resolve().parents[2] / "blueprints" / "examples"


def _vars(example: str, group: str, role: str, **override: Any) -> dict[str, Any]:
    bp = load_blueprint(EXAMPLES / f"{example}.yaml").blueprint
    return {**node_role_vars(node_settings(bp, group), role), **override}


ESCAPE = "{{ cycler.__init__.__globals__.os.system('touch CANARY') }}"
"""The classic escape from an unsandboxed Jinja template: it reaches ``os`` through a global's function."""


def test_a_value_handed_to_the_cloud_renderer_is_never_evaluated(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    value = ESCAPE.replace("CANARY", str(canary))
    env = {"NCCL_SOCKET_IFNAME": value}
    assert role_variables("rdma", {"rdma_nccl_env": env})["rdma_nccl_env"] == env
    text = render_role_template("rdma", "nccl.conf.j2", _vars("onprem-l40s-roce", "l40s", "rdma", rdma_nccl_env=env))
    assert f"NCCL_SOCKET_IFNAME={value}\n" in text
    mount = "/scratch" + value
    assert role_variables("nvme_scratch", {"nvme_scratch_mount": mount})["nvme_scratch_mount"] == mount
    assert not canary.exists()


def test_role_templates_render_in_the_sandbox(tmp_path: Path) -> None:
    from jinja2.exceptions import SecurityError

    from blueprints.role_templates import _env, _native

    canary = tmp_path / "canary"
    for env in (_env(), _native()):
        with pytest.raises(SecurityError):
            env.from_string("{{ ''.__class__.__mro__[1].__subclasses__() }}").render()
        with pytest.raises(SecurityError):
            env.from_string(ESCAPE.replace("CANARY", str(canary))).render()
    assert not canary.exists()


def test_the_roce_qos_config_a_root_script_sources_keeps_each_value_one_word(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    iface = f"ens1$(touch{'${IFS}'}{canary})"
    text = render_role_template("rdma", "roce-qos.conf.j2",
                                _vars("onprem-l40s-roce", "l40s", "rdma", rdma_roce_interfaces=[iface, "ens2"],
                                      rdma_roce_trust=f"dscp;touch {canary}"))
    conf = tmp_path / "roce-qos.conf"
    conf.write_text(text)
    out = subprocess.run(["bash", "-c", 'set -eu; . "$1"; printf "%s|%s" "$INTERFACES" "$TRUST"', "_", str(conf)],
                         capture_output=True, text=True, check=True).stdout
    assert out == f"{iface} ens2|dscp;touch {canary}"
    assert not canary.exists()
    with pytest.raises(RoleTemplateError, match="argument"):  # whitespace would split the interface list
        render_role_template("rdma", "roce-qos.conf.j2",
                             _vars("onprem-l40s-roce", "l40s", "rdma", rdma_roce_interfaces=["ens1 -x"]))


def test_an_interface_name_cannot_add_a_directive_to_the_systemd_unit() -> None:
    text = render_role_template("rdma", "roce-qos.service.j2",
                                _vars("onprem-l40s-roce", "l40s", "rdma",
                                      rdma_roce_interfaces=["ens-1\nExecStartPre=/bin/touch /tmp/x"]))
    assert "ExecStartPre" not in [line.split("=")[0] for line in text.splitlines()]
    assert "Wants=sys-subsystem-net-devices-ens\\x2d1\\x0aExecStartPre\\x3d-bin-touch\\x20-tmp-x.device" in text


def test_a_runtime_class_stays_one_toml_key_of_containerd_config() -> None:
    hostile = 'kata"]\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "runc'
    text = render_role_template("container_runtime", "config.toml.j2",
                                _vars("onprem-sandbox-kata", "kata", "container_runtime",
                                      container_runtime_kata_runtime_class=hostile,
                                      __container_runtime_semver="1.7"))  # the node's containerd (a fact)
    doc = tomllib.loads(text)
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert cri["default_runtime_name"] == _vars("onprem-sandbox-kata", "kata", "container_runtime")[
        "container_runtime_default_runtime"], "the value switched the default runtime"
    assert hostile in cri["runtimes"] and cri["runtimes"][hostile]["runtime_type"] == f"io.containerd.{hostile}.v2"


@pytest.mark.parametrize("field,value", [
    ("lustre_client_apt_repo_suite", "./\nTrusted: yes"),
    ("lustre_client_apt_repo_url", "https://repo.example.com/\nTrusted: yes"),
    ("lustre_client_packages", ["-oAPT::Get::AllowUnauthenticated=true"]),
    ("lustre_client_apt_repo_components", ["main\nTrusted: yes"]),
])
def test_the_lustre_repository_entry_refuses_a_value_that_would_add_a_deb822_field(field: str, value: Any) -> None:
    base = _vars("onprem-dgx-h100-ib", "dgx", "lustre_client")
    base.update({"lustre_client_apt_repo_url": "https://repo.example.com/", "lustre_client_apt_repo_key_url":
                 "https://repo.example.com/key.asc", "lustre_client_apt_repo_suite": "./",
                 "lustre_client_apt_repo_components": [], field: value})
    with pytest.raises(RoleTemplateError):
        render_role_template("lustre_client", "lustre-client-install.sh.j2", base)


def test_a_mount_option_cannot_add_an_fstab_field() -> None:
    base = _vars("onprem-dgx-h100-ib", "dgx", "nvme_scratch", nvme_scratch_mount_options=["noatime 0 0\n/dev/x /"])
    with pytest.raises(RoleTemplateError, match="fstab field"):
        render_role_template("nvme_scratch", "nvme-scratch.sh.j2", base)
    lustre = _vars("onprem-dgx-h100-ib", "dgx", "lustre_client")
    mounts = [{**m, "options": ["flock", "x y"]} for m in lustre["lustre_client_mounts"]]
    with pytest.raises(RoleTemplateError, match="fstab field"):
        render_role_template("lustre_client", "lustre-mounts.sh.j2", {**lustre, "lustre_client_mounts": mounts})


def test_an_nccl_value_with_a_newline_cannot_add_a_setting() -> None:
    with pytest.raises(RoleTemplateError, match="one line"):
        render_role_template("rdma", "nccl.conf.j2", _vars("onprem-l40s-roce", "l40s", "rdma",
                                                           rdma_nccl_env={"NCCL_IB_HCA": "mlx5\nNCCL_NET=Socket"}))


def test_environment_lines_check_the_name_and_quote_the_value() -> None:
    assert shell_export("NCCL_DEBUG", "INFO; touch /tmp/x") == "export NCCL_DEBUG='INFO; touch /tmp/x'\n"
    for bad in ("X;id", "X=1 Y", "-x", "X\nY", "1X"):
        with pytest.raises(ValueError):
            env_name(bad)
        with pytest.raises(ValueError):
            shell_export(bad, "1")


def test_an_sbatch_directive_takes_one_word(tmp_path: Path) -> None:
    from blueprints.models import SlurmOrchestrator

    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    test = plan_tests(loaded, launcher="slurm")[0][0]
    bad = SlurmOrchestrator.model_construct(kind="slurm", partition="gpu", account="ml\nrm -rf /")
    hostile = type(loaded)(blueprint=loaded.blueprint.model_copy(update={"orchestrator": bad}), file=loaded.file,
                           positions=loaded.positions, data=loaded.data)
    with pytest.raises(ValueError, match="argument"):
        sbatch_script(hostile, test)
    ok = SlurmOrchestrator.model_construct(kind="slurm", partition="gpu", account="ml")
    fine = type(loaded)(blueprint=loaded.blueprint.model_copy(update={"orchestrator": ok}), file=loaded.file,
                        positions=loaded.positions, data=loaded.data)
    assert "#SBATCH --account=ml\n" in sbatch_script(fine, test)


def test_lnet_networks_stay_one_modprobe_option() -> None:
    lustre = _vars("onprem-dgx-h100-ib", "dgx", "lustre_client")
    text = render_role_template("lustre_client", "lustre.conf.j2", lustre)
    assert f'options lnet networks="{lustre["lustre_client_lnet_networks"]}"' in text  # modprobe reads double quotes only
    for bad in ('o2ib0(ib0)"\ninstall lnet /bin/sh -c id', 'o2ib0(ib0) x', 'o2ib0"'):
        with pytest.raises(RoleTemplateError, match="modprobe value"):
            render_role_template("lustre_client", "lustre.conf.j2", {**lustre, "lustre_client_lnet_networks": bad})


def test_the_ipoib_ifupdown_stanza_keeps_the_mode_and_interface_one_word() -> None:
    rdma = _vars("onprem-dgx-h100-ib", "dgx", "rdma")
    from blueprints.role_templates import _env

    text = _env().get_template("rdma/templates/ipoib-ifupdown.j2").render(
        {**rdma, "ansible_managed": "x", "rdma_ipoib_mode": "datagram; touch /tmp/x",
         "item": {"netdev": "ib0", "address": "192.168.100.3/24"}})
    assert "pre-up echo 'datagram; touch /tmp/x' > /sys/class/net/ib0/mode" in text
    with pytest.raises(ValueError, match="argument"):
        _env().get_template("rdma/templates/ipoib-ifupdown.j2").render(
            {**rdma, "ansible_managed": "x", "item": {"netdev": "-ib0 x", "address": "192.168.100.3/24"}})
