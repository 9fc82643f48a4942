"""One definition of the collective stack: the nccl_stack role's variables on bare metal and its script in the cloud
user data / Slurm bundle come from the same NodeSettings; software.nccl changes what is installed (issue 26)."""

from __future__ import annotations

from pathlib import Path

from blueprints import load_blueprint
from blueprints.resolved import resolve
from blueprints.role_templates import render_role_template
from blueprints.role_vars import node_role_vars, roles_for
from blueprints.settings import NodeSettings
from stacks.cloud_init import placeholder_endpoints, render_user_data, user_data_payload
from stacks.slurm_boot import slurm_bundle_files, slurm_script
from tests.conftest import EXAMPLES

from .conftest import dgx_variant


def _settings(path: Path, group: str) -> NodeSettings:
    bp = load_blueprint(path).blueprint
    return next(r.settings for r in resolve(bp).groups if r.settings.group == group)


def test_training_nodes_get_the_role_others_do_not():
    bp = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml").blueprint
    got = {r.settings.group: "nccl_stack" in roles_for(bp, r.settings) for r in resolve(bp).groups}
    assert got == {"mgmt": False, "dgx": True}
    eks = load_blueprint(EXAMPLES / "aws-eks-p4d.yaml").blueprint  # pods bring their stack in the image
    assert all(r.settings.nccl_stack is None for r in resolve(eks).groups)


def test_software_nccl_changes_the_pinned_packages(tmp_path):
    # NVIDIA's CUDA repository names: libnccl2 / libnccl-dev at <nccl>-1+cuda<X.Y>
    # (https://docs.nvidia.com/deeplearning/nccl/install-guide/index.html); 2.27.7 has a CUDA 13.0 build
    # (https://developer.download.nvidia.com/compute/redist/nccl/v2.27.7/)
    variant = dgx_variant(tmp_path, "nccl-2277", "ubuntu-22.04", cuda="13.0", nccl="2.27.7")
    v = node_role_vars(_settings(variant, "dgx"), "nccl_stack")
    assert v["nccl_stack_packages"] == ["libnccl2=2.27.7-1+cuda13.0", "libnccl-dev=2.27.7-1+cuda13.0"]
    assert v["nccl_stack_nccl_version"] == "2.27.7"
    assert "cuda-nvcc-13-0" in v["nccl_stack_build_packages"] and v["nccl_stack_cuda_home"] == "/usr/local/cuda-13.0"
    assert v["nccl_stack_net_plugin"] == ""  # InfiniBand: NCCL's built-in IB verbs transport
    script = render_role_template("nccl_stack", "nccl-stack.sh.j2", v)
    assert "PACKAGES=(libnccl2=2.27.7-1+cuda13.0 libnccl-dev=2.27.7-1+cuda13.0 )" in script


def test_cloud_nodes_run_the_roles_script_from_user_data():
    s = _settings(EXAMPLES / "aws-p5-efa-lustre.yaml", "gpu")
    assert s.nccl_stack is not None and s.nccl_stack.net_plugin == "aws-ofi-nccl"
    want = render_role_template("nccl_stack", "nccl-stack.sh.j2", node_role_vars(s, "nccl_stack"))
    ud = render_user_data(s, placeholder_endpoints(s))
    assert "/usr/local/sbin/clusterforge-nccl-stack" in ud.split("runcmd:", 1)[1]
    # the user data carries the role's script byte for byte (cloud-init's literal block, indented)
    assert all(line.strip() in ud for line in want.splitlines() if line.strip())
    # after the EFA script that checks the plugin NCCL needs
    runcmd = ud.split("runcmd:", 1)[1]
    assert runcmd.index("clusterforge-efa.sh") < runcmd.index("clusterforge-nccl-stack")
    assert len(user_data_payload(ud)) <= 16 * 1024


def test_slurm_nodes_get_it_in_their_bundle_and_run_it_before_slurmd():
    s = _settings(EXAMPLES / "aws-p5-slurm.yaml", "gpu")
    files = {f.path: f for f in slurm_bundle_files(s)}
    want = render_role_template("nccl_stack", "nccl-stack.sh.j2", node_role_vars(s, "nccl_stack"))
    assert files["/usr/local/sbin/clusterforge-nccl-stack"].content.rstrip("\n") == want.rstrip("\n")
    from stacks.slurm_boot import sizing_boot

    boot = slurm_script(s, sizing_boot(s))
    assert boot.index("/usr/local/sbin/clusterforge-nccl-stack") < boot.index("systemctl enable slurmd.service")
    assert "clusterforge-nccl-stack" not in render_user_data(s, placeholder_endpoints(s)).split("runcmd:", 1)[1]


def test_containers_declared_replace_the_venv_with_the_ngc_image(tmp_path):
    import yaml

    from blueprints.software_stack import software_stack

    # Slurm with pyxis: jobs run in containers, so the stack's NGC PyTorch image is imported into enroot
    data = yaml.safe_load((EXAMPLES / "aws-p5-slurm.yaml").read_text())
    data["orchestrator"]["pyxis"] = True
    path = tmp_path / "pyxis.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    s = _settings(path, "gpu")
    image = software_stack(load_blueprint(path).blueprint).container_image
    assert s.nccl_stack is not None and s.nccl_stack.container_image == image and s.nccl_stack.enroot_import
    v = node_role_vars(s, "nccl_stack")
    assert v["nccl_stack_container_image"] == image and v["nccl_stack_enroot_import"] is True
    # software.container_image declared without pyxis: pulled into containerd
    data = yaml.safe_load((EXAMPLES / "onprem-dgx-h100-ib.yaml").read_text())
    data["software"]["container_image"] = image
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    s = _settings(path, "dgx")
    assert s.nccl_stack is not None and (s.nccl_stack.container_image, s.nccl_stack.enroot_import) == (image, False)
    # nothing declared: the venv
    assert _settings(EXAMPLES / "onprem-dgx-h100-ib.yaml", "dgx").nccl_stack.container_image is None  # type: ignore[union-attr]
