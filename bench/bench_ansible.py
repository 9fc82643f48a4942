"""Benchmark: the bare-metal path — rendering at scale and real converges on a root filesystem.

1. Render: the ``onprem-dgx-h100-ib`` example grown to N DGX hosts (default 1000, plus the mgmt host):
   wall seconds for load + rules, ``render_ansible`` (inventory, group_vars, roles copy) and
   ``plan_ansible``, and the size of the rendered inventory.
2. Converge (needs root and debootstrap): each (example, OS) pair of the converge tests run with ``run_site``
   against root filesystems through the chroot connection (one per node group, prepared as the converge tests
   prepare them: Ubuntu releases are Debian roots whose os-release says Ubuntu, with the stand-in Ubuntu archive
   packages Debian's lacks), with the vendor installs on against the stand-in vendor repositories
   of the tests (NVIDIA driver stack, container toolkit, Kata) served on 127.0.0.1: first converge wall
   time, idempotent rerun wall time, the CPU seconds of each (this process and its children: ansible-playbook,
   its workers, the modules in the chroots; steadier than wall time on a shared machine), the load average,
   task results, changed tasks. The first converge includes the apt installs (Debian downloads come from the
   shared .deb cache after the first machine-wide run). Target: the DGX example's rerun under 30 s.
   ``--profile`` prints where the rerun's seconds went (per role, per module, slowest tasks, from the runner's
   job events); ``--keep DIR`` keeps the runner artefacts.

Where a rerun's time goes (DGX example, 2 chroot hosts): every module run costs a few tenths of a second of
controller and host CPU, apt 1-2.5 s (it opens the whole package cache), a template or copy two module runs.
The roles probe once per role (one ``clusterforge_package_probe`` run, a ``dpkg-query``; one ``clusterforge_file_probe`` run for file checksums, unit
enablement and existence checks) and run the writers only for what differs (roles/README.md, "Reruns"). CPU seconds are the comparable figure on a shared machine; wall
time scales with the load average.

| DGX example, ubuntu-22.04 | first converge | rerun | rerun CPU s | load average |
|---|---|---|---|---|
| before the probes, quiet machine | 90 s | 65 s | | about 1.8 |
| before the probes, shared machine | 361 s | 337 s | 95.7 | about 15 |
| with the probes, shared machine | 429 s | 141 s | 48.0 | about 11 |
| with the probes and the payload probe, quiet machine | 93-99 s | 31.2-31.6 s | 44.0 | 1.4-1.5 |
| the same, shared machine (184 tasks not skipped) | 525 s | 211 s | 52.6 | about 29 |
| one probe module run for files, units and existence checks, shared machine (161 not skipped) | 505 s | 151 s | 36.6 | about 25 |
| the same plus the Lustre source, LNet-at-boot and HWE changes, quiet machine (160 not skipped, 0 changed) | 100.5 s | 26.5 s | 37.3 | 1.6 |
| the same plus LNet discovery only when asked for (its file probe) and unit names from the catalog, quietish machine (160 not skipped, 0 changed; force-unsafe-io in the test roots) | 101.0 s | 28.8 s | 41.2 | 1.5 |
| lustre_client's templates behind its file probe (one probe run before install and configure), quiet machine (152 not skipped, 0 changed) | 100.7 s | 23.4 s | 32.3 | 1.5 |
| the same plus minimal fact gathering (`gather_subset: ['!all', is_chroot]`), quiet machine (152 not skipped, 0 changed) | 87.1 s | 22.1 s | 31.0 | 1.3 |
| the same with the packages read by the shared `clusterforge_package_probe` (one module run per role instead of a command and a set_fact), facts in one play, quiet machine (142 not skipped, 0 changed) | 104.2 s | 23.8 s | 33.8 | 1.5 |
| issue 28's roles (DCGM, IMEX, Fabric Manager checks, DOCA, CUDA repository pins; 207 not skipped, 0 changed), quiet machine | 152.4 s | 30.4 s | 40.2 | about 1.4 |
| the same, 2026-12-03 07:55, another session's tests beside it | 176.0 s | 43.9 s | 58.2 | 1.7 |
| the bench's roots prepared as the tests' (stand-in Ubuntu archive; before, apt met `linux-headers-generic` through Debian's `linux-headers-amd64` and ran on every rerun), rdma's opensm script behind its probe (205 not skipped, 0 changed), 09:26, nothing else running | 263.6 s | 51.5 s | 65.2 | 1.7 |
| every file write skipped on a rerun when the file is right (ec4f37c; 202 not skipped, 0 changed), 2026-12-03 15:22, a test run beside it part of the time | 206.6 s | 50.4 s | 54.2 | 2.3 |
| the same, 15:37, the mutation sample at nice 19 beside it | 239.1 s | 58.9 s | 57.4 | 3.0 |
| 940cb91 on 2026-12-03 (next session), 19:41, the mutation sample at nice 19 beside it (352 task starts) | 213.4 s | 44.7 s | 45.9 | 2.8 |
| the same, 19:51, nothing else running | 140.1 s | 31.2 s | 41.9 | 1.3 |
| every play but munge's with `strategy: free` (an experiment, not kept), 20:08 | 154.6 s | 30.2 s | 42.1 | 1.9 |
| DOCA-OFED, RoCE QoS and IMEX tasks in files included with the feature's condition (327 task starts, 453 task results), 20:14 | 175.2 s | 34.9 s | 46.6 | 1.7 |
| the same, 21:41, nothing else running (after a make test) | 152.8 s | 30.9 s | 40.8 | 1.8 |
| 2026-12-04: feature sections of rdma (RoCE GID index, nvidia-peermem, opensm, IPoIB) and lustre_client (LNet discovery, tunings) behind includes, nvidia_driver's host read in one command, keys not fetched again, nccl_stack's download and install skipped when its preflight says up to date (313 task starts), 03:10, make test files beside it part of the time | 151.5 s | 28.2 s | 37.4 | 1.4 |
| the same plus packages read in the file probe's run where nothing changes the node in between (munge, slurm_dbd, slurm_controller, slurm_node, nvme_scratch, host_tuning, kernel_updates, nvidia_driver, container_runtime; 304 task starts, 182 host results not skipped), 04:03, nothing else running | 131.5 s | 25.8 s | 34.5 | 1.4 |

With the probes and the payload probe the quiet rerun (0 changed, 184 tasks not skipped) was about 1.5 s over the
30 s target. The shared probe module then took 23 task runs and 16 CPU s (30 %) out of the rerun, measured back
to back on the same loaded machine (rows five and six; the rerun still changes nothing). Measured on a quiet
machine afterwards (row seven): 26.5 s, under the 30 s target; after the lustre_client changes (last row, one measurement on a
machine whose bare ``python -c pass`` start was 37 ms instead of 27 ms): 28.8 s, still under it, with less margin. What is left is mostly Ansible's own cost of a few tenths of a second per module run through the chroot connection:
the per-role ``dpkg-query`` runs, fact gathering, the commands that check state themselves (the Lustre client install and
mount scripts). The last row moved lustre_client's five templates (LNet networks, discovery script and unit, mount
script, client install script) behind its file probe: 23.4 s; gathering only the facts the roles read: 22.1 s.

Where the rerun's time goes (the 15:37 run's job events): 352 task starts, 202 host results that ran and 293 that
were skipped; 195 tasks were skipped on every host and took 17.4 s of the 49 s between the first and last event
(0.09 s each), the other 156 tasks 38.5 s (0.25 s each). The skipped ones are the writers behind each role's
probes and the sections of features the DGX example does not use (DOCA-OFED, RoCE QoS, IMEX, Secure Boot, LNet
discovery). The next step for the 30 s target is fewer task starts: a role's writers included only when its probe
found something to write, and each unused feature's tasks behind one `include_tasks` with the feature's condition.

The two rows before those ran the same work two hours apart on the same machine: the first converge took 176 s, then 264 s,
so the machine itself slowed (a shared host); compare CPU seconds within one session only. The 30 s rerun target
(issue 28) was met once (30.4 s) and not on 2026-12-03.

On 2026-12-03 evening the quiet rerun was 31.2 s with 352 task starts: 204 tasks skipped on every host (9.4 s,
0.046 s each), 94 controller-only tasks (assert, set_fact, debug, include, argument checks: 4.3 s, 0.046 s each) and
54 tasks that ran a module on a host (15.9 s, 0.30 s each). The rerun is CPU-bound (41.9 CPU s in 31.2 s on two
cores): the free strategy, which lets each host of a play run ahead (munge's play must stay linear: its key
distribution reads another host's registered result, and failed under free), changed the CPU seconds not at all and
the wall time by 1 s, so it was not kept. Moving the DOCA-OFED, RoCE QoS and IMEX sections behind one include each
took 25 task starts out of the DGX rerun; the same work measured 14 minutes later on the same machine took more CPU
seconds for the first converge too (212.8 against 174.6: the shared host slowed), so the wall figures of the two
rows are not comparable, the task counts are. What is left for the 30 s target is the writers behind each role's
file probe (about 150 of the skipped tasks): one include per role, opened only when the probe found a path that
differs, would take most of them out.

On 2026-12-04 the rerun went from 31.3 s (41.6 CPU s, 327 task starts) to 25.8 s (34.5 CPU s, 304 task starts, 0
changed) on a quiet machine: fewer module runs (the file probe reads a role's packages in the same run where
nothing changes the node in between, nvidia_driver reads GPUs, Secure Boot and the initramfs tool in one command,
a key download already there is not fetched again, nccl_stack skips its download and install runs when its
preflight says up to date: 54 tasks that ran a module down to 38) and fewer task starts (six more feature sections behind
one include each). Under the 30 s target (issue 28) with about 4 s to spare on this machine.

Figures are printed, never asserted.
Run: ``.venv/bin/python bench/bench_ansible.py [--hosts N] [--no-converge | --no-render] [--profile] [--keep DIR]
[EXAMPLE@OS ...]``
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from big_blueprints import dgx_blueprint

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from blueprints import load_blueprint
from clusterforge.ansible.render import plan_ansible, render_ansible
from clusterforge.blueprint_io import load_checked
from tests.roles.conftest import CONVERGES

EXAMPLES = REPO / "blueprints" / "examples"


def bench_render(hosts: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = dgx_blueprint(hosts, Path(tmp))
        t0 = time.perf_counter()
        loaded = load_checked(path, show_warnings=False)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        render_ansible(loaded, Path(tmp) / "out")
        t_render = time.perf_counter() - t0
        t0 = time.perf_counter()
        render_ansible(loaded, Path(tmp) / "out")
        t_rerender = time.perf_counter() - t0
        t0 = time.perf_counter()
        plan = plan_ansible(loaded)
        t_plan = time.perf_counter() - t0
        inv = (Path(tmp) / "out" / "inventory.yml").stat().st_size
        print(f"render {hosts + 1} hosts: load+rules {t_load:.2f} s, render_ansible {t_render:.2f} s "
              f"(re-render {t_rerender:.2f} s), plan_ansible {t_plan:.2f} s for {len(plan['hosts'])} hosts; "
              f"inventory.yml {inv / 1e6:.2f} MB (1e6 bytes)")


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and its finished children: ansible-playbook, its
    workers and the modules they ran in the chroots. Less sensitive than wall time to the other work sharing the
    machine (wall time on a shared 2-core machine grows with the load average)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def profile_run(run_dir: Path, top: int = 15) -> None:
    """Print where a run's wall seconds went, from ansible-runner's ``job_events/``.

    A task's wall time runs from its ``playbook_on_task_start`` event to the next task's (or the play's
    or the recap's) event, so it covers every host of the linear strategy and the controller's own work;
    it is summed per role, per module (``task_action``) and listed for the ``top`` slowest tasks.
    """
    events = [json.loads(f.read_text()) for f in (run_dir / "job_events").glob("*.json")]
    events.sort(key=lambda e: e.get("counter", 0))
    marks = [e for e in events if e.get("event") in ("playbook_on_task_start", "playbook_on_play_start",
                                                      "playbook_on_stats", "playbook_on_start")]
    def ts(e: dict) -> float:
        return datetime.fromisoformat(e["created"]).timestamp()

    hosts_of: dict[str, set[str]] = {}
    for e in events:
        d = e.get("event_data") or {}
        if e.get("event", "").startswith("runner_on_") and e["event"] != "runner_on_start":
            hosts_of.setdefault(d.get("task_uuid", ""), set()).add(f"{d.get('host')}:{e['event'][10:]}")
    per_role: dict[str, float] = {}
    per_action: dict[str, list[float]] = {}
    tasks: list[tuple[float, str]] = []
    other = 0.0
    for a, b in itertools.pairwise(marks):
        wall = ts(b) - ts(a)
        d = a.get("event_data") or {}
        if a["event"] != "playbook_on_task_start":
            other += wall
            continue
        role = d.get("role") or "(play)"
        action = d.get("task_action") or "?"
        per_role[role] = per_role.get(role, 0.0) + wall
        per_action.setdefault(action, []).append(wall)
        states = ",".join(sorted(hosts_of.get(d.get("task_uuid", ""), set())))
        tasks.append((wall, f"{role} : {d.get('task')} [{action}] {states}"))
    total = ts(marks[-1]) - ts(marks[0]) if marks else 0.0
    print(f"  profile of {run_dir.name}: {total:.1f} s between the first and last event, "
          f"{len(tasks)} task starts, {other:.1f} s outside tasks (play starts, includes)")
    print("  per role: " + ", ".join(f"{r} {t:.1f} s" for r, t in sorted(per_role.items(), key=lambda x: -x[1])))
    print("  per module: " + ", ".join(f"{a.rsplit('.', 1)[-1]} {sum(v):.1f} s/{len(v)}"
                                        for a, v in sorted(per_action.items(), key=lambda x: -sum(x[1]))))
    for wall, what in sorted(tasks, reverse=True)[:top]:
        print(f"    {wall:5.2f} s  {what}")


def bench_converge(examples: list[str], profile: bool = False, keep: Path | None = None) -> None:
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        print("converge: skipped (needs root for chroot and debootstrap installed)")
        return
    from rich.console import Console

    from clusterforge.ansible.runner import chroot_connection, load_summary, run_site
    from tests.roles.conftest import (
        VENDOR_OFF,
        blueprint_for,
        build_rootfs,
        harvest_debs,
        prepare_roots,
        remove_tree,
        vendor_mirror,
    )

    t0 = time.perf_counter()
    build_rootfs()
    print(f"rootfs: ready in {time.perf_counter() - t0:.1f} s (cached after the first build)")
    mirror = vendor_mirror()
    extravars = {**mirror.extravars(), **VENDOR_OFF}
    quiet = Console(file=io.StringIO())
    (REPO / ".cache").mkdir(exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(dir=REPO / ".cache") as tmp:
            for pair in examples:
                example, _, os_name = pair.partition("@")
                work = Path(tmp) / pair
                loaded = load_blueprint(blueprint_for(example, os_name, work / "blueprint", mirror.lustre_client_repo()))
                hosts = [g.hosts[0].name for g in loaded.blueprint.node_groups if g.hosts]
                roots = prepare_roots(work, hosts, os_name, mirror)
                out = work / "out"
                override = chroot_connection(roots)
                t0, c0 = time.perf_counter(), cpu_seconds()
                rc1 = run_site(loaded, out, extravars=extravars, connection_override=override, console=quiet)
                t1, cpu1 = time.perf_counter() - t0, cpu_seconds() - c0
                first = load_summary(out)
                for r in roots.values():
                    harvest_debs(r)
                t0, c0 = time.perf_counter(), cpu_seconds()
                rc2 = run_site(loaded, out, extravars=extravars, connection_override=override, console=quiet)
                t2, cpu2 = time.perf_counter() - t0, cpu_seconds() - c0
                second = load_summary(out)
                if profile:
                    print("  first converge:")
                    profile_run(out / "runs" / first["ident"], top=25)
                    print("  rerun:")
                    profile_run(out / "runs" / second["ident"])
                ran = [r for r in second["results"] if r["status"] != "skipped"]
                changed = sum(1 for r in first["results"] if r["status"] == "changed")
                rechanged = sum(1 for r in second["results"] if r["status"] == "changed")
                print(f"converge {pair} ({len(hosts)} chroot host(s), vendor installs on): first {t1:.1f} s "
                      f"[{cpu1:.1f} CPU s] (rc {rc1}, {changed} changed), rerun {t2:.1f} s [{cpu2:.1f} CPU s] "
                      f"(rc {rc2}, {rechanged} changed); load average {os.getloadavg()[0]:.1f}; "
                      f"{len(second['results'])} task results, {len(ran)} not skipped, "
                      f"{len(ran) / max(t2, 1e-9):.1f} tasks/s on rerun", flush=True)
                if keep is not None:
                    shutil.copytree(out / "runs", keep / pair, dirs_exist_ok=True)
                remove_tree(work)  # the roots are overlay mounts: unmounted before the folder goes
    finally:
        mirror.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1000, help="DGX hosts in the render benchmark (default 1000)")
    ap.add_argument("--no-converge", action="store_true", help="only the render benchmark")
    ap.add_argument("--no-render", action="store_true", help="only the converge benchmark")
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="copy each pair's runner artefacts (job_events, summary.json) to DIR/EXAMPLE@OS")
    ap.add_argument("--profile", action="store_true",
                    help="print where the first converge's and the rerun's seconds went (per role, per module, slowest tasks)")
    ap.add_argument("examples", nargs="*", default=[f"{e}@{o}" for e, o in CONVERGES],
                    help="EXAMPLE@OS pairs to converge (default: the converge tests' pairs)")
    args = ap.parse_args()
    if not args.no_render:
        bench_render(args.hosts)
    if not args.no_converge:
        bench_converge(args.examples, profile=args.profile, keep=args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
