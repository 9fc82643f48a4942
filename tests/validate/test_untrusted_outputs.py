"""Untrusted outputs (issue 33, part 5), from the user's side: hostile raw outputs and results files
give a verdict or one line in bounded time, and the reports they feed neither write through symbolic
links nor carry their links or HTML."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from clusterforge.cli import main
from validate.node_checks import CHECKS
from validate.parsers import amp, fio, nccl, node
from validate.parsers.bounds import MAX_JSON_DEPTH, MAX_LINE_CHARS
from validate.report import NoResults, load_results
from validate.signatures import SIGNATURES

HOSTILE_LINE = 140 * 1024
"""The size of the hostile line of the security review (a 140 KB line took 49 s before)."""


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def _reasons(out: str) -> list[str]:
    return [x for r in json.loads(out)["results"] for x in r["reasons"] + r["notes"]]


# ---- 1. super-linear regular expressions --------------------------------------------------------


@pytest.mark.parametrize("line", [
    "NCCL INFO " + "NET/Plugin" * (HOSTILE_LINE // 10),
    "x NCCL INFO " + "Channel 0: " * (HOSTILE_LINE // 11),
    "\t" * HOSTILE_LINE + "x",
    "collectives: " * (HOSTILE_LINE // 13),
])
def test_judge_skips_an_over_long_line_and_says_so(tmp_path, capsys, line):
    raw = tmp_path / "nccl.log"
    raw.write_text("# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 1 iters: 1\n" + line + "\n")
    rc, out, _ = _run(capsys, "judge", raw, "--kind", "nccl", "--json")
    assert rc == 3
    assert any(f"longer than {MAX_LINE_CHARS:,} characters not read" in x for x in _reasons(out))


_FIXED = [
    (nccl._PLUGIN_MISSING, "NET/Plugin"), (nccl._CHANNEL, "Channel 0: "), (nccl._FATAL, "collectives: "),
    (nccl._FATAL, "killed "), (nccl._FATAL, "\t"), (nccl._CONFIG_KEYS, "iters" + " " * 4000 + "x"),
    (nccl._ROW, "1 1 float a" + " " * HOSTILE_LINE + "b"), (nccl._RANK, "Rank 1 Pid 1 on h device 1 a" + " " * HOSTILE_LINE + "b"),
    (nccl._USING_NETWORK, "NCCL INFO Using network a" + " " * HOSTILE_LINE + "b"), (fio._VERIFY_OTHER, "verify: "),
]


@pytest.mark.parametrize(("rx", "unit"), _FIXED, ids=lambda v: getattr(v, "pattern", repr(v))[:24])
def test_parser_patterns_do_not_backtrack_on_a_hostile_140_kb_line(rx, unit):
    # each of these took minutes on such a line before (quadratic backtracking); now each character is
    # scanned a bounded number of times, so the whole test runs in well under a second
    line = unit * max(HOSTILE_LINE // len(unit), 1)
    rx.search(line)
    rx.match(line)


def test_signature_patterns_do_not_backtrack_on_hostile_lines():
    for s in SIGNATURES:
        if not s.pattern:
            continue
        for word in re.findall(r"[A-Za-z/_]{3,}", s.pattern):
            s.regex.search((word + " ") * (HOSTILE_LINE // (len(word) + 1)) + "\x01")  # type: ignore[union-attr]


def test_json_and_node_scanners_are_linear():
    # every start decodes to the end of the text and fails: quadratic before
    assert amp._docs("[[],\n" * 30000) == []
    assert node.read_documents("[1," * 50000) == []
    assert node.parse_nvidia_smi_xml("<nvidia_smi_log>" + "<!DOCTYPE" * 20000) is None
    assert node.parse_mdstat("md" + ":a" * 50000) == {}
    with pytest.raises(ValueError):
        fio.parse_fio_json('{"jobs": [{},\n' * 30000)


# ---- 2. deeply nested JSON -----------------------------------------------------------------------


DEEP = "[" * 100000 + "]" * 100000


@pytest.mark.parametrize(("name", "text"), [
    ("amp.json", '{"kind": "amp", "version": 1, "losses": ' + DEEP + "}"),
    ("fio.json", '{"fio version": "fio-3.36", "jobs": ' + DEEP + "}"),
    ("nccl.json", '{"nccl_version": "2.21", "results": ' + DEEP + "}"),
    ("nccl-lines.json", '{"nccl_version": "2.21", "results": ' + "[\n" * 5000 + "]\n" * 5000 + "}"),
])
@pytest.mark.parametrize("kind", [None, "nccl", "fio", "amp"])
def test_judge_deeply_nested_json_is_invalid_not_a_traceback(tmp_path, capsys, name, text, kind):
    raw = tmp_path / name
    raw.write_text(text)
    rc, out, _ = _run(capsys, "judge", raw, "--json", *(["--kind", kind] if kind else []))
    assert rc == 3
    doc = json.loads(out)
    assert {r["verdict"] for r in doc["results"]} == {"invalid"}


def test_judge_names_the_nesting_bound(tmp_path, capsys):
    raw = tmp_path / "amp.json"
    raw.write_text('{"kind": "amp", "losses": ' + DEEP + "}")
    rc, out, _ = _run(capsys, "judge", raw, "--json")
    assert rc == 3 and any(f"nested deeper than {MAX_JSON_DEPTH} levels" in x for x in _reasons(out))


@pytest.mark.parametrize("file", ["results.jsonl", "report.json"])
def test_report_of_deeply_nested_results_is_one_line(tmp_path, capsys, file):
    line = json.dumps({"source": "x", "kind": "nccl", "verdict": "pass"})[:-1] + ', "metrics": {"a": ' + DEEP + "}}"
    (tmp_path / file).write_text(line + "\n" + line + "\n" if file.endswith("jsonl") else '{"results": [' + line + "]}")
    rc, out, err = _run(capsys, "report", tmp_path)
    assert rc == 2 and f"nested deeper than {MAX_JSON_DEPTH} levels" in out + err
    with pytest.raises(NoResults, match="nested deeper"):
        load_results(tmp_path)


# ---- 3. writes through symbolic links ------------------------------------------------------------


def _results_dir(tmp_path: Path, **extra) -> Path:
    d = tmp_path / "results"
    d.mkdir()
    r = {"source": "raw/x.log", "kind": "nccl", "verdict": "pass", "label": "x"} | extra
    (d / "results.jsonl").write_text(json.dumps(r) + "\n")
    return d


def test_report_replaces_symlinks_instead_of_writing_through_them(tmp_path, capsys):
    d = _results_dir(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    for name in ("report.md", "report.html", "junit.xml"):
        os.symlink(victim, d / name)
    rc, _, _ = _run(capsys, "report", d)
    assert rc == 0 and victim.read_text() == "keep me\n"
    assert not any((d / n).is_symlink() for n in ("report.md", "report.html", "junit.xml"))
    assert (d / "report.md").read_text().startswith("# ")


# ---- 4. links in the HTML report -----------------------------------------------------------------


@pytest.mark.parametrize("source", ["javascript:alert(1)", "data:text/html,<script>alert(1)</script>", "/etc/passwd"])
def test_html_report_links_only_http_and_files_in_the_results_folder(tmp_path, capsys, source):
    d = _results_dir(tmp_path, source=source)
    (d / "javascript:alert(1)").write_text("raw\n")  # a file of that name in the folder
    rc, _, _ = _run(capsys, "report", d)
    assert rc == 0
    html = (d / "report.html").read_text()
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert all(h.startswith(("#", "http://", "https://", "./", "../")) for h in hrefs), hrefs
    assert not any("javascript:" in h.lower() or h.startswith("data:") or "etc/passwd" in h for h in hrefs)


def test_node_check_source_links_are_http_only(tmp_path, capsys):
    checks = [{"node": "n1", "id": next(iter(CHECKS)), "verdict": "fail", "measured": "m", "expected": "e",
               "source": "javascript:alert(1)"}]
    d = _results_dir(tmp_path, kind="node", verdict="fail", metrics={"checks": checks})
    rc, _, _ = _run(capsys, "report", d)
    assert rc == 0
    html, md = (d / "report.html").read_text(), (d / "report.md").read_text()
    assert "Node checks" in html and "## Node checks" in md
    assert "javascript:" not in " ".join(re.findall(r'href="([^"]*)"', html))
    assert "](javascript:" not in md and "source: javascript:alert(1)" in md


# ---- 5. Markdown from benchmark output -----------------------------------------------------------


def test_report_md_escapes_html_and_markdown_from_results(tmp_path, capsys):
    d = _results_dir(tmp_path, label="<img src=x onerror=alert(1)>", kind="<b>k</b>",
                     reasons=["<script>alert(1)</script> [x](javascript:alert(1)) | cell"],
                     notes=["**bold** <iframe>"], source="`x`<a>.log")
    rc, _, _ = _run(capsys, "report", d)
    assert rc == 0
    md = (d / "report.md").read_text()
    assert not re.search(r"(?<!\\)<(script|img|iframe|b|a)\b", md.replace("`` `x`<a>.log ``", "")), md
    assert not re.search(r"(?<!\\)\]\(javascript:", md) and "\\| cell" in md and "\\*\\*bold\\*\\*" in md


def test_render_replaces_file_symlinks_and_refuses_folder_links_out(tmp_path, capsys):
    from ..conftest import EXAMPLES

    bp = EXAMPLES / "onprem-dgx-h100-ib.yaml"
    out = tmp_path / "out"
    rc, _, _ = _run(capsys, "render", bp, "-o", out)
    assert rc == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    site = out / "ansible" / "site.yml"
    site.unlink()
    os.symlink(victim, site)
    os.symlink(victim, out / ".clusterforge-render.json.x")
    (out / ".clusterforge-render.json").unlink()
    os.symlink(victim, out / ".clusterforge-render.json")
    rc, _, _ = _run(capsys, "render", bp, "-o", out)
    assert rc == 0 and victim.read_text() == "keep me\n"
    assert not site.is_symlink() and not (out / ".clusterforge-render.json").is_symlink()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out2 = tmp_path / "out2"
    out2.mkdir()
    os.symlink(elsewhere, out2 / "validation")
    rc, out_text, err = _run(capsys, "render", bp, "-o", out2)
    assert rc == 2 and "outside the output folder" in out_text + err
    assert list(elsewhere.iterdir()) == []


# --- the bounds themselves (validate/parsers/bounds.py), at their edges ---------------------------------------------

def test_a_depth_over_the_bound_is_refused_however_the_brackets_mix():
    # one '[' and five '{' nest six deep: the quick count that skips the walk adds the two kinds of bracket
    from validate.parsers.bounds import JsonLimitError, loads

    doc = '[{"a": {"b": {"c": {"d": {}}}}}]'
    assert loads(doc, max_depth=6) == [{"a": {"b": {"c": {"d": {}}}}}]
    with pytest.raises(JsonLimitError, match="nested deeper than 5 levels"):
        loads(doc, max_depth=5)
    with pytest.raises(JsonLimitError):
        loads('[[[[[{"a": 1}]]]]]', max_depth=5)  # five '[' and one '{'


def test_limit_errors_keep_no_copy_of_the_text_and_point_at_its_start():
    # an over-long text is refused before any parse and the error holds none of it; a document too deep for
    # Python's own parser is named at its first line whatever its length in lines
    from validate.parsers.bounds import JsonLimitError, loads

    with pytest.raises(JsonLimitError) as long:
        loads('{"a": "' + "x" * 100 + '"}', max_chars=50)
    assert (long.value.doc, long.value.pos, long.value.lineno) == ("", 0, 1)
    deep = "[\n" * 50_000 + "]\n" * 50_000
    with pytest.raises(JsonLimitError) as too_deep:
        loads(deep, max_depth=10**6)
    assert (too_deep.value.pos, too_deep.value.lineno) == (0, 1)
    assert str(too_deep.value).endswith("(line 1)")


def test_decode_at_reads_the_first_slice_from_where_the_document_starts():
    # the slices are counted from the document's start (256 characters, then doubled while it runs past the slice),
    # and what they read is charged to the scan budget
    from validate.parsers.bounds import ScanBudget, decode_at

    text = "x" * 300 + '{"busbw": 1.5}' + " " * 700
    budget = ScanBudget(text)
    before = budget.left
    assert decode_at(json.JSONDecoder(), text, 300, budget) == ({"busbw": 1.5}, 314)  # end index in the text
    assert before - budget.left == 256


def test_the_scan_budget_note_comes_when_the_last_character_is_spent():
    # one note, when the budget reaches 0 (`exhausted`), not a character before (kills `left <= 0` -> `<= 1`)
    from validate.parsers.bounds import ScanBudget, collecting_unread

    budget = ScanBudget("x" * 10)
    with collecting_unread() as notes:
        budget.charge(budget.left - 1)
        assert (budget.left, budget.exhausted, notes) == (1, False, [])
        budget.charge(1)
        assert budget.exhausted and len(notes) == 1 and "was not searched for documents" in notes[0]
        budget.charge(5)
        assert len(notes) == 1


def test_a_short_output_full_of_json_lookalikes_still_has_its_document_read():
    # The scan budget is 16 x the text's length plus a floor of 4 Mi characters (ScanBudget's contract): a training
    # log that printed 4,000 small Python dicts (`{'loss': 1}`, not JSON) makes 4,000 failed decode attempts of a
    # 256-character slice each, 1.0 M characters read, more than 16 x its 48 K characters; the floor keeps the AMP
    # result after them readable (without it the parser gives up before reaching it)
    from .test_parsers import AMP_DOC

    text = "{'loss': 1}\n" * 4000 + json.dumps(AMP_DOC) + "\n"
    assert 16 * len(text) < 4000 * 256 < 4 * 1024 * 1024
    (run,) = amp.parse_amp(text)
    assert run.tokens_per_s == 63900.0


@pytest.mark.parametrize("junk", ["[", "[[[ {", "[" * 100_000])
def test_a_node_document_after_a_line_of_brackets_is_read(junk):
    # a line that opens brackets and never closes them (a list a killed writer began, a deep run of `[`) fails to
    # decode and is skipped in one step; the skip stops at the line break, so the document on the next line is read
    # (it used to swallow that document's `{` too)
    doc = {"kind": "node-health", "host": "gpu-01"}
    got = node.read_documents(f"launcher: start\n{junk}\n{json.dumps(doc)}\n")
    assert got == [doc]
