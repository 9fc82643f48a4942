"""What a validation suite is: the :class:`Suite` interface and what its planner is given.

A suite is one module (``validate/suites/<name>.py``) with one :class:`Suite` subclass that

* plans its tests for one node group (:meth:`Suite.plan`, given a :class:`GroupPlan`), each a
  :class:`~validate.plan.PlannedTest` with the suite's typed params (a
  :class:`~validate.plan.TestParams` dataclass);
* builds its payload's command-line arguments (:meth:`Suite.payload_args`) and says how the payload
  is placed on the nodes (:class:`Placement`), so every launcher can run it;
* judges a raw output (:meth:`Suite.judge_text`, :meth:`Suite.judge_raw`, :meth:`Suite.judge_test`) into
  :class:`~validate.results.JudgeResult` objects, with thresholds and expected figures from the
  blueprint models and the hardware catalog only (through :class:`~validate.expectations.JudgeContext`);
* recognises its raw outputs (:attr:`Suite.document_kinds`, :meth:`Suite.recognises`,
  :attr:`Suite.markers`, :attr:`Suite.name_hints`), so ``clusterforge judge`` detects their kind;
* describes and plots its results for the reports (:meth:`Suite.summary`, :meth:`Suite.expected_text`,
  :meth:`Suite.result_plot`, :meth:`Suite.markdown_section`, :meth:`Suite.html_section`).

It is registered once, in :mod:`validate.suites`; the runner, judge, reports, launchers and CLI
look suites up there by name and know no suite by name themselves.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from blueprints import LoadedBlueprint
from blueprints.catalog import catalog
from blueprints.errors import UsageError
from blueprints.models import Blueprint, NodeGroup
from blueprints.resolved import ResolvedGroup
from blueprints.settings import NodeSettings

from ..expectations import JudgeContext, SuiteExpectations, context_from_blueprint
from ..parsers.detect import NotText, RawText, open_raw
from ..payloads import PAYLOAD_DIR
from ..plan import Device, PlannedTest, TestParams
from ..results import JudgeResult, Verdict

__all__ = [
    "DETECT_MIN_POINTS",
    "MISMATCH",
    "Explanation",
    "GroupPlan",
    "HtmlSection",
    "Placement",
    "RanksSuite",
    "Suite",
    "UnreadableInput",
    "nothing",
    "open_raw_input",
    "part_label",
    "png",
    "read_raw",
]

MISMATCH = "hardware mismatch:"
"""Prefix of a test note saying the local machine lacks the declared hardware: the result is then
``invalid`` (it says nothing about the declared cluster)."""


DETECT_MIN_POINTS = 4
"""Least marker points (:meth:`Suite.marker_points`) for an output to count as a suite's: one strong
line (a table header, a footer) or two weaker ones."""


class UnreadableInput(UsageError):
    """A path the judge cannot read as a benchmark output (missing, a directory, binary, unknown kind)."""


class Placement(StrEnum):
    """How a suite's payload is placed on the nodes; every launcher implements each placement once.

    * ``one-node``: one process on the group's first node, ``python3 PAYLOAD ARGS --output FILE``
      (the payload writes its document to ``FILE``; on Kubernetes a Job of one pod, the document
      cut out of its log). Most suites are this.
    * ``every-node``: one process on every node of the group; each prints one JSON document (one
      line) on stdout, or into ``--output FILE``; the payload accepts ``--node-name NAME`` and
      ``--host-root DIR`` (where the host's ``/etc`` is mounted in a pod).
    * ``ranks``: ``nodes x ranks_per_node`` processes of a collective (torchrun / mpirun / srun), the
      suite a :class:`RanksSuite` that also names the nccl-tests binary flags.
    """

    ONE_NODE = "one-node"
    EVERY_NODE = "every-node"
    RANKS = "ranks"


@dataclass(frozen=True)
class GroupPlan:
    """What a suite's planner is given for one node group of a run.

    ``loaded``: the checked blueprint; ``group`` and ``settings``: the node group and its resolved
    :class:`~blueprints.settings.NodeSettings`; ``local``: planning for this machine (the ``local``
    launcher: one node) rather than the blueprint's nodes; ``nodes``: nodes a multi-node test spans;
    ``device``/``ranks``: where collectives compute and how many ranks per node (GPUs, or gloo
    processes on a CPU-only machine); ``gpu_key``: catalog key of the GPU the tests run on (the
    detected one on a local run, ``None`` without a GPU); ``mismatch``: a :data:`MISMATCH` note
    when this machine lacks the declared GPUs (local runs), else ``None``; ``several``: the
    blueprint validates several node groups (test ids then carry the group name).
    """

    loaded: LoadedBlueprint
    group: NodeGroup
    settings: NodeSettings
    local: bool
    nodes: int
    device: Device
    ranks: int
    gpu_key: str | None
    mismatch: str | None
    several: bool

    @property
    def bp(self) -> Blueprint:
        """The blueprint."""
        return self.loaded.blueprint

    def test_id(self, suite: str, part: str | None = None) -> str:
        """``suite[-group][-part]``: the group only when several groups are validated."""
        return "-".join([suite, *([self.group.name] if self.several else []), *([part] if part else [])])


@dataclass(frozen=True)
class Explanation:
    """A failure one suite's result establishes on some nodes that explains other suites' results there
    (the node suite's failed *blocking* checks: a missing GPU explains a slow collective).

    ``suite``: the suite that found it; ``group``/``host``: where (``host`` ``cross-node``: every node
    of the group); ``check``: the failed check's id; ``measured``/``expected``/``fix``: its text;
    ``explains``: names of the suites whose results it explains. The runner notes it on those results
    of the same group (:meth:`note`) and records ``metrics["explained_by"]`` (:attr:`ref`); it never
    changes their verdict."""

    suite: str
    group: str
    host: str
    check: str
    measured: str
    expected: str
    fix: str | None
    explains: tuple[str, ...]

    @property
    def ref(self) -> str:
        """``host: check-id``."""
        return f"{self.host}: {self.check}"

    def note(self) -> str:
        """The note a result it explains gets."""
        return (f"explained by the {self.suite} suite: {self.host} failed blocking check {self.check} (measured "
                f"{self.measured}; expected {self.expected}){'. Fix: ' + self.fix if self.fix else ''}")


@dataclass(frozen=True)
class HtmlSection:
    """A suite's section of the HTML report: ``heading``, an optional ``png`` (base64) with its
    ``alt`` text, an optional ``note`` (plain text, escaped by the template) and optional ``html``
    (already rendered with autoescape, e.g. a table)."""

    heading: str
    png: str | None = None
    alt: str = ""
    note: str | None = None
    html: str | None = None


class Suite(ABC):
    """One validation suite (see the module docstring). Subclasses set the class attributes and
    implement :meth:`plan`, :meth:`payload_args` and :meth:`judge_text`; every other method has a
    default that suits a suite of one process writing one JSON document.

    Class attributes: ``name`` (registry key, test-id prefix, result ``kind``); ``title`` (for
    humans); ``placement``; ``payloads`` (payload file names in ``payload_dir``, the first one
    run; each standalone: standard library and torch only); ``params_type`` (the
    :class:`~validate.plan.TestParams` subclass of its tests); ``runs_first`` (its tests run before
    every other suite's, e.g. the node checks that explain later results); ``judges_files`` (its raw
    outputs can be judged with a :class:`~validate.expectations.JudgeContext` alone, so
    ``clusterforge judge --kind NAME`` accepts it); ``shm`` (its pod needs a memory-backed
    ``/dev/shm``); ``container_setup`` (shell run in a pod before the payload, e.g. installing a
    tool); ``max_result_plots`` (per-result plots in one HTML page); ``wants_runtime_classes`` (a
    Kubernetes run appends the cluster's RuntimeClasses to the raw output, as a
    ``node-health-cluster`` document).

    Detection (:func:`validate.suites.detect_kind`; the first and last 256 Ki characters of an
    output are searched): ``document_kinds`` (the values of a JSON ``"kind"`` key that mark a document
    as this suite's, default the suite's name: ``{"kind": "amp", ...}``); :meth:`recognises`
    (a signature that identifies the output for certain, e.g. fio JSON's ``"fio version"`` key);
    ``markers`` (``(regular expression, points)`` of text lines typical of the output; the suite
    with the most points wins, at :data:`DETECT_MIN_POINTS` or more) and ``name_hints`` (parts of a
    file name worth one point, the tie-breaker). ``thresholds_type``: the blueprint model of
    ``validation.<name>.thresholds`` (:meth:`thresholds` reads it from the judge context).

    Expectations: every registered suite is an :class:`~validate.expectations.ExpectationSource`:
    the judge context asks it for what it expects of a node group (:meth:`context_expectations`) and
    after flags (:meth:`override_expectations`; ``override_names``: flag name -> recorded name of the
    flags only this suite takes). Its formulas live in its module, each with its source.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    placement: ClassVar[Placement] = Placement.ONE_NODE
    payloads: ClassVar[tuple[str, ...]]
    payload_dir: ClassVar[Path] = PAYLOAD_DIR
    params_type: ClassVar[type[TestParams]]
    runs_first: ClassVar[bool] = False
    judges_files: ClassVar[bool] = True
    shm: ClassVar[bool] = False
    container_setup: ClassVar[str] = ""
    max_result_plots: ClassVar[int] = 0
    wants_runtime_classes: ClassVar[bool] = False
    document_kinds: ClassVar[tuple[str, ...] | None] = None
    markers: ClassVar[tuple[tuple[re.Pattern[str], int], ...]] = ()
    name_hints: ClassVar[tuple[str, ...]] = ()
    thresholds_type: ClassVar[type[BaseModel] | None] = None
    override_names: ClassVar[Mapping[str, str]] = {}

    # -- planning -------------------------------------------------------------------------------

    @abstractmethod
    def plan(self, gp: GroupPlan) -> tuple[list[PlannedTest], list[str]]:
        """``(tests, run notes)`` of this suite for one node group."""

    # -- payload --------------------------------------------------------------------------------

    @property
    def payload(self) -> str:
        """The payload file a launcher runs (the first of :attr:`payloads`)."""
        return self.payloads[0]

    def payload_files(self) -> dict[str, Path]:
        """``{file name: path}`` of the payload files a launcher copies to the nodes."""
        return {n: self.payload_dir / n for n in self.payloads}

    def environment_python(self, test: PlannedTest) -> str | None:
        """The interpreter of the training environment the blueprint declares for ``test``'s nodes (the nccl_stack
        role's venv, ``NodeSettings.nccl_stack``), which the ssh and Slurm launchers run the payload with when no other
        Python was chosen and the node has it; ``None``: the launcher's Python. Default ``None``."""
        return None

    @abstractmethod
    def payload_args(self, test: PlannedTest) -> list[str]:
        """Arguments of :attr:`payload` for ``test`` (without ``--output``, which the launcher adds)."""

    def gpus(self, test: PlannedTest) -> int:
        """GPUs one ``one-node`` process of ``test`` needs (a Slurm ``--gpus-per-node``, a pod's
        ``nvidia.com/gpu``): 1 on a GPU run, else 0."""
        return 1 if test.device == "cuda" else 0

    def mounts(self, test: PlannedTest) -> tuple[str, ...]:
        """Directories of the node the payload works in, which a pod must mount at the same path."""
        return ()

    def default_timeout_s(self, test: PlannedTest) -> float:
        """A generous bound in seconds on ``test`` from its planned size, used when no ``--timeout`` is given:
        10 minutes, plus 6 x a planned ``runtime_s`` (fio: three jobs, their ramp and file layout) and 2 s per MiB
        of a planned ``max_bytes`` (the largest collective message). A suite whose payload runs longer (training)
        adds to it."""
        p = test.params
        base = 600.0
        runtime = getattr(p, "runtime_s", None)
        if isinstance(runtime, (int, float)):
            base += 6 * float(runtime)
        max_bytes = getattr(p, "max_bytes", None)
        if isinstance(max_bytes, int):
            base += 2 * max_bytes / (1 << 20)
        return base

    # -- recognising its outputs -------------------------------------------------------------------

    def kinds_in_documents(self) -> tuple[str, ...]:
        """The JSON ``"kind"`` values of this suite's documents (:attr:`document_kinds`, default its name)."""
        return self.document_kinds if self.document_kinds is not None else (self.name,)

    def names_itself(self, window: str) -> bool:
        """Whether ``window`` holds a JSON document whose ``"kind"`` is one of :meth:`kinds_in_documents`."""
        return any(re.search(r'"kind"\s*:\s*"' + re.escape(k) + '"', window) for k in self.kinds_in_documents())

    def recognises(self, window: str) -> bool:
        """Whether ``window`` (a raw output, see :func:`validate.parsers.detect.window`) is certainly this
        suite's output by a signature of its format (a JSON document's keys); default: never."""
        return False

    def marker_points(self, window: str, filename: str) -> int:
        """Points of ``window`` for this suite: the sum of the :attr:`markers` found, plus one when the
        lower-cased ``filename`` contains one of :attr:`name_hints`."""
        name = filename.lower()
        return sum(w for rx, w in self.markers if rx.search(window)) + any(h in name for h in self.name_hints)

    # -- judging --------------------------------------------------------------------------------

    def context_expectations(self, bp: Blueprint | None, group: ResolvedGroup | None) -> SuiteExpectations | None:
        """What this suite expects of node ``group`` of ``bp`` that the judge context should hold under
        its name (both ``None``: a context without a blueprint); default: nothing. Expectations that
        depend on the run (ranks, nodes, the GPU the log names) are computed by the judge instead."""
        return None

    def override_expectations(self, current: SuiteExpectations | None, ctx: JudgeContext,
                              overrides: Mapping[str, Any]) -> SuiteExpectations | None:
        """``current`` (this suite's expectations in the context) after ``overrides`` were applied to
        ``ctx`` (:func:`~validate.expectations.apply_overrides`; the names of :attr:`override_names`
        reach only this method). Default: unchanged."""
        return current

    def thresholds(self, ctx: JudgeContext) -> BaseModel | None:
        """This suite's thresholds in ``ctx`` (the blueprint's ``validation.<name>.thresholds``), else the
        defaults of :attr:`thresholds_type`; ``None`` for a suite without thresholds."""
        return ctx.thresholds_for(self.name, self.thresholds_type) if self.thresholds_type is not None else None

    @abstractmethod
    def judge_text(self, text: str, ctx: JudgeContext, *, source: str, label: str | None) -> list[JudgeResult]:
        """Judge raw output ``text`` (named ``source``) against ``ctx``; one result per run / job /
        document. Never raises for bad content: output with nothing recognisable is ``invalid``
        (``fail`` when the payload crashed, see :func:`nothing`)."""

    def judge_raw(self, raw: RawText, ctx: JudgeContext, *, source: str, label: str | None) -> list[JudgeResult]:
        """Judge the raw output file ``raw`` (:func:`open_raw_input`) as :meth:`judge_text` judges its text.
        Default: its whole text through :meth:`judge_text`; a suite whose outputs are long and line-based
        overrides it to stream the file's lines (:meth:`~validate.parsers.detect.RawText.lines`: memory flat
        in the file's size). Raises ``OSError`` when the file cannot be read."""
        return self.judge_text(raw.read(), ctx, source=source, label=label)

    def adjust_context(self, ctx: JudgeContext, test: PlannedTest, local: bool) -> JudgeContext:
        """``ctx`` (the test's node group, see :meth:`context`) adjusted for what ``test`` ran on."""
        return ctx

    def context(self, loaded: LoadedBlueprint, test: PlannedTest, launcher: str) -> JudgeContext:
        """The :class:`~validate.expectations.JudgeContext` ``test`` is judged against.

        The blueprint's context of the test's node group; a local run describes this machine instead
        (one node; on a CPU-only machine no GPU, so GPU expectations do not apply), then
        :meth:`adjust_context`.
        """
        ctx = context_from_blueprint(loaded.blueprint, test.group)
        local = launcher == "local"
        if local:
            changes: dict[str, Any] = {"nodes": 1}
            if test.device == "cpu":
                changes.update(gpus_per_node=None, gpu_model=None, nvlink_gbytes_s=None)
            ctx = dataclasses.replace(ctx, **changes, provenance=ctx.provenance + (("nodes", "local launcher: this machine"),))
        return self.adjust_context(ctx, test, local)

    def judge_group_file(self, path: Path, loaded: LoadedBlueprint, group: str, *, label: str | None = None) -> list[JudgeResult]:
        """Judge the raw output at ``path`` against node group ``group`` of ``loaded`` (what ``clusterforge
        judge --blueprint`` does with a suite whose outputs need the blueprint, :attr:`judges_files` false).
        Default: :meth:`judge_text` with that group's judge context. Raises :class:`UnreadableInput`
        when ``path`` is missing or binary."""
        raw = open_raw_input(path)
        return _judged(lambda: self.judge_raw(raw, context_from_blueprint(loaded.blueprint, group), source=str(path),
                                              label=label), path)

    def judge_test(self, raw: Path, test: PlannedTest, loaded: LoadedBlueprint, launcher: str) -> list[JudgeResult]:
        """Judge the raw output of ``test`` (run by ``launcher``) at ``raw``; labels start with the test id.
        Raises :class:`UnreadableInput` when ``raw`` is missing or binary."""
        file = open_raw_input(raw)
        return _judged(lambda: self.judge_raw(file, self.context(loaded, test, launcher), source=str(raw),
                                              label=test.id), raw)

    def explanations(self, results: list[JudgeResult]) -> list[Explanation]:
        """What this suite's results among ``results`` establish that explains other suites' results (a
        suite with :attr:`runs_first` reports its blocking failures here); default: nothing."""
        return []

    # -- reporting ------------------------------------------------------------------------------

    def summary(self, r: JudgeResult) -> str | None:
        """One line with ``r``'s key figure and its ratio to the expectation (``None``: the first reason or note)."""
        return None

    def compared(self, r: JudgeResult) -> bool:
        """Whether ``r`` was held against an expectation (a ``ratio`` to a derived or declared figure)."""
        return r.expected.get("ratio") is not None

    def expected_text(self, r: JudgeResult) -> str | None:
        """The report's "expected" cell for ``r`` (``None``: a dash)."""
        return None

    def result_plot(self, r: JudgeResult) -> str | None:
        """A PNG (base64) shown with ``r`` in the HTML report, or ``None``; at most :attr:`max_result_plots` are drawn."""
        return None

    def markdown_section(self, results: list[JudgeResult]) -> list[str]:
        """Markdown lines of this suite's section after the summary table (``results``: every result of
        the report, in order; a suite picks its own by ``kind``)."""
        return []

    def html_section(self, results: list[JudgeResult], plotted: int) -> HtmlSection | None:
        """This suite's section of the HTML page (``results`` as for :meth:`markdown_section`;
        ``plotted``: how many :meth:`result_plot` images of this suite were drawn)."""
        return None


class RanksSuite(Suite):
    """A suite of ``ranks`` placement: a collective benchmark. Its first payload runs under
    torchrun / mpirun / srun (:meth:`payload_args`, or with ``--spawn N`` on one node); where the
    nccl-tests binaries are installed the launchers run them instead, through the second payload
    (:meth:`binary_payload_args`) or directly (:meth:`binary_flags`)."""

    placement: ClassVar[Placement] = Placement.RANKS

    @property
    def binary_payload(self) -> str:
        """The payload that finds and runs an nccl-tests binary (the second of :attr:`payloads`)."""
        return self.payloads[1]

    @abstractmethod
    def binary_name(self, test: PlannedTest) -> str:
        """What ``binary_payload --probe --collective X`` is asked for: the collective of ``test``."""

    @abstractmethod
    def binary_payload_args(self, test: PlannedTest) -> list[str]:
        """Arguments of :attr:`binary_payload` (it adds ``-g`` and, with ``--hosts``, mpirun)."""

    def binary_search_args(self, test: PlannedTest) -> list[str]:
        """Where :attr:`binary_payload` looks for the binary first (its ``--probe`` too), e.g. the directory the node
        settings name; default ``[]``: the payload's own search."""
        return []

    @abstractmethod
    def local_binary(self, test: PlannedTest, dirs: list[str]) -> str | None:
        """Path of the benchmark binary for ``test`` on this machine (searched in ``dirs``, then as the
        suite's payload searches), or ``None``: the local launcher then runs :attr:`payload`."""

    @abstractmethod
    def binary_flags(self, test: PlannedTest, gpus_per_process: int = 1) -> list[str]:
        """Flags for the nccl-tests binary itself, as srun / mpirun in scripts pass them."""


# ---------------------------------------------------------------------------------------------
# helpers every suite's judge uses
# ---------------------------------------------------------------------------------------------


def open_raw_input(path: Path) -> RawText:
    """The raw output at ``path`` checked to be text (:func:`~validate.parsers.detect.open_raw`: read once in
    pieces, never whole). Raises :class:`UnreadableInput` (a usage error, exit 2) for a missing path, a
    directory, binary data or a file over :data:`~validate.parsers.detect.MAX_INPUT_BYTES`."""
    p = Path(path)
    if not p.exists():
        raise UnreadableInput(f"{p}: no such file — check the path (the raw output of nccl-tests, fio or the AMP benchmark)")
    if p.is_dir():
        raise UnreadableInput(f"{p}: is a directory; pass the output files (e.g. {p}/*.txt)")
    try:
        return open_raw(p)
    except NotText as e:
        raise UnreadableInput(str(e)) from None
    except OSError as e:
        raise UnreadableInput(f"{p}: cannot read: {e.strerror or e}") from None


def _judged(judge: Callable[[], list[JudgeResult]], path: Path) -> list[JudgeResult]:
    """``judge()``; an ``OSError`` while it reads ``path`` (removed or unreadable after it was opened) is
    :class:`UnreadableInput`."""
    try:
        return judge()
    except OSError as e:
        raise UnreadableInput(f"{path}: cannot read: {e.strerror or e}") from None


def read_raw(path: Path) -> str:
    """The text of the raw output at ``path`` (whole: :func:`open_raw_input` and
    :meth:`~validate.parsers.detect.RawText.read`). Raises :class:`UnreadableInput` (a usage error, exit 2)
    for a missing path, a directory or binary data."""
    raw = open_raw_input(path)
    try:
        return raw.read()
    except OSError as e:
        raise UnreadableInput(f"{raw.path}: cannot read: {e.strerror or e}") from None


_PAYLOAD_DIED = re.compile(r"the payload exited (-?\d+) without output")


def payload_crash(text: str) -> str | None:
    """The runner's stub for a payload that died silently: ``"exited 1: <last log line>"`` or ``None``."""
    m = _PAYLOAD_DIED.search(text)
    if not m:
        return None
    tail = [ln.strip() for ln in text[m.end():].splitlines() if ln.strip() and not ln.strip().startswith("#")]
    last = next((ln for ln in reversed(tail) if re.search(r"error|exception|fail|killed|denied|not found", ln, re.IGNORECASE)),
                tail[-1] if tail else "")
    return f"the payload exited {m.group(1)} without output" + (f"; its log ends with {last[:300]!r}" if last else "")


def nothing(r: JudgeResult, text: str, what: str) -> JudgeResult:
    """Verdict for output with nothing recognisable: fail when the payload crashed, else invalid."""
    crash = payload_crash(text)
    if crash:
        r.degrade(Verdict.FAIL, crash + ". Likely cause: see the log next to the raw output; rerun the payload by hand")
    else:
        r.degrade(Verdict.INVALID, what + (" (the file is empty)" if not text.strip() else ""))
    return r


def part_label(base: str | None, name: str, part: str | None, many: bool) -> str:
    """A result's label: ``base`` (the test id) or the file ``name``, with ``": part"`` when the file holds several."""
    head = base or name
    return f"{head}: {part}" if part and (many or base is None) else head


_MIG_NAME = re.compile(r"^(?P<parent>.*\S)\s+MIG\s+(?P<profile>\d+(?:c\.\d+)?g\.\d+gb\S*)$", re.IGNORECASE)


def mig_profile(name: str | None) -> tuple[str, str] | None:
    """``(parent GPU name, MIG profile)`` of the name CUDA gives a MIG instance (``NVIDIA A100-SXM4-40GB MIG 1g.5gb`` ->
    ``("NVIDIA A100-SXM4-40GB", "1g.5gb")``: the parent's name, ``MIG`` and the profile, as ``cudaGetDeviceProperties``,
    nvidia-smi and nccl-tests' device lines print it), else ``None``."""
    m = _MIG_NAME.match(name.strip()) if name else None
    return (m.group("parent"), m.group("profile")) if m else None


def resolve_gpu(name: str | None) -> str | None:
    """Catalog key of a GPU name as a log prints it (``NVIDIA H100 80GB HBM3`` -> ``h100-sxm``; a MIG instance's name,
    ``NVIDIA H200 MIG 1g.35gb``, by its parent GPU), ``None`` if unknown."""
    if not name:
        return None
    mig = mig_profile(name)
    return catalog().resolve_gpu_key(mig[0] if mig else name)


def gpu_mismatch(name: str, log_key: str | None, declared: str, *, log_vendor: str | None = None) -> bool:
    """True when the GPU the log names is not the declared one: another vendor's part (from the name, or
    ``log_vendor`` when the tool says it, e.g. rccl-tests), a different catalog key, or a name the catalog does not
    know that lacks the declared model's family (``h100`` of ``h100-sxm``). A generic name of the declared vendor
    (``NVIDIA Graphics Device``, what an early driver calls a part it does not know yet:
    :meth:`~blueprints.catalog.Catalog.generic_gpu_name`) is no mismatch: it says the vendor only."""
    cat = catalog()
    try:
        declared_vendor = cat.gpu(declared).vendor
    except KeyError:
        declared_vendor = None
    vendor = cat.gpu_name_vendor(name) or log_vendor
    if vendor and declared_vendor and vendor != declared_vendor:
        return True
    if log_key is not None:
        return log_key != declared
    if cat.generic_gpu_name(name):
        return False
    family = declared.split("-")[0].lower()
    return family not in name.lower().replace(" ", "")


def png(fig: Any) -> str:
    """A matplotlib figure as a base64 PNG (96 dpi), the figure closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")
