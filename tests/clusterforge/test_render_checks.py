"""What a renderer or the Pulumi program used to refuse is a `check` rule with a position.

Each blueprint here passed `clusterforge check` before and then failed `render` or `plan` with a
line that named no place in the file (an IPoIB subnet that ran out of addresses, a node group
named like a generated inventory group, `target.ami_id` or an existing subnet with EKS, more EFA
interfaces than a non-compute group's instance type has). Now `check` fails with
``FILE:LINE:COL: rule-id: message — fix``, and `render` stops at the same finding before writing
anything. The variants are generated, not only the handed instance.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from blueprints.catalog import catalog
from blueprints.naming import generated_inventory_groups
from blueprints.role_vars import ROLE_ORDER
from clusterforge.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "blueprints" / "examples"
DGX = (EXAMPLES / "onprem-dgx-h100-ib.yaml").read_text()
P5 = (EXAMPLES / "aws-p5-efa-lustre.yaml").read_text()
EKS = (EXAMPLES / "aws-eks-p4d.yaml").read_text()
NODE_ROLES = ("compute", "login", "controller", "storage")


def _check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, Path, list[str]]:
    path = tmp_path / "bp.yaml"
    path.write_text(text)
    rc = main(["check", str(path)])
    out = capsys.readouterr().out
    return rc, path, [ln for ln in out.splitlines() if ln.startswith("✗ ")]


def _position(text: str, needle: str) -> tuple[int, int]:
    """1-based line and column of the first ``needle`` in ``text``."""
    for n, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return n, line.index(needle) + 1
    raise AssertionError(needle)


def _render_refuses(tmp_path: Path, path: Path, rule_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "out"
    rc = main(["render", str(path), "-o", str(out_dir)])
    err = capsys.readouterr().err
    assert rc == 1 and f": {rule_id}: " in err, err
    assert not out_dir.exists() or not any(out_dir.iterdir())


# ---- IPoIB: check counts the addresses the renderer assigns ----------------------------------

@pytest.mark.parametrize("nids", [1, 2, 3])
def test_an_ipoib_subnet_taken_by_mgs_nids_fails_check(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       nids: int) -> None:
    """A /29 has 6 host addresses for the 5 IPoIB hosts (the old count passed); the Lustre MGS NIDs
    inside it leave fewer, and the renderer ran out of addresses."""
    mgs = ", ".join(f"192.168.100.{2 + k}@o2ib" for k in range(nids))
    text = DGX.replace("cidr: 192.168.100.0/24", "cidr: 192.168.100.0/29").replace(
        "mgs_nids: [192.168.100.2@o2ib]", f"mgs_nids: [{mgs}]")
    rc, path, errors = _check(tmp_path, text, capsys)
    if nids == 1:  # 6 - 1 = 5 free: fits
        assert rc == 0 and errors == []
        assert main(["render", str(path), "-o", str(tmp_path / "out")]) == 0
        inventory = (tmp_path / "out" / "ansible" / "inventory.yml").read_text()
        assert inventory.count("rdma_ipoib_interfaces") == 5
        return
    line, col = _position(text, "cidr: 192.168.100.0/29")  # a finding points at the key
    assert rc == 1 and len(errors) == 1, errors
    assert errors[0].startswith(f"✗ {path}:{line}:{col}: ipoib-cidr: ")
    assert f"has {6 - nids} free addresses for 5 IPoIB hosts" in errors[0]
    assert errors[0].endswith("— use a larger subnet (at least /28)")
    _render_refuses(tmp_path, path, "ipoib-cidr", capsys)


# ---- inventory group names: every name the renderer generates --------------------------------

@pytest.mark.parametrize("inventory_name", sorted(generated_inventory_groups(NODE_ROLES, ROLE_ORDER)))
def test_a_node_group_named_like_a_generated_inventory_group_fails_check(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], inventory_name: str) -> None:
    name = inventory_name.replace("_", "-")
    text = DGX.replace("  - name: mgmt\n", f"  - name: {name}\n")
    rc, path, errors = _check(tmp_path, text, capsys)
    line, col = _position(text, f"  - name: {name}")
    col += len("  - ")
    assert rc == 1 and len(errors) == 1, errors
    assert re.match(rf"✗ {re.escape(str(path))}:{line}:{col}: inventory-group-name: node group `{name}` ", errors[0])
    assert f"inventory group `{inventory_name}`" in errors[0]
    _render_refuses(tmp_path, path, "inventory-group-name", capsys)


def test_a_node_group_name_that_merely_starts_like_one_renders(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    text = DGX.replace("  - name: mgmt\n", "  - name: with-rdma-nodes\n")
    rc, path, errors = _check(tmp_path, text, capsys)
    assert rc == 0 and errors == []
    assert main(["render", str(path), "-o", str(tmp_path / "out")]) == 0
    assert "with_rdma_nodes:" in (tmp_path / "out" / "ansible" / "inventory.yml").read_text()


# ---- EKS: what the Pulumi program refused during plan -----------------------------------------

def test_ami_id_with_eks_fails_check_at_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = EKS.replace("  capacity: on-demand\n", "  capacity: on-demand\n  ami_id: ami-0123456789abcdef0\n")
    rc, path, errors = _check(tmp_path, text, capsys)
    line, col = _position(text, "ami_id:")
    assert rc == 1 and len(errors) == 1 and errors[0].startswith(f"✗ {path}:{line}:{col}: eks-ami-id: "), errors


@pytest.mark.parametrize("listed", [[], ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"]])
def test_an_existing_subnet_with_eks_needs_control_plane_subnets(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                listed: list[str]) -> None:
    vpc = "{subnet_id: subnet-0123456789abcdef0" + (f", control_plane_subnet_ids: [{', '.join(listed)}]" if listed else "") + "}"
    text = EKS.replace("  capacity: on-demand\n", f"  capacity: on-demand\n  vpc: {vpc}\n")
    rc, path, errors = _check(tmp_path, text, capsys)
    if listed:
        assert not [e for e in errors if "eks-control-plane-subnets" in e]
        return
    line, col = _position(text, "subnet_id:")
    assert rc == 1 and len(errors) == 1, errors
    assert errors[0].startswith(f"✗ {path}:{line}:{col}: eks-control-plane-subnets: ")


# ---- EFA interfaces on every group that gets EFA, any role -------------------------------------

def _efa_types() -> list[str]:
    cat = catalog()
    return [n for n in cat.instance_type_names
            if cat.instance_type(n).efa_supported and (cat.instance_type(n).max_efa_interfaces or 0) < 32]


@pytest.mark.parametrize("instance_type", _efa_types())
def test_efa_interfaces_beyond_a_storage_groups_type_fail_check(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               instance_type: str) -> None:
    """The compute group (p5.48xlarge, 32 EFA) takes the requested interfaces; a storage group of
    another EFA type does not, which only the plan found (``efa_layout``)."""
    spec = catalog().instance_type(instance_type)
    wanted = int(spec.max_efa_interfaces or 0) + 1
    group = f"  - name: prep\n    role: storage\n    count: 1\n    instance_type: {instance_type}\n"
    text = P5.replace("    sandbox: {runtime: container}\n", "    sandbox: {runtime: container}\n" + group).replace(
        "efa: {interfaces: max}", f"efa: {{interfaces: {wanted}}}")
    rc, path, errors = _check(tmp_path, text, capsys)
    line, col = _position(text, f"interfaces: {wanted}")
    mine = [e for e in errors if ": efa-interfaces-max: " in e]
    assert rc == 1 and len(mine) == 1, errors
    assert mine[0].startswith(f"✗ {path}:{line}:{col}: efa-interfaces-max: ")
    assert f"`{instance_type}` (`node_groups.1`, group `prep`) supports at most {spec.max_efa_interfaces}" in mine[0]


# ---- EC2 user data: sized before the stack runs -------------------------------------------------

def _with_nccl_env(text: str, variables: int) -> str:
    """``text`` with ``variables`` NCCL environment entries of 40 random (incompressible) characters
    under ``network:``; seeded, so each run writes the same file."""
    import random

    rnd = random.Random(variables)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    lines = "".join(f"      NCCL_SITE_{k:03d}: {''.join(rnd.choice(alphabet) for _ in range(40))}\n"
                    for k in range(variables))
    assert "\nnetwork:\n" in text and "  nccl:" not in text
    return text.replace("\nnetwork:\n", "\nnetwork:\n  nccl:\n    env:\n" + lines, 1)


@pytest.mark.parametrize("example", ["P5", "EKS"])
@pytest.mark.parametrize("variables", [4, 400])
def test_user_data_over_the_ec2_limit_stops_plan_and_render_at_the_node_group(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], example: str, variables: int) -> None:
    """A GPU group whose user data cannot fit EC2's 16 KB (even gzip'd) used to pass `check` and end
    `plan` with an internal error from inside the Pulumi program; now `plan`, `render` and `up` stop
    first with one positioned line, and a group that fits renders user data within the limit."""
    text = _with_nccl_env({"P5": P5, "EKS": EKS}[example], variables)
    path = tmp_path / "bp.yaml"
    path.write_text(text)
    out_dir = tmp_path / "out"
    if variables == 4:
        assert main(["render", str(path), "-o", str(out_dir)]) == 0
        from stacks.cloud_init import USER_DATA_LIMIT_BYTES, user_data_payload

        for f in (out_dir / "pulumi" / "cloud-init").iterdir():
            assert len(user_data_payload(f.read_text())) <= USER_DATA_LIMIT_BYTES
        return
    line, col = _position(text, "- name: gpu")
    for argv in (["plan", str(path)], ["render", str(path), "-o", str(out_dir)], ["up", str(path), "--preview"]):
        rc = main(argv)
        captured = capsys.readouterr()
        err = captured.err
        assert rc == 1, (argv, captured.out, err)
        assert "Traceback" not in err and "internal error" not in err
        lines = [ln for ln in err.splitlines() if ": user-data-size: " in ln]
        gpu = [ln for ln in lines if f"{path}:{line}:{col + 2}: user-data-size: node group `gpu`: " in ln]
        assert len(gpu) == 1 and all(ln.startswith(f"✗ {path}:") for ln in lines), err
        size = int(re.search(r"user data is (\d+) bytes", gpu[0]).group(1))  # type: ignore[union-attr]
        assert size > 16384 and "EC2 allows 16384" in gpu[0]
    assert not out_dir.exists() or not any(out_dir.iterdir())


def test_eks_user_data_leaves_room_for_eks_own_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """EKS merges its bootstrap part into the launch template's user data and the 16 KB limit holds for the
    merged document (terraform-provider-aws#49234: InvalidUserData.Malformed above 16384 decoded bytes): a
    document that fits 16384 on its own but not with EKS's part is refused at `plan`, naming the room."""
    from blueprints import load_blueprint
    from blueprints.catalog import catalog
    from stacks.cloud_init import render_user_data, sizing_endpoints, user_data_payload

    reserve = int(catalog().aws["eks_user_data"]["reserve_bytes"])
    path = tmp_path / "bp.yaml"
    size = 0
    for variables in range(4, 400, 2):  # the first NCCL environment whose MIME lands in the reserved room
        path.write_text(_with_nccl_env(EKS, variables))
        gpu = next(r for r in load_blueprint(path).cluster.groups if r.name == "gpu")
        size = len(user_data_payload(render_user_data(gpu.settings, sizing_endpoints(gpu.settings, "us-west-2"),
                                                      eks=True)))
        if 16384 - reserve < size <= 16384:
            break
    else:
        pytest.fail("no NCCL environment size lands in the reserved room")
    assert main(["plan", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"node group `gpu`: its user data is {size} bytes" in err
    assert f"EC2 allows 16384, of which EKS's own bootstrap part needs about {reserve}" in err
