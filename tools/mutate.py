"""Mutation testing of the judge and rule areas with cosmic-ray (``make mutate``; not part of ``make test``).

Each module of an area is mutated one change at a time by cosmic-ray (https://cosmic-ray.readthedocs.io/,
operators: comparison, number, boolean, binary/unary operator, break/continue, exception replacement) and
that area's tests run against every mutant: a failing test run kills it, a passing one lets it survive.

The run happens in a throw-away copy of the committed tree (``git archive HEAD``), never in the checkout,
because cosmic-ray writes each mutant into the file on disk. Sessions (SQLite) live under ``.clusterforge/mutate/``,
one per module content and sample: a rerun continues where the last one stopped, and after a commit that changed
the tests or a run with another test list (the module unchanged) the survivors are judged again with the new tests
while the mutants already killed stay killed (tests are only ever added; ``--fresh`` judges everything again).

Mutants that cannot change behaviour by construction are not run and are counted apart: a change inside a type
annotation (every module here has ``from __future__ import annotations``, so annotations are never evaluated;
cosmic-ray still makes eleven ``X | None`` -> ``X + None``... mutants per annotation). ``--sample N`` judges a fixed
pseudo-random sample of N of the remaining mutants (the same N for the same module and seed, so a rerun after
new tests judges the same mutants); the rest are counted as not sampled.

Usage::

    python tools/mutate.py                              # every area (tens of thousands of mutants: hours)
    python tools/mutate.py --area rules                 # one area
    python tools/mutate.py --module validate/parsers/nccl.py --max-seconds 900
    python tools/mutate.py --module validate/parsers/nccl.py --sample 300 \
        --tests tests/validate/test_nccl_parser_lines.py --tests tests/validate/test_parsers.py

Prints, per module, killed / survived / timeouts / pending and the score ``killed / (killed + survived)``
(timeouts count as killed: the tests noticed), then every survivor as ``file:line operator`` with its diff.
``--tests`` replaces the area's test list for the modules named (a smaller list makes each mutant cheaper).
Exit 0 when it ran; 2 on usage errors or when the unmutated tests fail (the baseline).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / ".clusterforge" / "mutate"
ANNOTATION = "inside a type annotation (never evaluated: equivalent)"
NOT_SAMPLED = "not in the sample"


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
        "tests/blueprints/test_lustre_client_source.py", "tests/blueprints/test_rule_edges.py",
        "tests/blueprints/test_secret_scan_edges.py", "tests/blueprints/test_rule_messages.py",
        "tests/blueprints/test_rule_branches.py")),
    "suites": Area(("validate/suites",), (
        "tests/validate/test_judge.py", "tests/validate/test_judge_accelerators.py",
        "tests/validate/test_judge_counts.py", "tests/validate/test_judge_diagnosis.py",
        "tests/validate/test_judge_failure_lines.py", "tests/validate/test_judge_fio_consistency.py",
        "tests/validate/test_judge_log_causes.py", "tests/validate/test_judge_boundaries.py",
        "tests/validate/test_suites.py", "tests/validate/test_node_suite.py", "tests/validate/test_profile.py",
        "tests/validate/test_faults.py", "tests/validate/test_stack_versions.py",
        "tests/validate/test_judged_fixtures.py", "tests/validate/test_judge_mig.py", "tests/validate/test_judge_pkey.py",
        "tests/validate/test_suite_branches.py")),
    "parsers": Area(("validate/parsers",), (
        "tests/validate/test_parsers.py", "tests/validate/test_nccl_parser_lines.py",
        "tests/validate/test_judge_boundaries.py", "tests/validate/test_big_inputs.py",
        "tests/validate/test_untrusted_outputs.py", "tests/validate/test_judge.py",
        "tests/validate/test_judge_failure_lines.py", "tests/validate/test_judge_counts.py",
        "tests/validate/test_node_checks.py",  # the node-health parser (parsers/node.py) is read by the node checks
        "tests/validate/test_parsed_fixtures.py", "tests/validate/test_judged_fixtures.py",
        "tests/validate/test_judge_fio_consistency.py", "tests/validate/test_judge_diagnosis.py",
        "tests/validate/test_judge_accelerators.py", "tests/validate/test_parser_branches.py")),
    "node_checks": Area(("validate/node_checks.py",), (
        "tests/validate/test_node_checks.py", "tests/validate/test_node_suite.py",
        "tests/validate/test_node_check_branches.py")),
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


PYTEST_ARGS = ("-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist")


def _config(work: Path, module: str, tests: tuple[str, ...], timeout_s: float, cover: Path | None) -> Path:
    if cover is None:
        cmd = " ".join(shlex.quote(x) for x in (sys.executable, "-m", "pytest", *PYTEST_ARGS, *tests))
    else:
        cmd = " ".join(shlex.quote(x) for x in (sys.executable, str(Path(__file__).resolve()), "--run-mutant", module,
                                                   "--cover-map", str(cover), *tests))
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


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The ``((line, col), (end_line, end_col))`` spans of every type annotation in ``source``.

    Lines count from 1, columns are characters from 0 (cosmic-ray's parso positions; ``ast`` gives UTF-8 byte
    offsets, converted here). Covers argument and return annotations and annotated assignments' annotations.
    """
    lines = source.splitlines()

    def col(line: int, byte_off: int) -> int:
        return len(lines[line - 1].encode()[:byte_off].decode(errors="ignore"))

    spans = []
    for node in ast.walk(ast.parse(source)):
        anns: list[ast.expr | None] = []
        if isinstance(node, ast.arg):
            anns.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            anns.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            anns.append(node.annotation)
        for a in anns:
            if a is not None and a.end_lineno is not None and a.end_col_offset is not None:
                spans.append(((a.lineno, col(a.lineno, a.col_offset)), (a.end_lineno, col(a.end_lineno, a.end_col_offset))))
    return spans


