"""clusterforge validation: payloads, launchers, parsers, expectations, judge and reports.

Two halves with different rules:

* :mod:`validate.payloads` run ON the cluster nodes (standard library + torch only).
* Everything else runs on the control machine: :mod:`validate.parsers` read raw outputs
  (nccl-tests text and ``-J`` JSON, the built-in torch collective benchmark, fio JSON and text,
  the AMP benchmark's JSON); :mod:`validate.expectations` derives what the declared hardware
  should deliver (:class:`~validate.expectations.JudgeContext`); :mod:`validate.judge` turns a
  raw output into :class:`~validate.judge.JudgeResult` verdicts (pass / warn / fail / invalid);
  :mod:`validate.report` writes JSON, Markdown, JUnit XML and HTML reports.

Importing this package imports nothing heavy (no torch, no matplotlib).
"""
