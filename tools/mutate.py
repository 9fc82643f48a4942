"""Mutation testing of the judge and rule areas with cosmic-ray (``make mutate``; not part of ``make test``).

Each module of an area is mutated one change at a time by cosmic-ray (https://cosmic-ray.readthedocs.io/,
operators: comparison, number, boolean, binary/unary operator, break/continue, exception replacement) and
that area's tests run against every mutant: a failing test run kills it, a passing one lets it survive.

The run happens in a throw-away copy of the committed tree (``git archive HEAD``), never in the checkout,
because cosmic-ray writes each mutant into the file on disk. Sessions (SQLite, resumable: a rerun with the
same commit continues where the last one stopped) and the report live under ``.clusterforge/mutate/``.

Usage::

    python tools/mutate.py                              # every area (tens of thousands of mutants: hours)
    python tools/mutate.py --area rules                 # one area
    python tools/mutate.py --module validate/parsers/nccl.py --max-seconds 900

Prints, per module, killed / survived / timeouts / pending and the score ``killed / (killed + survived)``
(timeouts count as killed: the tests noticed), then every survivor as ``file:line operator`` with its diff.
Exit 0 when it ran; 2 on usage errors or when the unmutated tests fail (the baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / ".clusterforge" / "mutate"


@dataclass(frozen=True)
class Area:
    """A mutated area: the modules (files or folders, repository-relative) and the tests that guard them."""

    modules: tuple[str, ...]
    tests: tuple[str, ...]


AREAS: dict[str, Area] = {
    "rules": Area(("blueprints/rules",), (
        "tests/blueprints/test_rules.py", "tests/blueprints/test_rule_severities.py",
        "tests/blueprints/test_stack_rules.py", "tests/blueprints/test_aws_rules.py",
        "tests/blueprints/test_field_rules.py", "tests/blueprints/test_slurm.py",
        "tests/blueprints/test_lustre_client_source.py")),
    "suites": Area(("validate/suites",), (
        "tests/validate/test_judge.py", "tests/validate/test_judge_accelerators.py",
        "tests/validate/test_judge_counts.py", "tests/validate/test_judge_diagnosis.py",
        "tests/validate/test_judge_failure_lines.py", "tests/validate/test_judge_fio_consistency.py",
        "tests/validate/test_judge_log_causes.py", "tests/validate/test_judge_boundaries.py",
        "tests/validate/test_suites.py", "tests/validate/test_node_suite.py", "tests/validate/test_profile.py",
        "tests/validate/test_faults.py", "tests/validate/test_stack_versions.py")),
    "parsers": Area(("validate/parsers",), (
        "tests/validate/test_parsers.py", "tests/validate/test_nccl_parser_lines.py",
        "tests/validate/test_judge_boundaries.py", "tests/validate/test_big_inputs.py",
        "tests/validate/test_untrusted_outputs.py", "tests/validate/test_judge.py",
        "tests/validate/test_judge_failure_lines.py", "tests/validate/test_judge_counts.py")),
    "node_checks": Area(("validate/node_checks.py",), (
        "tests/validate/test_node_checks.py", "tests/validate/test_node_suite.py")),
}


def _modules(area: Area) -> list[str]:
    out: list[str] = []
    for m in area.modules:
        p = ROOT / m
        out += sorted(str(f.relative_to(ROOT)) for f in p.rglob("*.py")) if p.is_dir() else [m]
    return out


def _area_of(module: str) -> Area | None:
    """The area ``module`` (repository-relative path) belongs to, ``None`` when it is in none."""
    for a in AREAS.values():
        if any(module == m or module.startswith(m.rstrip("/") + "/") for m in a.modules):
            return a
    return None


def _copy_tree(commit: str) -> Path:
    work = STATE / f"tree-{commit[:12]}"
    if not (work / "pyproject.toml").exists():
        work.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
    return work


def _config(work: Path, module: str, tests: tuple[str, ...], timeout_s: float) -> Path:
    cmd = " ".join(shlex.quote(x) for x in (sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                               "-p", "no:xdist", *tests))
    cfg = STATE / (module.replace("/", "+") + ".toml")
    cfg.write_text(
        "[cosmic-ray]\n"
        f"module-path = {json.dumps([module])}\n"
        f"timeout = {timeout_s:.0f}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(cmd)}\n"
        "[cosmic-ray.distributor]\n"
        'name = "local"\n')
    return cfg


def _cr(*args: str, cwd: Path, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("cosmic-ray")
    return subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def _exec_until(cfg: Path, session: Path, work: Path, deadline: float) -> None:
    """``cosmic-ray exec`` until done or ``deadline`` (then its process group is stopped; finished mutants are kept)."""
    exe = Path(sys.executable).with_name("cosmic-ray")
    proc = subprocess.Popen([str(exe), "exec", str(cfg), str(session)], cwd=work, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 15)
        proc.wait()


def _restore(work: Path, module: str, commit: str) -> None:
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{module}"], capture_output=True, check=True).stdout
    (work / module).write_bytes(text)


def _summary(session: Path, work: Path) -> tuple[dict[str, int], list[dict[str, object]]]:
    dump = _cr("dump", str(session), cwd=work)
    counts = {"killed": 0, "survived": 0, "timeout": 0, "incompetent": 0, "pending": 0}
    survivors: list[dict[str, object]] = []
    for line in dump.stdout.splitlines():
        item, result = json.loads(line)
        if result is None:
            counts["pending"] += 1
            continue
        if result.get("worker_outcome") == "timeout":
            counts["timeout"] += 1
        elif result.get("test_outcome") == "killed":
            counts["killed"] += 1
        elif result.get("test_outcome") == "survived":
            counts["survived"] += 1
            m = item["mutations"][0]
            survivors.append({"where": f"{m['module_path']}:{m['start_pos'][0]}", "operator": m["operator_name"],
                              "function": m.get("definition_name"), "diff": result.get("diff", "")})
        else:
            counts["incompetent"] += 1
    return counts, survivors


def main(argv: list[str] | None = None) -> int:
    """Run the mutation session(s) asked for and print the score and survivors; see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--area", action="append", choices=sorted(AREAS), help="an area to mutate (repeatable)")
    ap.add_argument("--module", action="append", help="one module (a .py file inside an area; repeatable)")
    ap.add_argument("--max-seconds", type=float, default=None, help="stop starting mutants after this long")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds one mutant's tests may take (then: killed)")
    args = ap.parse_args(argv)
    start = time.monotonic()
    deadline = start + args.max_seconds if args.max_seconds else float("inf")

    jobs: list[tuple[str, tuple[str, ...]]] = []
    for m in args.module or []:
        if not (ROOT / m).is_file():
            print(f"mutate: {m}: no such file (give a path relative to the repository root)", file=sys.stderr)
            return 2
        area = _area_of(m)
        if area is None or not m.endswith(".py"):
            print(f"mutate: {m} is in no area ({', '.join(AREAS)}); name a .py file under "
                  f"{', '.join(x for a in AREAS.values() for x in a.modules)}", file=sys.stderr)
            return 2
        jobs.append((m, area.tests))
    for name in args.area or ([] if args.module else sorted(AREAS)):
        jobs += [(m, AREAS[name].tests) for m in _modules(AREAS[name])]

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    STATE.mkdir(parents=True, exist_ok=True)
    work = _copy_tree(commit)
    print(f"mutating commit {commit[:12]} in {work} (committed code only)")
    total = {"killed": 0, "survived": 0, "timeout": 0, "incompetent": 0, "pending": 0}
    all_survivors: list[dict[str, object]] = []
    checked_baselines: set[tuple[str, ...]] = set()
    for module, tests in jobs:
        missing = [t for t in tests if not (work / t).exists()]
        if missing:
            print(f"mutate: the tests of {module} are not in commit {commit[:12]}: {', '.join(missing)} "
                  "(commit them, or fix AREAS in tools/mutate.py)", file=sys.stderr)
            return 2
        cfg = _config(work, module, tests, args.timeout)
        session = STATE / f"{module.replace('/', '+')}-{commit[:12]}.sqlite"
        if not session.exists():
            init = _cr("init", str(cfg), str(session), cwd=work)
            if init.returncode:
                print(f"mutate: cosmic-ray init failed for {module}: {init.stderr.strip()[-500:]}", file=sys.stderr)
                return 2
        if tests not in checked_baselines:
            base = _cr("baseline", str(cfg), cwd=work)
            if base.returncode:
                print(f"mutate: the unmutated tests fail for {module} ({' '.join(tests)}): fix them first\n"
                      f"{base.stdout[-1500:]}{base.stderr[-1500:]}", file=sys.stderr)
                return 2
            checked_baselines.add(tests)
        t0 = time.monotonic()
        if t0 < deadline:
            _exec_until(cfg, session, work, deadline)
            _restore(work, module, commit)  # a run stopped mid-mutant leaves the mutant on disk
        counts, survivors = _summary(session, work)
        for k, v in counts.items():
            total[k] += v
        all_survivors += survivors
        judged = counts["killed"] + counts["timeout"] + counts["survived"]
        score = f"{(counts['killed'] + counts['timeout']) / judged:.1%}" if judged else "-"
        print(f"{module}: killed {counts['killed']}, timeout {counts['timeout']}, survived {counts['survived']}, "
              f"incompetent {counts['incompetent']}, pending {counts['pending']}; score {score} "
              f"({time.monotonic() - t0:.0f} s)")
    judged = total["killed"] + total["timeout"] + total["survived"]
    print(f"total: {judged} judged, {total['pending']} pending; score "
          f"{(total['killed'] + total['timeout']) / judged:.1%}" if judged else "total: nothing judged")
    print(f"elapsed {time.monotonic() - start:.0f} s")
    for s in all_survivors:
        print(f"\nsurvived: {s['where']} {s['operator']} (in {s['function']})\n{s['diff']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
