"""Every pre-deploy rule's severity, reviewed and typed here (issue 35).

The table below is literal data, not read from the registry: downgrading a rule from ``error``
to ``warning`` (for example ``ssh-ingress-open``) or adding/removing a rule is a visible change
to this file. ``error`` stops ``clusterforge check`` / ``deploy`` (exit 1); ``warning`` is
printed and only fails with ``--strict`` (README, "CLI summary"). The second test runs
each rule's firing case from ``test_rules.CASES`` and checks the finding carries the severity
of this table, not the registry's own value.

Reviewed 2026-12-02 against blueprints/rules/*.py at HEAD (192 rules: 141 errors, 51 warnings; roce-ecn-needs-ofed raised to an error in issue 28, nccl-release-known added;
eks-version-ended, gpu-operator-kubernetes (errors) and gpu-operator-support (warning) added in issue 27;
imex-domain (error) added in issue 28: 193 rules, 142 errors).
eks-capacity-block-window (warning) added in issue 27: 194 rules, 52 warnings.
nfs-on-aws (error) added in issue 27 (no AWS node mounts NFS; the boot's quick checks would fail): 195 rules, 143 errors.
A new rule needs a row here with the severity its author and reviewer agreed on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from blueprints import all_rules

from .test_rules import CASES, Case, _build, _check

ERROR = "error"
WARNING = "warning"

SEVERITIES: dict[str, str] = {
    # blueprints/rules/aws.py
    "ami-architecture": ERROR,
    "aws-az-in-region": ERROR,
    "aws-tags": ERROR,
    "capacity-block-instance-type": ERROR,
    "capacity-block-placement-group": WARNING,
    "capacity-block-size": ERROR,
    "capacity-block-unused": WARNING,
    "capacity-node-groups": ERROR,
    "capacity-single-instance-type": ERROR,
    "efa-capable-not-used": WARNING,
    "efa-device-plugin-version": ERROR,
    "efa-instance-support": ERROR,
    "efa-interfaces-below-max": WARNING,
    "efa-interfaces-max": ERROR,
    "efa-layout-unknown": ERROR,
    "efa-placement-decision": ERROR,
    "efa-placement-none": WARNING,
    "efa-placement-strategy": WARNING,
    "efa-software-versions": ERROR,
    "eks-ami-id": ERROR,
    "eks-api-open": WARNING,
    "eks-capacity-block-window": WARNING,
    "eks-control-plane-subnets": ERROR,
    "eks-version-ended": ERROR,
    "eks-system-node-group": WARNING,
    "eks-version-support": WARNING,
    "fsx-backup-s3": ERROR,
    "fsx-efa-client": ERROR,
    "nfs-on-aws": ERROR,
    "gpu-operator-kubernetes": ERROR,
    "gpu-operator-support": WARNING,
    "gpudirect-rdma-unavailable": ERROR,
    "instance-type-accelerator-not-nvidia": ERROR,
    "instance-type-exists": ERROR,
    "kata-needs-kvm": ERROR,
    "mount-over-image-dir": ERROR,
    "placement-group-mixed-types": WARNING,
    "placement-spread-limit": ERROR,
    "public-ip-multi-card": ERROR,
    "reservation-count": ERROR,
    "reservation-vs-placement-group": WARNING,
    "spot-multi-node": WARNING,
    "spot-supported": ERROR,
    "subnet-ip-capacity": ERROR,
    "vpc-cidr-layout": ERROR,
    "vpc-no-egress": WARNING,
    # blueprints/rules/cost.py
    "cost-node-group-unknown": ERROR,
    # blueprints/rules/fabric.py
    "doca-ofed-os": ERROR,
    "ethernet-multi-node-training": WARNING,
    "gpudirect-dmabuf-open-modules": ERROR,
    "gpudirect-efa-unsupported": WARNING,
    "gpudirect-peermem-driver": ERROR,
    "gpudirect-peermem-needs-ofed": ERROR,
    "ib-generation-nic-speed": WARNING,
    "ib-opensm-host": ERROR,
    "ib-subnet-manager": ERROR,
    "ipoib-cidr": ERROR,
    "ipoib-netdev-declared": WARNING,
    "nccl-env-disables-fabric": ERROR,
    "nccl-env-legacy": WARNING,
    "nccl-env-narrows-fabric": WARNING,
    "nccl-env-overrides-generated": WARNING,
    "nccl-gpudirect-method": ERROR,
    "netdev-required": ERROR,
    "nic-link-layer": ERROR,
    "rdma-nics-declared": WARNING,
    "roce-dscp-priority": WARNING,
    "roce-ecn-needs-ofed": ERROR,  # the converge always fails (roles/rdma: the QoS unit exits 2 without OFED's ECN tree)
    "roce-flow-control": ERROR,
    "roce-gid-index": ERROR,
    "roce-lossy-no-ecn": WARNING,
    "roce-netdev-declared": ERROR,
    "roce-traffic-class": ERROR,
    # blueprints/rules/general.py
    "aws-node-group-fields": ERROR,
    "fabric-provider": ERROR,
    "host-address-valid": ERROR,
    "host-unique": ERROR,
    "inventory-group-name": ERROR,
    "local-connection-single": ERROR,
    "mount-dir-duplicate": ERROR,
    "mount-dir-overlap": ERROR,
    "mount-dir-reserved": ERROR,
    "node-group-names-unique": ERROR,
    "onprem-network-placement": WARNING,
    "onprem-node-group-fields": ERROR,
    "secret-in-blueprint": ERROR,
    "ssh-ingress-open": ERROR,
    "ssh-key-material": ERROR,
    # blueprints/rules/hardware.py
    "accelerator-not-nvidia": ERROR,
    "gpu-model-known": ERROR,
    "gpu-short-name-ambiguous": WARNING,
    "hardware-system-mismatch": WARNING,
    "instance-type-format": ERROR,
    "instance-type-not-in-catalog": WARNING,
    "instance-type-unknown": ERROR,
    "local-nvme-drives": ERROR,
    "local-nvme-raid-single": WARNING,
    "nvme-by-id-paths": ERROR,
    "nvswitch-needs-sxm": ERROR,
    "rail-nic-count": WARNING,
    # blueprints/rules/sandbox.py
    "gvisor-gpu-support": ERROR,
    "gvisor-rdma": WARNING,
    "nvswitch-passthrough-plan": ERROR,
    "passthrough-gpudirect-rdma": WARNING,
    "passthrough-needs-gpu": ERROR,
    "passthrough-on-aws": ERROR,
    "passthrough-runtime": ERROR,
    "vm-gpus-idle": WARNING,
    "vm-gpus-per-vm": ERROR,
    "vm-settings-runtime": WARNING,
    # blueprints/rules/slurm.py
    "slurm-accounting-database": ERROR,
    "slurm-aws-tag-keys": ERROR,
    "slurm-container-pins": ERROR,
    "slurm-controller": ERROR,
    "slurm-controller-count": ERROR,
    "slurm-extra-key": ERROR,
    "slurm-gres-count": ERROR,
    "slurm-host-name": ERROR,
    "slurm-memlock-rdma": ERROR,
    "slurm-node-resources": ERROR,
    "slurm-os-version": ERROR,
    "slurm-partition-groups": ERROR,
    "slurm-real-memory": ERROR,
    "slurm-version-feature": ERROR,
    "slurm-version-order": ERROR,
    # blueprints/rules/software.py
    "container-toolkit-cve": ERROR,
    "cuda-driver-compat": ERROR,
    "cuda-driver-minor": WARNING,
    "driver-branch-gpu": ERROR,
    "driver-branch-supported": WARNING,
    "driver-version-branch": ERROR,
    "kata-version-gpu-passthrough": ERROR,
    "kernel-drift": WARNING,
    "imex-domain": ERROR,
    "nvlsm-release": ERROR,
    "open-kernel-modules-required": ERROR,
    "sandbox-driver-allow-list": ERROR,
    "sandbox-runtime-floating": ERROR,
    # blueprints/rules/stack.py
    "aws-ofi-nccl-instance-type": ERROR,
    "aws-ofi-nccl-nccl": ERROR,
    "container-image-driver": ERROR,
    "container-toolkit-driver": ERROR,
    "cuda-forward-compat": ERROR,
    "cuda-gpu-architecture": ERROR,
    "efa-env-capability": ERROR,
    "nccl-cuda-build": ERROR,
    "nccl-release-known": ERROR,
    "nccl-gpu-support": ERROR,
    "nccl-net-plugin-api": ERROR,
    "nccl-net-plugin-api-older": WARNING,
    "nccl-nvls": WARNING,
    "pytorch-cuda-driver": ERROR,
    "pytorch-cuda-tag": ERROR,
    "pytorch-gpu-architecture": ERROR,
    # blueprints/rules/storage.py
    "fsx-availability-zone": WARNING,
    "fsx-backup-scratch": ERROR,
    "fsx-deployment-feature": ERROR,
    "fsx-drive-cache": ERROR,
    "fsx-efa-clients": WARNING,
    "fsx-efa-requirements": ERROR,
    "fsx-hdd-persistent1": ERROR,
    "fsx-kms-persistent": ERROR,
    "fsx-lustre-version": ERROR,
    "fsx-metadata-iops": ERROR,
    "fsx-metadata-persistent2": ERROR,
    "fsx-only-on-aws": ERROR,
    "fsx-storage-capacity-step": ERROR,
    "fsx-throughput-required": ERROR,
    "fsx-throughput-scratch": ERROR,
    "fsx-throughput-value": ERROR,
    "lustre-client-source": ERROR,
    "lustre-nid-network": ERROR,
    "lustre-o2ib-ipoib": ERROR,
    "lustre-stripe-path": ERROR,
    "shared-mount-netdev": WARNING,
    # blueprints/rules/validation.py
    "amp-model-shape": ERROR,
    "fio-expectation-missing": WARNING,
    "fio-targets-mounted": ERROR,
    "nccl-bytes-range": ERROR,
    "nccl-check-off": WARNING,
    "nccl-suite-single-gpu": WARNING,
    "slurm-partition-name": ERROR,
    # blueprints/rules/workload.py
    "inference-kv-concurrency": WARNING,
    "inference-memory-fit": ERROR,
    "inference-memory-per-node": WARNING,
    "moe-alltoall": ERROR,
    "moe-fabric-bandwidth": WARNING,
    "parallel-fabric-demand": WARNING,
    "training-memory-fit": ERROR,
    "training-memory-headroom": WARNING,
    "workload-fp8-support": ERROR,
    "workload-model-known": ERROR,
    "workload-moe-fields": ERROR,
    "workload-parallel-layout": ERROR,
    "workload-shape": WARNING,
}


def test_table_is_the_reviewed_size() -> None:
    # counted by hand in the review above; a row added or dropped without the docstring's count moving is a slip
    assert len(SEVERITIES) == 195
    assert sum(1 for s in SEVERITIES.values() if s == ERROR) == 143
    assert sum(1 for s in SEVERITIES.values() if s == WARNING) == 52


def test_registry_has_exactly_these_rules_and_severities() -> None:
    registered = {r.id: r.severity for r in all_rules()}
    missing = sorted(set(SEVERITIES) - set(registered))
    unreviewed = sorted(set(registered) - set(SEVERITIES))
    assert not missing, f"rules in the reviewed table but not registered: {missing}"
    assert not unreviewed, f"registered rules without a reviewed severity (add a row here): {unreviewed}"
    changed = {k: (SEVERITIES[k], v) for k, v in registered.items() if v != SEVERITIES[k]}
    assert not changed, f"severity changed (reviewed, registered): {changed}"


@pytest.mark.parametrize("case", CASES, ids=str)
def test_firing_case_carries_the_reviewed_severity(case: Case, docs: dict[str, dict[str, Any]],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    text, _ = _build(docs, case.base, case.bad)
    findings = [f for f in _check(text, case, monkeypatch) if f.rule_id == case.rule]
    assert findings, f"{case.rule} did not fire on its firing case"
    assert {f.severity for f in findings} == {SEVERITIES[case.rule]}
    # the printed line says so too: a warning is prefixed, an error is not
    for f in findings:
        assert (": warning: " in f.format()) == (SEVERITIES[case.rule] == WARNING), f.format()


def test_every_rule_function_is_documented_and_written_docstrings_are_kept() -> None:
    # help() on a rule function describes it: an undocumented one gets the registry's text (id, severity, summary,
    # fix, source); one with its own docstring keeps it
    from blueprints.rules import registry

    own = {r.id for r in all_rules() if r.check.__doc__ and not r.check.__doc__.startswith(f"Rule ``{r.id}``")}
    for r in all_rules():
        assert r.check.__doc__, r.id
        if r.id not in own:
            assert r.check.__doc__.startswith(f"Rule ``{r.id}`` ({r.severity}): {r.summary}"), r.id
            assert f"Source: {r.source}" in r.check.__doc__, r.id

    def documented(ctx):  # type: ignore[no-untyped-def]
        """Its own words."""
        return iter(())

    def bare(ctx):  # type: ignore[no-untyped-def]
        return iter(())

    try:
        registry.rule("zz-documented", "warning", "s", "f", "https://example.org/a")(documented)
        registry.rule("zz-bare", "warning", "s", "f", "https://example.org/b")(bare)
        assert documented.__doc__ == "Its own words."
        assert bare.__doc__ and bare.__doc__.startswith("Rule ``zz-bare`` (warning): s")
    finally:
        registry._RULES.pop("zz-documented", None)
        registry._RULES.pop("zz-bare", None)


def test_a_registered_rule_cannot_be_downgraded_at_run_time() -> None:
    # the severities above are the reviewed ones: no code path (a plugin, a test helper) may lower one in the registry
    rule = next(r for r in all_rules() if r.id == "ssh-ingress-open")
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.severity = "warning"  # type: ignore[misc]
    assert next(r for r in all_rules() if r.id == "ssh-ingress-open").severity == "error"
