"""AWS's FSx for Lustre client tunings (issue 27 kind 6), from the user's side: the node settings a group gets, the
files in the rendered user data, and the lustre_client role's tuning script run against a stand-in ``lctl``.

The source (https://docs.aws.amazon.com/fsx/latest/LustreGuide/performance-tips.html, "Recommended client instance
tunings"): on client instance types with more than 64 GiB of memory ``ldlm.namespaces.*.lru_max_age=600000`` and
``lru_size`` = 100 x the CPUs; with more than 64 vCPUs the module options ``ptlrpc ptlrpcd_per_cpt_max=32`` and
``ksocklnd credits=2560`` and, once mounted, ``osc.*OST*.max_rpcs_in_flight=32``, ``mdc.*.max_rpcs_in_flight=64``,
``mdc.*.max_mod_rpcs_in_flight=50``; ``lctl set_param`` does not persist over a reboot. The figures below are the
page's, and the instance types' vCPUs / memory EC2's (p5.48xlarge: 192 vCPUs, 2,048 GiB).
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from blueprints import load_blueprint
from blueprints.catalog import catalog
from blueprints.settings import lustre_tuning, node_settings
from stacks.cloud_init import role_files
from tests.conftest import EXAMPLES
from tests.stacks.conftest import LT, plan_example, user_data

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

BASH = shutil.which("bash") or "/bin/bash"
P5 = {"ptlrpc": {"ptlrpcd_per_cpt_max": "32"}, "ksocklnd": {"credits": "2560"}}
P5_PARAMS = {"ldlm.namespaces.*.lru_max_age": "600000", "ldlm.namespaces.*.lru_size": "19200",
             "osc.*OST*.max_rpcs_in_flight": "32", "mdc.*.max_rpcs_in_flight": "64",
             "mdc.*.max_mod_rpcs_in_flight": "50"}


def _spec(vcpus: int, memory_gib: float):  # type: ignore[no-untyped-def]
    return dataclasses.replace(catalog().instance_type("p5.48xlarge"), vcpus=vcpus, memory_gib=memory_gib)


def test_a_p5_node_mounting_fsx_gets_every_tuning() -> None:
    s = node_settings(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "gpu")
    assert s.lustre_tuning is not None
    assert s.lustre_tuning.module_options == P5 and s.lustre_tuning.params == P5_PARAMS


@pytest.mark.parametrize(("vcpus", "memory", "modules", "params"), [
    (64, 64, False, set()),  # at both thresholds: Lustre's defaults ("more than")
    (64, 65, False, {"ldlm.namespaces.*.lru_max_age", "ldlm.namespaces.*.lru_size"}),
    (65, 64, True, {"osc.*OST*.max_rpcs_in_flight", "mdc.*.max_rpcs_in_flight", "mdc.*.max_mod_rpcs_in_flight"}),
])
def test_the_thresholds_are_more_than_64(vcpus: int, memory: float, modules: bool, params: set[str]) -> None:
    t = lustre_tuning(_spec(vcpus, memory))
    if not modules and not params:
        assert t is None
        return
    assert t is not None and set(t.params) == params and bool(t.module_options) == modules
    if "ldlm.namespaces.*.lru_size" in params:
        assert t.params["ldlm.namespaces.*.lru_size"] == str(100 * vcpus)


def test_no_fsx_mount_no_tuning() -> None:
    bp = load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint
    bp = bp.model_copy(update={"storage": []})
    assert node_settings(bp, "gpu").lustre_tuning is None


def test_ec2_user_data_carries_the_role_files_and_applies_them_after_the_mounts() -> None:
    (lt,) = plan_example("aws-p5-efa-lustre").of_type(LT)
    text = user_data(lt)
    assert "path: /etc/modprobe.d/clusterforge-lustre-tuning.conf" in text
    assert "options ksocklnd credits=2560" in text and "options ptlrpc ptlrpcd_per_cpt_max=32" in text
    assert "path: /usr/local/sbin/clusterforge-lustre-tuning" in text
    assert "'ldlm.namespaces.*.lru_size=19200'" in text and "'osc.*OST*.max_rpcs_in_flight=32'" in text
    assert "path: /etc/systemd/system/clusterforge-lustre-tuning.service" in text
    assert "After=remote-fs.target" in text
    lines = [ln.strip() for ln in text.splitlines()]
    at = lines.index("/usr/local/sbin/clusterforge-lustre-mounts")  # the first-boot Lustre script: mounts, then
    assert lines[at + 1:at + 3] == ["systemctl daemon-reload && systemctl enable clusterforge-lustre-tuning.service",
                                    "/usr/local/sbin/clusterforge-lustre-tuning"], "tunings right after the mounts"


def test_eks_nodes_get_none() -> None:
    """EKS mounts FSx volumes with the CSI driver after boot (a boot-time unit would find nothing mounted), AWS's EKS
    page gives other values, and EKS user data has no room left on sandbox groups: no tuning there."""
    bp = load_blueprint(EXAMPLES / "aws-eks-p4d.yaml").blueprint
    assert node_settings(bp, "gpu").lustre_tuning is None
    lts = plan_example("aws-eks-p4d").of_type(LT)
    assert lts and not any("clusterforge-lustre-tuning" in user_data(lt) for lt in lts)


def test_cloud_files_are_the_roles_own() -> None:
    """The same role templates under the same `when` make the bare-metal files (role_files renders them)."""
    s = node_settings(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "gpu")
    paths = {f.path: f.mode for f in role_files(s) if "tuning" in f.path}
    assert paths == {"/etc/modprobe.d/clusterforge-lustre-tuning.conf": "0644",
                     "/usr/local/sbin/clusterforge-lustre-tuning": "0755",
                     "/etc/systemd/system/clusterforge-lustre-tuning.service": "0644"}
    small = s.model_copy(update={"lustre_tuning": None})
    assert not [f for f in role_files(small) if "tuning" in f.path]


# --- the tuning script against a stand-in lctl ---------------------------------------------------

def _script() -> str:
    s = node_settings(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "gpu")
    return next(f.content for f in role_files(s) if f.path == "/usr/local/sbin/clusterforge-lustre-tuning")


def _node(tmp: Path, *, mounted: bool, fail: str = "") -> dict[str, str]:
    """A stand-in ``lctl``: ``get_param -n P`` prints the values kept per pattern (two targets each, as with two
    OSTs), ``set_param P=V`` records V (or fails for the pattern ``fail``)."""
    state = tmp / "params"
    state.mkdir()
    lctl = tmp / "lctl"
    lctl.write_text(f'''#!/bin/bash
f={state}/$(echo "${{@: -1}}" | cut -d= -f1 | tr '/*' '_+')
case "$1" in
  get_param) [ -f "$f" ] && {{ cat "$f"; cat "$f"; }} || {{ echo 1; echo 1; }};;
  set_param) [ "${{2%%=*}}" = "{fail}" ] && exit 3; echo "${{2#*=}}" > "$f"; echo "$2" >> {tmp}/calls;;
esac
''')
    lctl.chmod(0o755)
    mounts = tmp / "mounts"
    mounts.write_text("fs-0.fsx.us-east-1.amazonaws.com@tcp:/abcd /fsx lustre rw,flock 0 0\n" if mounted
                      else "/dev/root / ext4 rw 0 0\n")
    return {"LCTL": str(lctl), "MOUNTS": str(mounts), "PATH": "/usr/bin:/bin"}


def _run(tmp: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    path = tmp / "tuning.sh"
    path.write_text(_script())
    return subprocess.run([BASH, str(path)], capture_output=True, text=True, env=env, check=False)


def test_the_script_sets_each_parameter_once_and_then_nothing(tmp_path: Path) -> None:
    env = _node(tmp_path, mounted=True)
    first = _run(tmp_path, env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [f"changed: {k}={v}" for k, v in P5_PARAMS.items()]
    assert (tmp_path / "calls").read_text().splitlines() == [f"{k}={v}" for k, v in P5_PARAMS.items()]
    again = _run(tmp_path, env)
    assert again.returncode == 0 and again.stdout == "", "a second run (a later boot) changes nothing that holds"


def test_the_script_does_nothing_without_a_lustre_mount(tmp_path: Path) -> None:
    res = _run(tmp_path, _node(tmp_path, mounted=False))
    assert res.returncode == 0 and res.stdout == "" and not (tmp_path / "calls").exists()
    assert "no Lustre mounted" in res.stderr


def test_a_parameter_that_cannot_be_set_fails_the_run_but_not_the_others(tmp_path: Path) -> None:
    res = _run(tmp_path, _node(tmp_path, mounted=True, fail="mdc.*.max_rpcs_in_flight"))
    assert res.returncode == 1
    assert "could not set mdc.*.max_rpcs_in_flight=64" in res.stderr
    assert "changed: mdc.*.max_mod_rpcs_in_flight=50" in res.stdout
