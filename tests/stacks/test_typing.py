"""`stacks/` type-checks against the typed pulumi_aws / pulumi_kubernetes SDKs (what `make lint` runs)."""

from __future__ import annotations

import subprocess
import sys

from ..conftest import REPO


def test_mypy_is_clean_on_stacks():
    proc = subprocess.run([sys.executable, "-m", "mypy", "stacks"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
