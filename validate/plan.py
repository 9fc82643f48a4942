"""The typed test plan: :class:`PlannedTest` and the base of every suite's payload settings.

A suite (:mod:`validate.suites`) plans :class:`PlannedTest` objects whose ``params`` is its own
frozen dataclass derived from :class:`TestParams` (``NcclParams``, ``FioParams``, ``AmpParams``,
``NodeParams``): field names are the keys written to ``run.json`` and to each ``results.jsonl``
line's ``run_with.params`` (what ``--resume`` compares), and every field's docstring gives its unit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

__all__ = ["Device", "PlannedTest", "TestParams"]

Device = Literal["cuda", "cpu"]
"""Where a test's ranks compute: NVIDIA GPUs (``cuda``) or CPU processes (``cpu``, gloo for collectives)."""


@dataclass(frozen=True)
class TestParams:
    """Base of a suite's payload settings (a frozen dataclass per suite).

    :meth:`to_json` gives ``{field: value}`` in field order; :meth:`from_json` is its inverse and
    raises ``ValueError`` for a missing or unknown key.
    """

    __test__: ClassVar[bool] = False  # not a pytest test class despite its name
    raw_suffix: ClassVar[str] = ".json"
    """Suffix of the raw output file the suite's payload writes (``.json`` documents, ``.txt`` tables)."""

    def to_json(self) -> dict[str, Any]:
        """``{field: value}`` (JSON-able), the form recorded in ``run.json`` and ``results.jsonl``."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TestParams:
        """The params whose :meth:`to_json` is ``d``. Raises ``ValueError`` for missing or unknown keys."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown field(s) {', '.join(sorted(unknown))}")
        try:
            return cls(**d)
        except TypeError as e:
            raise ValueError(f"{cls.__name__}: {e}") from None


P = TypeVar("P", bound="TestParams")


@dataclass(frozen=True)
class PlannedTest:
    """One validation test.

    ``id``: stable test id (``node``, ``nccl-all_reduce``, ``fio-scratch``, ``amp``; the node group is added
    when a blueprint has several compute groups), used for ``raw/<id>.*`` and ``--resume``.
    ``kind``: the name of the suite that planned it (:data:`validate.suites.REGISTRY`), which also
    judges it. ``group``: node group name. ``nodes``: nodes the test spans; ``ranks_per_node``: GPUs
    per node (or gloo processes on a CPU-only machine); ``device``: ``cuda`` or ``cpu``. ``params``:
    the suite's typed payload settings (a :class:`TestParams` subclass). ``notes``:
    facts the report should show (e.g. "temp directory instead of /scratch").
    """

    __test__: ClassVar[bool] = False

    id: str
    kind: str
    group: str
    nodes: int
    ranks_per_node: int
    device: Device
    params: TestParams
    description: str
    notes: tuple[str, ...] = ()

    def params_as(self, kind: type[P]) -> P:
        """``params`` as the suite's own type ``kind``. Raises ``TypeError`` when the test was planned
        with another suite's parameters (a test handed to the wrong suite)."""
        if not isinstance(self.params, kind):
            raise TypeError(f"test {self.id}: params are {type(self.params).__name__}, not {kind.__name__}")
        return self.params

    @property
    def raw_suffix(self) -> str:
        """The raw output's file suffix: ``.txt`` for collective tables, ``.json`` for JSON documents."""
        return self.params.raw_suffix

    @property
    def ranks(self) -> int:
        """Total ranks of a collective test (nodes x ranks per node)."""
        return self.nodes * self.ranks_per_node

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (for ``run.json``)."""
        return {"id": self.id, "kind": self.kind, "group": self.group, "nodes": self.nodes,
                "ranks_per_node": self.ranks_per_node, "device": self.device, "params": self.params.to_json(),
                "description": self.description, "notes": list(self.notes)}
