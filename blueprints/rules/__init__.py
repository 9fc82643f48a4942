"""Pre-deploy rules: each has a stable id, a severity, a one-line fix and a source URL.

Use :func:`check` to run them on a loaded blueprint and :func:`all_rules` to list them. Every
module in this package whose name does not start with ``_`` (and is not the registry) holds rules
and registers them on import; importing the package imports them all, so a new rule module needs
no registration list. Rule modules import only :mod:`.registry` and :mod:`._facts`, never this
package, so there is no import circle.
"""

import importlib
import pkgutil

from .registry import Hit, Rule, RuleContext, all_rules, check, rule

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_") and _module.name != "registry":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Hit", "Rule", "RuleContext", "all_rules", "check", "rule"]
