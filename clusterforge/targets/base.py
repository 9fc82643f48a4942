"""The interface every deploy target implements, and the one plan type they return.

A target is where a blueprint's cluster runs (``target.provider`` of the blueprint: ``aws``,
``onprem``). The CLI verbs ``plan``, ``render``, ``up`` and ``down`` look the target up in
:data:`clusterforge.targets.TARGETS` and call it; they never branch on the provider themselves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from rich.console import Console

    from blueprints import LoadedBlueprint
    from blueprints.findings import Finding

    from ..cost import CostReport

__all__ = ["DeployOptions", "Plan", "Target"]


class Plan(ABC):
    """What ``up`` would do for one blueprint, computed offline (no credentials, no network).

    ``provider``: the target that made it; ``blueprint``: the blueprint's name. Subclasses hold the
    target's own detail (cloud resources, or hosts with their roles and variables).
    """

    provider: str
    blueprint: str

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The plan as plain JSON data (``clusterforge plan --json``); secrets are masked."""

    @abstractmethod
    def show(self, console: Console, *, show_all: bool = False) -> None:
        """Print the plan for a person on ``console``: long runs collapsed and long lines cut with
        a marker unless ``show_all``."""


@dataclass(frozen=True)
class DeployOptions:
    """Options of ``clusterforge up`` / ``down``; each target uses the ones that apply to it and
    refuses the ones that do not (:class:`~clusterforge.errors.UsageError`).

    ``state_dir``: the state directory (cloud; ``None``: :func:`clusterforge.state.default_state_dir`,
    never relative to the current directory); ``preview``: only show what would change (cloud);
    ``output``: where the rendered Ansible files go (``None``: the target's default); ``check``: Ansible
    check mode; ``tags``: only these Ansible tags; ``limit``: only these hosts or groups; ``yes``: do not
    ask (configure this machine, replace or delete cloud resources, destroy); ``refresh_ami``: cloud:
    resolve the node images anew instead of reusing the recorded ones; ``adopt``: cloud: move a stack
    recorded for another blueprint file to this one; ``wait``: cloud: after the deploy, wait until every node
    reports configured (:mod:`clusterforge.readiness`; on-prem the Ansible run is the wait); ``wait_timeout_s``: how
    long (seconds, default :data:`clusterforge.readiness.DEFAULT_TIMEOUT_S`).
    """

    state_dir: Path | None = None
    preview: bool = False
    output: Path | None = None
    check: bool = False
    tags: tuple[str, ...] = ()
    limit: str | None = None
    yes: bool = False
    refresh_ami: bool = False
    adopt: bool = False
    wait: bool = True
    wait_timeout_s: float = 3600.0


class Target(ABC):
    """One deploy target. Implementations live one per module in :mod:`clusterforge.targets` and
    are registered by provider name in :data:`clusterforge.targets.TARGETS`.

    Every method takes a blueprint that passed ``check`` (:class:`~blueprints.LoadedBlueprint`) of
    this target's provider. Errors a user can cause are :class:`~clusterforge.errors.ClusterforgeError`
    subclasses (one line, no traceback).
    """

    provider: ClassVar[str]
    """The ``target.provider`` value this target serves (``aws``)."""

    render_dir: ClassVar[str]
    """Sub-directory of ``clusterforge render -o DIR`` this target writes its files to."""

    preflight_checks: ClassVar[dict[str, str]] = {}
    """Finding id -> what it means, for every finding :meth:`preflight` may report (``clusterforge rules`` lists
    them)."""

    def preflight(self, loaded: LoadedBlueprint) -> list[Finding]:
        """Findings only this target's renderer can compute (too costly for ``check``'s start-up),
        each located in the blueprint like a rule's. ``plan``, ``render`` and ``up`` run it first
        and stop on an error (:func:`clusterforge.targets.checked_target`). Default: none."""
        return []

    @abstractmethod
    def plan(self, loaded: LoadedBlueprint) -> Plan:
        """What :meth:`up` would create or configure, computed offline."""

    def changes_report(self, loaded: LoadedBlueprint, state_dir: Path | None) -> list[str]:
        """Lines ``plan`` prints after the plan: what ``up`` would change on what is deployed now
        (the cloud target reads its record). Default: none."""
        return []

    def changes_json(self, loaded: LoadedBlueprint, state_dir: Path | None) -> dict[str, Any] | None:
        """:meth:`changes_report` as data, ``plan --json``'s ``changes`` (the cloud target:
        :func:`clusterforge.updates.report`, or ``{stack, owner, refused}`` when another file owns the stack).
        Default: ``None``, nothing deployed to compare with."""
        return None

    def cost(self, loaded: LoadedBlueprint, plan: Plan | None = None, *, utilization: float = 1.0,
             prices: dict[str, Any] | None = None) -> CostReport | None:
        """What ``up`` would create or configure for ``loaded`` costs: :class:`~clusterforge.cost.CostReport`,
        every line with its price's source and date, unpriced lines said (``clusterforge cost``, the cost line
        of ``plan``). ``plan``: this target's plan of ``loaded`` when one was made already (a target that prices
        what it creates without a plan ignores it; one that needs it makes it when ``None``). ``utilization``
        (0-1]: the share of hours the cluster works, where the target's cost depends on it; ``prices``: the price
        data (default the catalog with the user's refreshed prices). Default: ``None``, a target without prices
        (``plan`` then prints no cost line, ``cost`` says so)."""
        return None

    def refresh_prices(self, loaded: LoadedBlueprint) -> tuple[list[str], list[str], Path]:
        """Read today's prices of what ``up`` would create for ``loaded`` from the provider's price service into
        the user's price overlay (``clusterforge cost --refresh``); returns (prices read, prices not read with
        why, the overlay file). Default: :class:`~clusterforge.errors.UsageError`."""
        from blueprints.errors import UsageError

        raise UsageError(f"--refresh reads a cloud provider's price list; target `{self.provider}` has none (on-prem "
                         "prices and site figures live in the blueprint's `cost` section)")

    @abstractmethod
    def render(self, loaded: LoadedBlueprint, out_dir: Path) -> list[Path]:
        """Write the files a user can deploy with by hand into ``out_dir``; returns the files written.
        Raises ``OSError`` when ``out_dir`` cannot be written."""

    @abstractmethod
    def up(self, loaded: LoadedBlueprint, options: DeployOptions) -> None:
        """Deploy (or preview / check) the cluster, streaming progress; prints one ✓ line when done.
        Raises :class:`~clusterforge.errors.ProvisionError` when the deploy tool fails."""

    @abstractmethod
    def down(self, what: str, options: DeployOptions) -> None:
        """Destroy what :meth:`up` created for ``what`` (a blueprint path or a deployment's name) from
        the target's own record, without loading or checking the blueprint (one that no longer passes
        ``check`` can still be torn down); asks first unless ``options.yes``. Raises
        :class:`~clusterforge.errors.UsageError` where nothing is recorded or the target has nothing to destroy."""
