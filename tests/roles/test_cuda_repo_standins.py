"""The stand-in CUDA repositories against the recorded index metadata they are built from (tests/fixtures/cuda-repos).

The converges are only as faithful as the stand-ins: each recorded driver package version must be what the stand-in
builder gives that directory at that release (the revision rules reproduce every recorded revision, Debian's ``-1``
and Ubuntu's ``-0ubuntu1`` / ``-1ubuntu1``), and the packages the roles install must exist there under the names the
catalog gives each distribution.
"""

from __future__ import annotations

import pytest

from blueprints.vendor import compute_only_packages, driver_packages

from .cuda_repos import dcgm_debs, driver_debs, legacy_dcgm_debs, load_index

RECORDED = ["debian12-x86_64", "ubuntu2204-x86_64", "ubuntu2404-x86_64", "ubuntu2404-sbsa"]
OSES = {"debian12": "debian-12", "ubuntu2204": "ubuntu-22.04", "ubuntu2404": "ubuntu-24.04"}


@pytest.mark.parametrize("name", RECORDED)
def test_every_recorded_driver_version_is_what_the_standin_gives_that_release(name):
    index = load_index(name)
    # the driver's packages (cuda-compat-<X>-<Y> is versioned by the driver but packaged apart: 550.90.07-1 on ubuntu2404)
    recorded = [s for s in index.stanzas if s["Package"].startswith(("nvidia-", "libnvidia-", "cuda-drivers"))]
    assert recorded, name
    for s in recorded:
        upstream, rev = s["Version"].rsplit("-", 1)
        assert index.revision(upstream) == rev, (name, s["Package"], s["Version"])
        if "Filename" in s:  # the index's file name carries the same version and the directory's architecture
            assert s["Filename"].endswith(f"_{upstream}-{rev}_{s['Architecture']}.deb"), s


@pytest.mark.parametrize("dist", sorted(OSES))
@pytest.mark.parametrize("release", ["580.105.08", "580.173.02"])
@pytest.mark.parametrize("open_modules", [True, False])
def test_the_roles_packages_exist_in_each_directory_at_its_revision(dist, release, open_modules):
    """What `render` pins for a node of that distribution (its compute-only set, Fabric Manager and NSCQ as a version
    pattern, DCGM for the driver's CUDA) is what the stand-in of that directory carries, and nothing matches the
    pattern of another release."""
    debs = {d.name: d.version for d in driver_debs(dist, release)}
    expect = compute_only_packages(os=OSES[dist], branch=release.split(".")[0], open_modules=open_modules)
    revision = load_index(f"{dist}-x86_64").revision(release)
    assert {n: debs.get(n) for n in expect} == {n: f"{release}-{revision}" for n in expect}
    # the desktop-and-compute meta-packages are there too (what the roles used to install), not in the pinned set
    assert {"nvidia-open", "cuda-drivers"} <= set(debs)
    p = driver_packages(os=OSES[dist], branch="580", version=release, open_modules=open_modules, nvlink_gen=4,
                        fabric_manager=True, dcgm=True, cuda="12.8")
    dcgm = {d.name: d.version for d in dcgm_debs("1:4.5.2")}
    for spec in p.dcgm_packages:
        name, pattern = spec.split("=")
        assert name in dcgm and dcgm[name].startswith(pattern.rstrip("*")), (spec, dcgm)


def test_the_recorded_dcgm_3_package_conflicts_with_what_dcgm_4_replaces():
    """DCGM 4's core conflicts with DCGM 3 (NVIDIA/DCGM packaging.cmake); the recorded DCGM 3 stanzas of the debian12
    and ubuntu2404 indexes are that package."""
    core = next(d for d in dcgm_debs("1:4.5.2") if d.name == "datacenter-gpu-manager-4-core")
    assert "datacenter-gpu-manager" in core.conflicts
    for dist in ("debian12", "ubuntu2404"):
        (legacy,) = legacy_dcgm_debs(dist)
        assert legacy.name == "datacenter-gpu-manager" and legacy.version.startswith("1:3.")
