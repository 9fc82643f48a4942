"""clusterforge validation: payloads, launchers, parsers, expectations, judge and reports.

Two halves with different rules:

* :mod:`validate.payloads` run ON the cluster nodes (standard library + torch only).
* Everything else runs on the control machine. Each suite (node checks, NCCL, fio, AMP) is one
  module of :mod:`validate.suites`, registered in :data:`validate.suites.REGISTRY`: it plans its
  tests (:mod:`validate.plan`: typed :class:`~validate.plan.PlannedTest` params), builds its
  payload's arguments, judges raw outputs into :class:`~validate.results.JudgeResult` objects
  (a :class:`~validate.results.Verdict`: pass / warn / fail / invalid) and plots them. Shared by
  the suites: :mod:`validate.parsers` read raw outputs (nccl-tests text and ``-J`` JSON, the
  built-in torch collective benchmark, fio JSON and text, the AMP benchmark's JSON);
  :mod:`validate.expectations` derives what the declared hardware should deliver
  (:class:`~validate.expectations.JudgeContext`, thresholds from the blueprint models);
  :mod:`validate.runner` runs the planned tests through :mod:`validate.launchers`;
  :mod:`validate.judge` judges files by kind; :mod:`validate.report` writes JSON, Markdown,
  JUnit XML and HTML reports.

Importing this package registers the suites (:mod:`validate.suites`), so a judge context built by
:mod:`validate.expectations` asks every one of them for its expectations whichever module of the
package was imported first. It imports nothing heavy (no torch, no matplotlib: suites import their
plotting library when they plot).
"""

# registers the suites (and their expectation sources) on any import of the package
from . import suites as suites
