"""`stacks/` type-checks against the typed pulumi_aws / pulumi_kubernetes SDKs (what `make lint` runs)."""

from __future__ import annotations

import subprocess
import sys

from ..conftest import REPO
from ..roles.conftest import CACHE


def test_mypy_is_clean_on_stacks():
    # mypy's incremental cache lives in the machine-wide test cache, as the root filesystem does: a fresh clone's
    # run reuses what an earlier checkout analysed of the SDKs (pulumi_aws alone is about a minute), and mypy checks
    # each cached module against its source's hash, its own version and options before it trusts an entry
    # (https://mypy.readthedocs.io/en/stable/command_line.html#incremental-mode)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(CACHE / "mypy"), "stacks"], cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