def _sample_key(seed: int, operator: str, occurrence: int) -> str:
    return hashlib.sha256(f"{seed}:{operator}:{occurrence}".encode()).hexdigest()


def stable_keys(specs: list[tuple[str, int]], source: str) -> list[tuple[str, str, int]]:
    """For mutants given as ``(operator, line)``: ``(operator, the line's text stripped, n)`` where ``n`` counts the
    same operator on identical lines before it. Unlike cosmic-ray's occurrence numbers these stay the same when
    other lines of the module change, so an earlier session's results can be matched to a new one."""
    lines = source.split("\n")
    seen: dict[tuple[str, str], int] = {}
    out = []
    for op, row in specs:
        text = lines[row - 1].strip() if 0 < row <= len(lines) else ""
        n = seen.get((op, text), 0)
        seen[(op, text)] = n + 1
        out.append((op, text, n))
    return out


def _keyed(db: Any, source: str) -> dict[tuple[str, str, int], str]:
    items = sorted(db.work_items, key=lambda i: (tuple(i.mutations[0].start_pos), i.mutations[0].operator_name,
                                                  i.mutations[0].occurrence))
    keys = stable_keys([(i.mutations[0].operator_name, i.mutations[0].start_pos[0]) for i in items], source)
    return {k: i.job_id for k, i in zip(keys, items)}


