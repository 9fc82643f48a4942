"""The Kubernetes launcher: an MPIJob per collective, a Job per fio target and for AMP.

Manifests (YAML, one file per test, plus one ConfigMap holding the payload files, mounted read-only
at ``/opt/clusterforge/payloads``):

* collectives: a Kubeflow ``MPIJob`` (``kubeflow.org/v2beta1``, the MPI operator the stack
  installs) with one Worker per node and ``slotsPerWorker`` = GPUs per node. The Launcher runs the
  nccl-tests binary with ``mpirun`` when the image has it (``nccl_tests.py --probe``), else
  ``collectives.py`` under ``mpirun`` (ranks from ``OMPI_COMM_WORLD_*``, rendezvous at the first
  host of ``/etc/mpi/hostfile``). Workers ask for ``nvidia.com/gpu`` and, on EFA, the
  ``vpc.amazonaws.com/efa`` devices plus 2 MiB huge pages, as the AWS EFA device plugin expects.
* fio: a ``batch/v1`` Job on the node group, the target mounted at the same path as on the node:
  the local NVMe scratch as a ``hostPath`` directory, Lustre/NFS storage as the PersistentVolumeClaim
  named after the storage entry in the validation namespace (the claim the stack creates for each
  FSx file system, :mod:`stacks.components.k8s_addons`).
* AMP: a ``batch/v1`` Job with one GPU;
* node: an Indexed ``batch/v1`` Job, one pod per node of the group (anti-affinity), with the host's
  network, process list, ``/etc`` and ``/lib/modules`` visible read-only (:func:`_node_job`); every
  pod prints its node-health JSON line, read back from all pods' logs.

Every pod of a Kata / gVisor node group (or one whose blueprint names ``sandbox.runtime_class``) uses
that RuntimeClass (``runtimeClassName``); every pod selects the group's nodes with
:func:`node_selector` (``orchestrator.node_selector``, default the ``clusterforge.io/node-group``
label that the EKS stack sets, which nodes of an existing cluster must be given), has
``automountServiceAccountToken: false``
and runs in the orchestrator's namespace. JSON documents are printed between marker lines so the
launcher can cut them out of ``kubectl logs``.

Running: ``kubectl apply``, poll the Job/MPIJob status, ``kubectl logs`` into ``raw/<test-id>.*``,
then ``kubectl delete``. Without ``kubectl`` on PATH: one ToolMissingError line.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from blueprints import LoadedBlueprint
from blueprints.errors import ProvisionError, ToolMissingError
from blueprints.models import KubernetesOrchestrator, LustreStorage, NfsStorage
from blueprints.naming import LABEL_NODE_GROUP, Naming
from blueprints.settings import on_mount
from blueprints.values import env_name

from ..suites import Placement, RanksSuite, Suite, get_suite
from ..untrusted import write_atomic
from .common import (
    MASTER_PORT,
    Launcher,
    LaunchResult,
    PlannedTest,
    open_nofollow,
    payload_sources,
    shell_join,
)

DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:24.10-py3"
"""Default image (NGC PyTorch: Python 3, torch, NCCL, Open MPI). MPIJob workers also need ``openssh-server``
(they run ``sshd -De`` for mpirun) and, to use nccl-tests, the ``*_perf`` binaries on PATH or in
``/opt/nccl-tests/build``; pass ``--image`` for an image that has them. fio is installed at start when absent."""

PAYLOAD_MOUNT = "/opt/clusterforge/payloads"
JSON_BEGIN = "----- clusterforge json begin -----"
JSON_END = "----- clusterforge json end -----"
EFA_HUGEPAGES = "5120Mi"
"""2 MiB huge pages per EFA pod (AWS EKS EFA examples request 5120Mi)."""


def k8s_name(*parts: str) -> str:
    """A DNS-1123 name (lower case, ``-``, at most 63 characters) from ``parts``."""
    s = "-".join(p for p in parts if p).lower()
    s = re.sub(r"[^a-z0-9-]+", "-", s).strip("-")
    return s[:63].rstrip("-")


def namespace(loaded: LoadedBlueprint) -> str:
    """The validation namespace: ``orchestrator.namespace`` (Kubernetes), else ``clusterforge``."""
    orch = loaded.blueprint.orchestrator
    return orch.namespace if isinstance(orch, KubernetesOrchestrator) else "clusterforge"


def node_selector(loaded: LoadedBlueprint, group: str) -> dict[str, str]:
    """The ``nodeSelector`` of the validation pods of node group ``group``: ``orchestrator.node_selector``
    with ``{group}`` replaced by the group name, else ``{clusterforge.io/node-group: group}`` (the label the
    EKS stack sets; an existing cluster's nodes must be labelled so, or the blueprint names their labels)."""
    orch = loaded.blueprint.orchestrator
    chosen = orch.node_selector if isinstance(orch, KubernetesOrchestrator) else None
    if not chosen:
        return {LABEL_NODE_GROUP: group}
    return {k: v.replace("{group}", group) for k, v in chosen.items()}


def payload_configmap(loaded: LoadedBlueprint) -> dict[str, Any]:
    """The ConfigMap holding the payload files."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": k8s_name(loaded.blueprint.name, "validate-payloads"), "namespace": namespace(loaded),
                     "labels": Naming(loaded.blueprint.name).labels()},
        "data": payload_sources(),
    }


RUN_DIR = '"$CF_RUN_DIR"'
"""The pod's private run directory in a one-node Job's script (made by :func:`_json_wrapped`)."""


def _json_wrapped(cmd: str, out: str) -> str:
    """Shell that makes a private run directory (``mktemp -d`` under ``umask 077``: mode 0700, a random name,
    never a fixed /tmp path) as ``$CF_RUN_DIR``, runs ``cmd`` there (writing ``out``, a path inside it), then
    prints ``out`` between the marker lines; keeps the status."""
    return ("umask 077\nCF_RUN_DIR=\"$(mktemp -d \"${TMPDIR:-/tmp}/clusterforge-validate.XXXXXXXXXX\")\" || exit 1\n"
            'export TMPDIR="$CF_RUN_DIR"\ncd "$CF_RUN_DIR" || exit 1\n'
            f"set +e\n{cmd}\nrc=$?\necho '{JSON_BEGIN}'\ncat {out} 2>/dev/null\necho\necho '{JSON_END}'\nexit $rc\n")


class _Pods:
    """Pod-spec pieces for one blueprint and node group."""

    def __init__(self, loaded: LoadedBlueprint, group: str, image: str):
        self.loaded = loaded
        self.bp = loaded.blueprint
        self.group = group
        self.image = image
        self.settings = loaded.cluster.settings(group)
        self.naming = Naming(self.bp.name)

    def labels(self, test: PlannedTest) -> dict[str, str]:
        lab = self.naming.labels(group=self.group)
        lab["clusterforge.io/validation-test"] = k8s_name(test.id)
        return lab

    def env(self) -> list[dict[str, str]]:
        # LD_LIBRARY_PATH of the host (EFA/OFI install paths) does not apply inside the image
        return [{"name": k, "value": v} for k, v in sorted(self.settings.nccl_env.items()) if k != "LD_LIBRARY_PATH"]

    def efa_devices(self) -> int:
        """``vpc.amazonaws.com/efa`` devices a collective pod requests: the EFA interfaces each node of the
        group has (the node settings' ``efa_interfaces``; 0 without EFA)."""
        return self.settings.efa_interfaces

    def spec(self, containers: list[dict[str, Any]], volumes: list[dict[str, Any]]) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "nodeSelector": node_selector(self.loaded, self.group),
            "containers": containers,
            "volumes": [{"name": "payloads", "configMap": {"name": k8s_name(self.bp.name, "validate-payloads")}},
                        *volumes],
        }
        rc = self.settings.sandbox.runtime_class
        declared = self.bp.group(self.group).sandbox.runtime_class
        # plain containers use the node's default runtime unless the blueprint names a RuntimeClass;
        # Kata / gVisor sandboxes always run under theirs (the stack creates it, k8s_addons)
        if rc and (self.settings.sandbox.runtime != "container" or declared):
            spec["runtimeClassName"] = rc
        if self.settings.gpu_count:
            spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        return spec

    def container(self, name: str, script: str, *, gpus: int, efa: int = 0, fabric: bool = False,
                  mounts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """One container; ``fabric``: it runs collectives (NCCL environment, IPC_LOCK for RDMA memory)."""
        limits: dict[str, str] = {}
        if gpus:
            limits["nvidia.com/gpu"] = str(gpus)
        if efa:
            limits["vpc.amazonaws.com/efa"] = str(efa)
            limits["hugepages-2Mi"] = EFA_HUGEPAGES
            limits["memory"] = "64Gi"
        c: dict[str, Any] = {
            "name": name,
            "image": self.image,
            "command": ["/bin/bash", "-c", script],
            "env": self.env() if fabric else [],
            "volumeMounts": [{"name": "payloads", "mountPath": PAYLOAD_MOUNT, "readOnly": True},
                             *(mounts or [])],
        }
        if limits:
            c["resources"] = {"limits": limits, "requests": dict(limits)}
        if not c["env"]:
            del c["env"]
        if fabric and (efa or self.settings.rdma):
            c["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
        return c


def _job(name: str, ns: str, labels: dict[str, str], pod_spec: dict[str, Any], deadline_s: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline_s,
            "ttlSecondsAfterFinished": 86400,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def _every_node_job(pods: _Pods, name: str, ns: str, labels: dict[str, str], test: PlannedTest, suite: Suite,
                    deadline_s: int) -> dict[str, Any]:
    """An Indexed Job with one pod per node of the group (required pod anti-affinity on the test label).

    The pod sees the host: ``hostNetwork`` (the node's interfaces and RDMA devices in /sys/class),
    ``hostPID`` (Fabric Manager and the other daemons in the process list), the host's ``/etc``
    and ``/lib/modules`` mounted read-only (runtime configuration, modules built for the kernel).
    It is not privileged and asks for no GPU: ``NVIDIA_VISIBLE_DEVICES=all`` lets the NVIDIA
    runtime show every GPU to nvidia-smi without taking them from the scheduler; without
    CAP_SYS_ADMIN ``lspci`` cannot read the ACS registers, which the ACS check reports as invalid.
    """
    script = f"exec python3 {PAYLOAD_MOUNT}/{suite.payload} {shell_join([*suite.payload_args(test), '--host-root', '/host'])}"
    c = pods.container(suite.name, script, gpus=0,
                       mounts=[{"name": "host-etc", "mountPath": "/host/etc", "readOnly": True},
                               {"name": "modules", "mountPath": "/lib/modules", "readOnly": True}])
    c["env"] = [{"name": "CLUSTERFORGE_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    if pods.settings.gpu_count:
        c["env"].append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
    spec = pods.spec([c], [{"name": "host-etc", "hostPath": {"path": "/etc", "type": "Directory"}},
                           {"name": "modules", "hostPath": {"path": "/lib/modules", "type": "Directory"}}])
    spec.pop("runtimeClassName", None)  # the host's view, not a sandbox's
    spec.update(hostNetwork=True, hostPID=True)
    spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {k: labels[k] for k in ("clusterforge.io/blueprint",
                                                                  "clusterforge.io/validation-test") if k in labels}},
        "topologyKey": "kubernetes.io/hostname"}]}}
    job = _job(name, ns, labels, spec, deadline_s)
    job["spec"].update(completions=test.nodes, parallelism=test.nodes, completionMode="Indexed")
    return job


def _dir_volume(loaded: LoadedBlueprint, name: str, path: str) -> dict[str, Any]:
    """Volume ``name`` that shows the node's directory ``path`` to a pod: the PersistentVolumeClaim of the
    shared file system it lies on, else the node's directory (``hostPath``)."""
    for s in loaded.blueprint.storage:
        if isinstance(s, (LustreStorage, NfsStorage)) and on_mount(path, s.mount):
            # the stack's PVC for a shared file system is named after the storage entry (stacks/components/k8s_addons.py)
            return {"name": name, "persistentVolumeClaim": {"claimName": s.name}}
    return {"name": name, "hostPath": {"path": path, "type": "Directory"}}


def manifest(loaded: LoadedBlueprint, test: PlannedTest, *, image: str = DEFAULT_IMAGE,
             deadline_s: int = 3600) -> dict[str, Any]:
    """The Kubernetes object (MPIJob or Job) that runs ``test``."""
    bp = loaded.blueprint
    ns = namespace(loaded)
    pods = _Pods(loaded, test.group, image)
    name = k8s_name(bp.name, test.id)
    labels = pods.labels(test)
    gpus = test.ranks_per_node if test.device == "cuda" else 0
    suite = get_suite(test.kind)
    if isinstance(suite, RanksSuite):
        np_ = test.ranks
        efa = pods.efa_devices()
        coll = suite.binary_name(test)
        exports = " ".join(f"-x {env_name(e['name'])}" for e in pods.env())
        mpirun = f"mpirun --allow-run-as-root -np {np_} --bind-to none {exports} -x PATH -x LD_LIBRARY_PATH".strip()
        torch_run = (f'{mpirun} -x MASTER_ADDR -x MASTER_PORT python3 {PAYLOAD_MOUNT}/{suite.payload} '
                     f"{shell_join(suite.payload_args(test))}")
        script_lines = [
            "set -euo pipefail",
            'export MASTER_ADDR="$(head -n 1 /etc/mpi/hostfile | cut -d " " -f 1)"',
            f"export MASTER_PORT={MASTER_PORT}",
        ]
        if gpus:
            script_lines += [
                f'if BIN="$(python3 {PAYLOAD_MOUNT}/{suite.binary_payload} --probe --collective {coll} 2>/dev/null)"; then',
                f'  {mpirun} "$BIN" {shell_join(suite.binary_flags(test, 1))}',
                "else",
                f"  {torch_run}",
                "fi",
            ]
        else:
            script_lines.append(torch_run)
        launcher = pods.container("launcher", "\n".join(script_lines) + "\n", gpus=0, fabric=True)
        launcher["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}}
        launcher.pop("securityContext", None)
        launcher_spec = pods.spec([launcher], [])
        launcher_spec.pop("nodeSelector")
        launcher_spec.pop("runtimeClassName", None)
        launcher_spec.pop("tolerations", None)
        # workers only serve SSH for mpirun (the MPI operator mounts the keys); the image needs openssh-server
        worker = pods.container("worker", "mkdir -p /run/sshd && exec /usr/sbin/sshd -De", gpus=gpus, efa=efa, fabric=True,
                                mounts=[{"name": "dshm", "mountPath": "/dev/shm"}])
        worker_spec = pods.spec([worker], [{"name": "dshm", "emptyDir": {"medium": "Memory"}}])
        worker_spec.pop("restartPolicy")
        return {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {
                "slotsPerWorker": test.ranks_per_node,
                "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0, "activeDeadlineSeconds": deadline_s,
                              "ttlSecondsAfterFinished": 86400},
                "mpiImplementation": "OpenMPI",
                "mpiReplicaSpecs": {
                    "Launcher": {"replicas": 1, "restartPolicy": "Never",
                                 "template": {"metadata": {"labels": labels}, "spec": launcher_spec}},
                    "Worker": {"replicas": test.nodes, "restartPolicy": "Never",
                               "template": {"metadata": {"labels": labels}, "spec": worker_spec}},
                },
            },
        }
    if suite.placement == Placement.EVERY_NODE:
        return _every_node_job(pods, name, ns, labels, test, suite, deadline_s)
    # one-node: a Job of one pod; the payload's document is printed between marker lines
    out = f"{RUN_DIR}/{shlex.quote(suite.name + '.json')}"
    cmd = f"python3 {PAYLOAD_MOUNT}/{suite.payload} {shell_join(suite.payload_args(test))} --output {out}"
    if suite.container_setup:
        cmd = f"{suite.container_setup}\n{cmd}"
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    dirs = suite.mounts(test)
    for i, d in enumerate(dirs):
        vol = "target" if len(dirs) == 1 else f"target-{i + 1}"
        mounts.append({"name": vol, "mountPath": d})
        volumes.append(_dir_volume(loaded, vol, d))
    if suite.shm:
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
    c = pods.container(suite.name, _json_wrapped(cmd, out), gpus=suite.gpus(test), mounts=mounts)
    return _job(name, ns, labels, pods.spec([c], volumes), deadline_s)


def _literal_scripts(obj: Any) -> Any:
    """A copy of ``obj`` where multi-line strings become YAML literal blocks (``|``), readable scripts."""
    from ruamel.yaml.scalarstring import LiteralScalarString

    if isinstance(obj, dict):
        return {k: _literal_scripts(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_literal_scripts(v) for v in obj]
    if isinstance(obj, str) and "\n" in obj:
        return LiteralScalarString(obj)
    return obj


def dump_yaml(obj: dict[str, Any], path: Path) -> Path:
    """Write ``obj`` as block-style YAML to ``path``."""
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 4096
    yaml.representer.ignore_aliases = lambda *_: True  # shared label dicts are written out, not anchored
    obj = _literal_scripts(obj)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    yaml.dump(obj, buf)
    return write_atomic(path, buf.getvalue())


def write_manifests(loaded: LoadedBlueprint, tests: list[PlannedTest], dest: Path, *,
                    image: str = DEFAULT_IMAGE) -> list[Path]:
    """Write ``dest/00-payloads-configmap.yaml`` and ``dest/<test-id>.yaml``; returns the paths."""
    out = [dump_yaml(payload_configmap(loaded), dest / "00-payloads-configmap.yaml")]
    for t in tests:
        out.append(dump_yaml(manifest(loaded, t, image=image), dest / f"{t.id}.yaml"))
    return out


def mpijob_pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The embedded pod templates of an MPIJob, as ``v1 PodTemplate`` objects kubernetes-validate can check.

    Raises ``ValueError`` when the MPIJob's structure is wrong (missing replica specs or templates).
    """
    if obj.get("apiVersion") != "kubeflow.org/v2beta1" or obj.get("kind") != "MPIJob":
        raise ValueError("not a kubeflow.org/v2beta1 MPIJob")
    spec = obj.get("spec") or {}
    if not isinstance(spec.get("slotsPerWorker"), int) or spec["slotsPerWorker"] < 1:
        raise ValueError("spec.slotsPerWorker must be a positive integer")
    replicas = spec.get("mpiReplicaSpecs") or {}
    if set(replicas) != {"Launcher", "Worker"}:
        raise ValueError("spec.mpiReplicaSpecs must have exactly Launcher and Worker")
    if replicas["Launcher"].get("replicas") != 1:
        raise ValueError("the Launcher must have exactly one replica")
    out = []
    for role, rs in replicas.items():
        tmpl = rs.get("template")
        if not isinstance(rs.get("replicas"), int) or not tmpl or "spec" not in tmpl:
            raise ValueError(f"spec.mpiReplicaSpecs.{role} needs replicas and template.spec")
        out.append({"apiVersion": "v1", "kind": "PodTemplate",
                    "metadata": {"name": f"{obj['metadata']['name']}-{role.lower()}",
                                 "namespace": obj["metadata"].get("namespace", "default")},
                    "template": tmpl})
    return out


class KubernetesLauncher(Launcher):
    """Applies the manifests with ``kubectl``, waits, reads the logs, deletes the objects."""

    name = "kubernetes"

    def __init__(self, out_dir: Path, loaded: LoadedBlueprint, *, timeout_s: float | None = None,
                 image: str = DEFAULT_IMAGE, kubectl: str = "kubectl", poll_s: float = 5.0):
        super().__init__(out_dir, timeout_s=timeout_s)
        self.loaded = loaded
        self.image = image
        self.kubectl = kubectl
        self.poll_s = poll_s
        self.manifest_dir = self.out_dir / "kubernetes"
        self.ns = namespace(loaded)

    def _kubectl(self, *args: str, log: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        argv = [self.kubectl, *args]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            p = subprocess.CompletedProcess(argv, 124, "", f"kubectl did not answer within {timeout:g} s\n")
        if log is not None:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"$ {shell_join(argv)}\n{p.stdout}{p.stderr}")
        return p

    def prepare(self) -> None:
        """Check ``kubectl``, write and apply the payload ConfigMap."""
        if shutil.which(self.kubectl) is None:
            raise ToolMissingError(f"{self.kubectl} not found: install kubectl and point KUBECONFIG at the cluster "
                                   "(or use `clusterforge render` and apply the manifests yourself)")
        super().prepare()
        cm = dump_yaml(payload_configmap(self.loaded), self.manifest_dir / "00-payloads-configmap.yaml")
        log = self.log_dir / "kubectl-prepare.log"
        for args in (("create", "namespace", self.ns), ("apply", "-f", str(cm))):
            p = self._kubectl(*args, log=log)
            if p.returncode != 0 and not (args[0] == "create" and "AlreadyExists" in p.stderr):
                why = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
                raise ProvisionError(f"kubectl {' '.join(args[:2])} failed: {why} (see {log}); check KUBECONFIG "
                                     "and that the cluster is reachable")

    def _status(self, kind: str, name: str) -> str | None:
        """``"succeeded"``, ``"failed"`` or ``None`` (still running)."""
        p = self._kubectl("get", kind, name, "-n", self.ns, "-o", "json")
        if p.returncode != 0:
            return None
        doc = json.loads(p.stdout)
        st = doc.get("status") or {}
        if kind == "job":
            if (st.get("succeeded") or 0) >= ((doc.get("spec") or {}).get("completions") or 1):
                return "succeeded"
            if st.get("failed"):
                return "failed"
            return None
        for c in st.get("conditions") or []:
            if c.get("status") == "True" and c.get("type") in ("Succeeded", "Failed"):
                return c["type"].lower()
        return None

    def run(self, test: PlannedTest) -> LaunchResult:
        """Apply, wait, fetch the logs into ``raw/``, delete."""
        obj = manifest(self.loaded, test, image=self.image, deadline_s=int(self.timeout_s or 3600))
        path = dump_yaml(obj, self.manifest_dir / f"{test.id}.yaml")
        raw, log = self.fresh_outputs(test)
        kind = "mpijob" if obj["kind"] == "MPIJob" else "job"
        name = obj["metadata"]["name"]
        t0 = time.perf_counter()
        self._kubectl("delete", kind, name, "-n", self.ns, "--ignore-not-found", "--wait=true", log=log, timeout=300)
        p = self._kubectl("apply", "-f", str(path), log=log)
        if p.returncode != 0:
            write_atomic(raw, "")
            return LaunchResult(raw=raw, returncode=p.returncode, log=log, command=f"kubectl apply -f {path}",
                                duration_s=time.perf_counter() - t0, notes=["kubectl apply failed: see the log"])
        deadline = time.monotonic() + (self.timeout_s or 3600) + 300
        status = None
        while status is None and time.monotonic() < deadline:
            time.sleep(self.poll_s)
            status = self._status(kind, name)
        selector = (f"training.kubeflow.org/job-name={name},training.kubeflow.org/job-role=launcher"
                    if kind == "mpijob" else f"job-name={name}")
        logs = self._kubectl("logs", "-n", self.ns, "-l", selector, "--tail=-1",
                             f"--max-log-requests={max(5, test.nodes)}", timeout=300)
        text = logs.stdout
        with open_nofollow(log, "ab") as f:
            f.write(text.encode("utf-8"))
        suite = get_suite(test.kind)
        if test.raw_suffix == ".json" and JSON_BEGIN in text and suite.placement == Placement.ONE_NODE:
            text = text.split(JSON_BEGIN, 1)[1].split(JSON_END, 1)[0].strip() + "\n"
        if suite.wants_runtime_classes:  # the RuntimeClasses are the cluster's: the node checks compare them
            rcs = self._kubectl("get", "runtimeclass", "-o", "json", log=log)
            if rcs.returncode == 0:
                try:
                    items = json.loads(rcs.stdout).get("items") or []
                except ValueError:
                    items = []
                text += json.dumps({"kind": "node-health-cluster", "source": "kubectl get runtimeclass -o json",
                                    "runtimeclasses": [{"name": (i.get("metadata") or {}).get("name"),
                                                        "handler": i.get("handler")} for i in items]}) + "\n"
        write_atomic(raw, text)
        self._kubectl("delete", kind, name, "-n", self.ns, "--ignore-not-found", "--wait=false", log=log)
        rc = 0 if status == "succeeded" else (124 if status is None else 1)
        return LaunchResult(raw=raw, returncode=rc, log=log, command=f"kubectl apply -f {path}",
                            duration_s=time.perf_counter() - t0, notes=[f"{kind}/{name} in namespace {self.ns}"])
