"""Pre-deploy rules: each has a stable id, a severity, a one-line fix and a source URL.

Use :func:`check` to run them on a loaded blueprint and :func:`all_rules` to list them.
Rule modules register themselves on import; add new modules to ``_load_all``.
"""

from .registry import Hit, Rule, RuleContext, all_rules, check, rule

__all__ = ["Hit", "Rule", "RuleContext", "all_rules", "check", "rule"]