def _prepare(session: Path, source: str, sample: int | None, seed: int, previous: tuple[Path, str] | None) -> int:
    """Mark as skipped the pending mutants inside annotations, then all but ``sample`` of the rest. With
    ``previous`` (an earlier session of the same module and sample, and the module's text then), the mutants on
    unchanged lines take its sample and results (see :func:`stable_keys`); returns how many results were carried."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    spans = annotation_spans(source)
    old: dict[tuple[str, str, int], WorkResult | None] = {}
    if previous is not None:
        with use_db(str(previous[0]), WorkDB.Mode.open) as pdb:
            results = dict(pdb.results)
            old = {k: results.get(job) for k, job in _keyed(pdb, previous[1]).items()}
    carried = 0
    with use_db(str(session)) as db:
        pending = {i.job_id for i in db.pending_work_items}
        candidates = []
        items = {i.job_id: i for i in db.work_items}
        for key, job in _keyed(db, source).items():
            if job not in pending:
                continue
            mut = items[job].mutations[0]
            start, end = tuple(mut.start_pos), tuple(mut.end_pos)
            if any(a <= start and end <= b for a, b in spans):
                db.set_result(job, WorkResult(output=ANNOTATION, worker_outcome=WorkerOutcome.SKIPPED))
            elif key in old:
                res = old[key]
                if res is not None:
                    db.set_result(job, res)
                    carried += res.worker_outcome != WorkerOutcome.SKIPPED
            else:
                candidates.append((_sample_key(seed, mut.operator_name, mut.occurrence), job))
        if sample is not None:
            candidates.sort()
            if old:  # the earlier sample stands; new lines join it at the sample's rate
                total = sum(1 for r in old.values() if r is None or r.output != ANNOTATION)
                take = round(len(candidates) * sample / max(total, 1))
            else:
                take = sample
            rest = [job for _, job in candidates[take:]]
            if rest:
                db.set_multiple_results(rest, WorkResult(output=NOT_SAMPLED, worker_outcome=WorkerOutcome.SKIPPED))
    return carried


def _previous_session(module: str, session: Path, sample: int | None, seed: int) -> tuple[Path, str] | None:
    """The newest other session of ``module`` with the same sample and seed, and the module's text it mutated."""
    found = []
    for other in STATE.glob(f"{module.replace('/', '+')}-*.sqlite"):
        meta, src = other.with_suffix(".meta"), other.with_suffix(".source")
        if other != session and meta.exists() and src.exists() and \
                json.loads(meta.read_text()) == {"sample": sample, "seed": seed}:
            found.append((other.stat().st_mtime, other, src.read_text()))
    return max(found)[1:] if found else None


def _rejudge_survivors(session: Path) -> int:
    """Forget the results of survived mutants (they run again with the new tests); returns how many."""
    import sqlite3

    con = sqlite3.connect(session)
    with con:
        n = con.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED'").rowcount
    con.close()
    return n


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


COUNTS = ("killed", "survived", "timeout", "incompetent", "pending", "annotation", "not sampled")


def _summary(session: Path, work: Path) -> tuple[dict[str, int], list[dict[str, object]]]:
    dump = _cr("dump", str(session), cwd=work)
    counts = dict.fromkeys(COUNTS, 0)
    survivors: list[dict[str, object]] = []
    for line in dump.stdout.splitlines():
        item, result = json.loads(line)
        if result is None:
            counts["pending"] += 1
            continue
        if result.get("worker_outcome") == "skipped":
            counts["annotation" if result.get("output") == ANNOTATION else "not sampled"] += 1
        elif result.get("worker_outcome") == "timeout":
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


def _in_work_tree() -> None:
    """Import the packages from the current directory (the mutated copy), not the editable install's checkout."""
    sys.path.insert(0, os.getcwd())


def _write_cover_maps(plan: Path, tests: list[str]) -> int:
    """(In the work tree) run ``tests`` once under :class:`LineTracer` for every module of ``plan`` (a JSON file:
    module path -> the coverage map's output path) and write each module's map: one traced run serves an area."""
    import pytest
    from mutate_cover import LineTracer

    _in_work_tree()
    outs = {m: Path(o) for m, o in json.loads(plan.read_text()).items()}
    tracer = LineTracer([Path(m) for m in outs])
    rc = pytest.main([*PYTEST_ARGS[1:], *tests], plugins=[tracer])
    for module, out in outs.items():
        cover = tracer.result(Path(module))
        source = Path(module).read_text()
        if not cover["outside"] and ast.parse(source).body:
            print(f"mutate: {module} was not imported from {os.getcwd()} (an installed copy shadows it?)",
                  file=sys.stderr)
            return 2
        cover["source"] = source
        out.write_text(json.dumps(cover))
    return int(rc)


