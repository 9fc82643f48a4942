"""Regenerate ``docs/troubleshooting.md`` from the judge's signature table.

Run ``python -m validate.troubleshooting > docs/troubleshooting.md``. This is a module of its own,
imported by nothing, so that running it does not import :mod:`validate.signatures` twice (the
package imports the signature table, and ``python -m validate.signatures`` would then warn that the
module is already in ``sys.modules``). ``tests/validate/test_judge_diagnosis.py`` fails when the
committed page differs from :func:`validate.signatures.troubleshooting_markdown`.
"""

from __future__ import annotations

import sys

from .signatures import troubleshooting_markdown

if __name__ == "__main__":
    sys.stdout.write(troubleshooting_markdown())
