"""A blueprint is resolved once: only the resolved cluster (``blueprints/resolved.py``) calls the
functions that derive a group's node settings, hardware and EFA attachment, and no package keeps
its own list of "which groups count" (``Blueprint.gpu_groups`` is gone; the rules' helpers
``compute_groups`` / ``training_groups`` in ``blueprints/rules/_facts.py`` delegate to the resolved
cluster). Everyone else reads
``loaded.cluster`` / ``ctx.cluster`` / :func:`blueprints.resolved.resolve`.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("blueprints", "stacks", "validate", "clusterforge")
DERIVING = {"node_settings", "group_hardware", "efa_group", "cluster_settings", "assign_ipoib", "slurm_settings",
            "software_stack"}
# Where each may be called: its own module (helpers built on it) and the resolved cluster.
ALLOWED = {
    "blueprints/settings.py",  # node_settings itself (its body reads the group's hardware and EFA)
    "blueprints/slurm.py",  # slurm_settings: the cluster-wide peer of node_settings (each group's CPUs, memory, GPUs)
    "blueprints/software_stack.py",  # software_stack: the cluster-wide stack, defaults from every group's GPU architecture
    "blueprints/hardware.py",
    "blueprints/aws.py",
    "blueprints/resolved.py",
}


def _calls(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in DERIVING:
                out.append((node.lineno, name))
    return out


def test_only_the_resolved_cluster_derives_group_settings() -> None:
    bad = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel in ALLOWED:
                continue
            bad += [f"{rel}:{line}: {name}()" for line, name in _calls(path)]
    assert not bad, "derive through the resolved cluster (loaded.cluster / ctx.cluster / resolve(bp)):\n" + "\n".join(bad)


def test_no_second_definition_of_which_groups_count() -> None:
    bad = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            text = path.read_text()
            rel = path.relative_to(REPO).as_posix()
            for n, line in enumerate(text.splitlines(), 1):
                if ".gpu_groups" in line and "cluster" not in line and "def gpu_groups" not in line:
                    bad.append(f"{rel}:{n}: {line.strip()}")
                if (("def training_groups" in line or "def compute_groups" in line)
                        and rel not in ("blueprints/resolved.py", "blueprints/rules/_facts.py")):
                    bad.append(f"{rel}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)