def _run_mutant(module: str, cover_map: Path, tests: list[str]) -> int:
    """(In the work tree, as cosmic-ray's test command) run the tests that execute the mutated lines; exit status
    non-zero kills the mutant."""
    import pytest
    from mutate_cover import Only, changed_lines, select

    _in_work_tree()
    cover = json.loads(cover_map.read_text())
    chosen = select(cover, changed_lines(cover["source"], Path(module).read_text()))
    if chosen is not None:
        files = [t for t in tests if any(n.split("::")[0] == t for n in chosen)]  # collect only those files
        rc = pytest.main([*PYTEST_ARGS, *files], plugins=[Only(chosen)])
        if rc != pytest.ExitCode.NO_TESTS_COLLECTED:
            return int(rc)
    return int(pytest.main([*PYTEST_ARGS, *tests]))


def main(argv: list[str] | None = None) -> int:
    """Run the mutation session(s) asked for and print the score and survivors; see the module docstring."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--run-mutant"] and len(argv) >= 4 and argv[2] == "--cover-map":
        return _run_mutant(argv[1], Path(argv[3]), argv[4:])
    if argv[:1] == ["--write-cover-maps"] and len(argv) >= 2:
        return _write_cover_maps(Path(argv[1]), argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--area", action="append", choices=sorted(AREAS), help="an area to mutate (repeatable)")
    ap.add_argument("--module", action="append", help="one module (a .py file inside an area; repeatable)")
    ap.add_argument("--max-seconds", type=float, default=None, help="stop starting mutants after this long")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds one mutant's tests may take (then: killed)")
    ap.add_argument("--tests", action="append", help="a test file to run instead of the area's list (repeatable)")
    ap.add_argument("--sample", type=int, default=None, help="judge only this many mutants per module (fixed sample)")
    ap.add_argument("--seed", type=int, default=35, help="the sample's seed")
    ap.add_argument("--fresh", action="store_true", help="judge every mutant again, killed ones included")
    ap.add_argument("--module-at", metavar="COMMIT", help="mutate the modules as they were at COMMIT (the tests are "
                    "HEAD's): keeps a session while others change the module; the tests must pass against it")
    ap.add_argument("--select", choices=("covering", "all"), default="covering",
                    help="run only the tests that execute the mutated lines (default), or every test of the list")
    args = ap.parse_args(argv)
    if args.sample is not None and args.sample < 1:
        print("mutate: --sample takes a positive number of mutants", file=sys.stderr)
        return 2
    for t in args.tests or []:
        if not (ROOT / t).exists():
            print(f"mutate: --tests {t}: no such file (give a path relative to the repository root)", file=sys.stderr)
            return 2
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
        jobs.append((m, tuple(args.tests) if args.tests else area.tests))
    for name in args.area or ([] if args.module else sorted(AREAS)):
        jobs += [(m, tuple(args.tests) if args.tests else AREAS[name].tests) for m in _modules(AREAS[name])]

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    STATE.mkdir(parents=True, exist_ok=True)
    work = _copy_tree(commit)
    print(f"mutating commit {commit[:12]} in {work} (committed code only)")
    total = dict.fromkeys(COUNTS, 0)
    tests_tree = subprocess.run(["git", "-C", str(ROOT), "rev-parse", f"{commit}:tests"], capture_output=True,
                                text=True, check=True).stdout.strip()
    all_survivors: list[dict[str, object]] = []
    checked_baselines: set[tuple[str, ...]] = set()
    module_commit = args.module_at or commit
    sessions: dict[str, Path] = {}
    maps: dict[tuple[str, ...], dict[str, str]] = {}  # test list -> {module: coverage map to write}
    for module, tests in jobs:
        missing = [t for t in tests if not (work / t).exists()]
        if missing:
            print(f"mutate: the tests of {module} are not in commit {commit[:12]}: {', '.join(missing)} "
                  "(commit them, or fix AREAS in tools/mutate.py)", file=sys.stderr)
            return 2
        _restore(work, module, module_commit)
        source = (work / module).read_text()
        key = hashlib.sha256(json.dumps([source, args.sample, args.seed]).encode()).hexdigest()[:12]
        sessions[module] = STATE / f"{module.replace('/', '+')}-{key}.sqlite"
        cover_path = sessions[module].with_suffix(f".cover-{commit[:12]}.json")
        if args.select == "covering" and not cover_path.exists():
            maps.setdefault(tests, {})[module] = str(cover_path)
    for tests, outs in maps.items():  # one traced run of a test list maps every module it guards
        plan = STATE / f"cover-plan-{os.getpid()}.json"
        plan.write_text(json.dumps(outs))
        made = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--write-cover-maps", str(plan), *tests],
                              cwd=work, capture_output=True, text=True, check=False)
        plan.unlink(missing_ok=True)
        if made.returncode:
            for o in outs.values():
                Path(o).unlink(missing_ok=True)
            print(f"mutate: the unmutated tests fail for {', '.join(outs)} ({' '.join(tests)}): fix them first\n"
                  f"{made.stdout[-1500:]}{made.stderr[-1500:]}", file=sys.stderr)
            return 2
    for module, tests in jobs:
        _restore(work, module, module_commit)
        source = (work / module).read_text()
        session = sessions[module]
        judged_with = session.with_suffix(".tests")
        cover: Path | None = session.with_suffix(f".cover-{commit[:12]}.json") if args.select == "covering" else None
        cfg = _config(work, module, tests, args.timeout, cover)
        judged_key = json.dumps([tests_tree, args.select, tests])
        if args.fresh and session.exists():
            session.unlink()
        if not session.exists():
            init = _cr("init", str(cfg), str(session), cwd=work)
            if init.returncode:
                print(f"mutate: cosmic-ray init failed for {module}: {init.stderr.strip()[-500:]}", file=sys.stderr)
                return 2
            previous = None if args.fresh else _previous_session(module, session, args.sample, args.seed)
            carried = _prepare(session, source, args.sample, args.seed, previous)
            session.with_suffix(".source").write_text(source)
            session.with_suffix(".meta").write_text(json.dumps({"sample": args.sample, "seed": args.seed}))
            if previous is not None:
                again = _rejudge_survivors(session)
                print(f"{module}: {carried} result(s) carried from {previous[0].name}, an earlier session of this module "
                      f"(mutants on unchanged lines; its {again} survivor(s) judged again; --fresh judges all again)")
        elif not judged_with.exists() or judged_with.read_text() != judged_key:
            n = _rejudge_survivors(session)
            judged_with.write_text(judged_key)
            print(f"{module}: the tests or the selection changed since the last run: {n} survivor(s) judged again")
        if cover is None and tests not in checked_baselines:
            base = _cr("baseline", str(cfg), cwd=work)
            if base.returncode:
                print(f"mutate: the unmutated tests fail for {module} ({' '.join(tests)}): fix them first\n"
                      f"{base.stdout[-1500:]}{base.stderr[-1500:]}", file=sys.stderr)
                return 2
            checked_baselines.add(tests)
        t0 = time.monotonic()
        if t0 < deadline:
            _exec_until(cfg, session, work, deadline)
            _restore(work, module, module_commit)  # a run stopped mid-mutant leaves the mutant on disk
        counts, survivors = _summary(session, work)
        for k, v in counts.items():
            total[k] += v
        all_survivors += survivors
        judged = counts["killed"] + counts["timeout"] + counts["survived"]
        score = f"{(counts['killed'] + counts['timeout']) / judged:.1%}" if judged else "-"
        at = f" (the module at {module_commit[:12]})" if args.module_at else ""
        print(f"{module}{at}: killed {counts['killed']}, timeout {counts['timeout']}, survived {counts['survived']}, "
              f"incompetent {counts['incompetent']}, pending {counts['pending']}, in annotations (not run) "
              f"{counts['annotation']}, not sampled {counts['not sampled']}; score {score} "
              f"({time.monotonic() - t0:.0f} s; tests: {' '.join(tests)})")
    judged = total["killed"] + total["timeout"] + total["survived"]
    print(f"total: {judged} judged, {total['pending']} pending; score "
          f"{(total['killed'] + total['timeout']) / judged:.1%}" if judged else "total: nothing judged")
    print(f"elapsed {time.monotonic() - start:.0f} s")
    for s in all_survivors:
        print(f"\nsurvived: {s['where']} {s['operator']} (in {s['function']})\n{s['diff']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
