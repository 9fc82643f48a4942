"""Parse fio output: JSON (``--output-format=json`` / ``json+``) and the normal text output.

JSON quirks handled (fio(1) man page, https://fio.readthedocs.io/en/latest/fio_doc.html, and public outputs):

* text before (and after) the JSON document (``filename: (g=0): rw=...``, ``Starting 1 process``,
  verify errors on stderr merged into the same file): the parser decodes from the first ``{``
  that starts a document, and reads the surrounding text for verify failures and errors;
* duplicate keys in ``"job options"``/``"global options"`` (two ``filename`` entries, fixtures
  fio-02): kept as a list instead of Python's last-one-wins;
* percentiles under ``clat_ns`` (default) or ``lat_ns`` (``--lat_percentiles=1``, ``tests/fixtures/fio/fio-01.json``);
* ``numjobs>1`` without ``group_reporting`` (one entry per clone, same name): summed into one
  job, as group reporting would; with ``group_reporting`` fio already reports group totals;
* several JSON documents appended to one file.

Units: ``bw_bytes`` bytes/s; fio's ``bw`` field is KiB/s (ignored in favour of ``bw_bytes``);
latencies in nanoseconds; ``runtime`` milliseconds. Text output: ``BW=2694MiB/s (2825MB/s)``;
the decimal figure in parentheses is used (MB/s = 1e6 bytes/s).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .bounds import ScanBudget, clip_input, decode_at, long_lines_note, note_unread, too_long

__all__ = ["FIO_DEFAULT_BS", "FIO_DEFAULT_RW", "FioIo", "FioJob", "FioReport", "VerifyFailure", "command_line_options",
           "parse_fio", "parse_fio_json", "parse_fio_text", "parse_size"]

FIO_DEFAULT_RW = "read"
"""fio's default I/O pattern (fio(1) ``rw``: "Default: read"; https://fio.readthedocs.io/en/latest/fio_doc.html#cmdoption-arg-readwrite)."""
FIO_DEFAULT_BS = 4096
"""fio's default block size in bytes (fio(1) ``bs``: "Defaults to 4096"; https://fio.readthedocs.io/en/latest/fio_doc.html#cmdoption-arg-blocksize)."""

_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


def parse_size(text: str | float | None) -> int | None:
    """fio size strings -> bytes: ``"4096"``, ``"4k"``, ``"1M"``, ``"256KiB"``, ``"1m"`` (base 1024, as fio's
    default ``kb_base=1024``); ranges/lists (``"4k-64k"``, ``"4k,1m"``) give the first value; ``None`` if unparseable."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        return int(text)
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtTpP]?)(?:i?[bB])?", str(text))
    if not m:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


@dataclass
class FioIo:
    """One direction (read/write/trim) of a job: bytes/s, IOPS, latencies in ns (``None`` if not reported)."""

    io_bytes: int = 0
    bw_bytes_per_s: float = 0.0
    iops: float = 0.0
    runtime_ms: float = 0.0
    total_ios: int = 0
    lat_mean_ns: float | None = None
    p99_ns: float | None = None
    p99_source: str | None = None

    @property
    def active(self) -> bool:
        """True when the job did I/O in this direction."""
        return self.io_bytes > 0 or self.total_ios > 0 or self.bw_bytes_per_s > 0


@dataclass
class FioJob:
    """One fio job (or job group). ``options`` merges ``global options`` and ``job options``
    (string values; a list where a key was repeated). ``clones`` is how many JSON entries were
    summed (numjobs without group reporting). ``options_complete``: the options are every option the
    job was given (JSON output lists them all, so an absent option has fio's default); False for the
    text output, which shows only rw, bs, ioengine and iodepth (plus those of a fio command line printed with it:
    ``command_line`` True, :func:`command_line_options`)."""

    name: str
    groupid: int = 0
    error: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    read: FioIo = field(default_factory=FioIo)
    write: FioIo = field(default_factory=FioIo)
    trim: FioIo = field(default_factory=FioIo)
    clones: int = 1
    elapsed_s: float | None = None
    options_complete: bool = True
    command_line: bool = False

    def option(self, key: str) -> str | None:
        """The effective value of a fio option (the last one given), or ``None``."""
        v = self.options.get(key)
        if isinstance(v, list):
            return str(v[-1]) if v else None
        return None if v is None else str(v)

    def int_option(self, key: str) -> int | None:
        """The effective value of an integer option (``numjobs``, ``iodepth``) when it is a plain decimal number,
        else ``None``: absent, or a value the output records as something else (an unexpanded ``${DEPTH}`` of a job
        file, a suffixed ``4k``), which is never guessed at."""
        v = (self.option(key) or "").strip()
        return int(v) if v.isascii() and v.isdigit() else None

    def option_values(self, key: str) -> list[str]:
        """Every value given for ``key`` (several ``filename`` entries, ``a:b`` lists split)."""
        v = self.options.get(key)
        vals = v if isinstance(v, list) else ([] if v is None else [v])
        out: list[str] = []
        for x in vals:
            out += [p for p in re.split(r"(?<!\\):", str(x)) if p]
        return out

    @property
    def rw(self) -> str | None:
        """``rw``/``readwrite`` option: ``read``, ``write``, ``randread``, ``randwrite``, ``randrw``, ``rw`` ..."""
        return self.option("rw") or self.option("readwrite")

    @property
    def random(self) -> bool:
        """True for random I/O patterns (``rand*``)."""
        return bool(self.rw and self.rw.startswith("rand"))

    @property
    def block_size(self) -> int | None:
        """Block size in bytes (``bs``/``blocksize``; the read size when a ``R,W`` pair is given)."""
        return parse_size(self.option("bs") or self.option("blocksize"))

    @property
    def direct(self) -> bool | None:
        """``direct=1`` (O_DIRECT, no page cache); ``None`` when not given."""
        v = self.option("direct")
        return None if v is None else v.strip() not in ("0", "false")

    @property
    def buffered(self) -> bool | None:
        """True when the job went through the page cache: ``buffered=1``, or ``direct`` not 1 (fio's
        default is ``direct=0``, so an absent ``direct`` means buffered when the options are complete);
        ``None`` when the output does not say (text output)."""
        b = self.option("buffered")
        if b is not None and b.strip() not in ("0", "false"):
            return True
        d = self.direct
        if d is not None:
            return not d
        return True if (self.options_complete or self.command_line) else None

    @property
    def rw_effective(self) -> str:
        """``rw`` with fio's default (``read``) when the job does not set it (fio(1): rw=str, default read)."""
        return self.rw or FIO_DEFAULT_RW

    @property
    def block_size_effective(self) -> int:
        """Block size in bytes with fio's default (4096, fio(1): bs=int, default 4096) when not set."""
        return self.block_size or FIO_DEFAULT_BS

    @property
    def random_effective(self) -> bool:
        """True for random patterns, with fio's default ``rw=read`` (sequential) when not set."""
        return self.rw_effective.startswith("rand")

    @property
    def paths(self) -> list[str]:
        """Files and directories the job used (``filename``, ``directory``)."""
        return self.option_values("filename") + self.option_values("directory")


@dataclass
class VerifyFailure:
    """One fio data-verification failure (``sha256: verify failed at file F offset O, length L``)."""

    kind: str
    file: str | None
    offset: int | None
    length: int | None
    line: int
    text: str


@dataclass
class FioReport:
    """Everything one fio output says: jobs, verify failures, error lines, disk utilisation."""

    fmt: str = "json"
    version: str | None = None
    jobs: list[FioJob] = field(default_factory=list)
    verify_failures: list[VerifyFailure] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    disk_util: list[dict[str, Any]] = field(default_factory=list)
    group_reporting: bool = False

    @property
    def empty(self) -> bool:
        """True when the output held no job, no verify failure and no error."""
        return not (self.jobs or self.verify_failures or self.errors)


_VERIFY = re.compile(r"^\s*(\w+): verify failed at file (.+?) offset (\d+), length (\d+)")
_VERIFY_OTHER = re.compile(
    r"(verify: bad magic header|verify type mismatch|bad pattern block offset|bad header rand_seed|"
    r"bad header offset|bad header numberio|verify: bad header length|verify: (?:(?!verify: ).)*mismatch)",
    re.IGNORECASE,
)
_FIO_ERR = re.compile(r"fio: pid=(\d+), err=(\d+)/(?:file:([^,]+), )?func=([^,]+), error=(.*)$")
_FIO_OTHER_ERR = re.compile(r"^fio: (?!pid=)(.*(?:error|failed|No such file|Permission denied|No space).*)$", re.IGNORECASE)


_DOC_START = re.compile(r"(?m)^[^\S\n]*+\{")
"""A ``{`` that only whitespace precedes on its line (where a fio JSON document starts); linear: the
whitespace before it is scanned once per line, never across lines."""


def _scan_side_text(text: str, first_line: int, report: FioReport, long_lines: list[int]) -> None:
    """Verify failures and error lines in text outside the JSON (stderr merged into the file); lines over
    the length bound are skipped and their numbers added to ``long_lines``."""
    for i, line in enumerate(text.splitlines(), start=first_line):
        if too_long(line):
            long_lines.append(i)
            continue
        m = _VERIFY.match(line)
        if m:
            report.verify_failures.append(VerifyFailure(
                kind=m.group(1), file=m.group(2), offset=int(m.group(3)), length=int(m.group(4)), line=i,
                text=line.strip()))
            continue
        if _VERIFY_OTHER.search(line):
            report.verify_failures.append(VerifyFailure(kind="verify", file=None, offset=None, length=None,
                                                        line=i, text=line.strip()))
            continue
        em = _FIO_ERR.search(line)
        if em:
            msg = f"err={em.group(2)} in {em.group(4)}: {em.group(5).strip()}"
            if msg not in report.errors:
                report.errors.append(msg)
            continue
        om = _FIO_OTHER_ERR.match(line.strip())
        if om and om.group(1) not in report.errors:
            report.errors.append(om.group(1).strip())


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """object_pairs_hook: repeated keys become a list of every value (fio-02's two ``filename``)."""
    out: dict[str, Any] = {}
    dup: set[str] = set()
    for k, v in pairs:
        if k in out:
            if k not in dup:
                out[k] = [out[k]]
                dup.add(k)
            out[k].append(v)
        else:
            out[k] = v
    return out


def _io(d: Any) -> FioIo:
    if not isinstance(d, dict):
        return FioIo()
    pct_src = None
    pct = None
    for key in ("clat_ns", "lat_ns", "clat_us", "lat_us", "clat_ms", "lat_ms"):
        block = d.get(key)
        if isinstance(block, dict) and isinstance(block.get("percentile"), dict):
            scale = {"ns": 1, "us": 1e3, "ms": 1e6}[key[-2:]]
            p = block["percentile"]
            v = p.get("99.000000", p.get("99.00", p.get("99")))
            if v is not None:
                pct, pct_src = float(v) * scale, key
                break
    lat = d.get("lat_ns") if isinstance(d.get("lat_ns"), dict) else None
    return FioIo(
        io_bytes=int(d.get("io_bytes", 0) or 0),
        bw_bytes_per_s=float(d.get("bw_bytes", (d.get("bw", 0) or 0) * 1024) or 0),
        iops=float(d.get("iops", 0) or 0),
        runtime_ms=float(d.get("runtime", 0) or 0),
        total_ios=int(d.get("total_ios", 0) or 0),
        lat_mean_ns=float(lat["mean"]) if lat and lat.get("N", 1) and lat.get("mean") is not None else None,
        p99_ns=pct,
        p99_source=pct_src,
    )


def _merge_io(a: FioIo, b: FioIo) -> FioIo:
    """Two clones of one job: bandwidth and IOPS add, latency is the I/O-weighted mean, p99 the worst."""
    n = a.total_ios + b.total_ios
    lat = None
    if a.lat_mean_ns is not None and b.lat_mean_ns is not None and n:
        lat = (a.lat_mean_ns * a.total_ios + b.lat_mean_ns * b.total_ios) / n
    p99 = max([x for x in (a.p99_ns, b.p99_ns) if x is not None], default=None)
    return FioIo(a.io_bytes + b.io_bytes, a.bw_bytes_per_s + b.bw_bytes_per_s, a.iops + b.iops,
                 max(a.runtime_ms, b.runtime_ms), n, lat if lat is not None else (a.lat_mean_ns or b.lat_mean_ns),
                 p99, a.p99_source or b.p99_source)


def _jobs_from_doc(doc: dict[str, Any], report: FioReport) -> None:
    report.version = report.version or (str(doc.get("fio version")) if doc.get("fio version") else None)
    g = doc.get("global options")
    glob: dict[str, Any] = g if isinstance(g, dict) else {}
    gr = str(glob.get("group_reporting", "0")).strip() not in ("0", "", "false")
    merged: dict[tuple[int, str], FioJob] = {}
    order: list[tuple[int, str]] = []
    for j in doc.get("jobs") or []:
        if not isinstance(j, dict):
            continue
        opts = dict(glob)
        jo = j.get("job options")
        jopts: dict[str, Any] = jo if isinstance(jo, dict) else {}
        opts.update(jopts)
        if str(jopts.get("group_reporting", "")).strip() not in ("", "0", "false"):
            gr = True
        job = FioJob(
            name=str(j.get("jobname", "")), groupid=int(j.get("groupid", 0) or 0), error=int(j.get("error", 0) or 0),
            options=opts, read=_io(j.get("read")), write=_io(j.get("write")), trim=_io(j.get("trim")),
            elapsed_s=float(j["elapsed"]) if isinstance(j.get("elapsed"), (int, float)) else None,
        )
        key = (job.groupid, job.name)
        if key in merged:
            prev = merged[key]
            prev.read = _merge_io(prev.read, job.read)
            prev.write = _merge_io(prev.write, job.write)
            prev.trim = _merge_io(prev.trim, job.trim)
            prev.error = prev.error or job.error
            prev.clones += 1
        else:
            merged[key] = job
            order.append(key)
    report.jobs += [merged[k] for k in order]
    report.group_reporting = report.group_reporting or gr
    for du in doc.get("disk_util") or []:
        if isinstance(du, dict):
            report.disk_util.append(du)


def _long_lines(long_lines: list[int]) -> None:
    if long_lines:
        note_unread(long_lines_note(len(long_lines), min(long_lines)))


def parse_fio_json(text: str) -> FioReport:
    """Parse fio JSON output (with any text around it). Raises ``ValueError`` when there is no
    fio JSON document in ``text`` (a document nested deeper than
    :data:`~validate.parsers.bounds.MAX_JSON_DEPTH` counts as none), or a job with fields of the wrong type.

    Bounds: the first ``MAX_INPUT_CHARS`` characters are read; time is linear in the text's length
    (failed decode attempts share a :class:`~validate.parsers.bounds.ScanBudget`, lines outside the
    documents over ``MAX_LINE_CHARS`` are skipped).
    """
    text = clip_input(text)
    report = FioReport(fmt="json")
    dec = json.JSONDecoder(object_pairs_hook=_pairs)
    budget = ScanBudget(text)
    pos = 0
    side: list[tuple[int, str]] = []
    found = False
    counted, line = 0, 1

    def line_at(i: int) -> int:
        nonlocal counted, line
        line += text.count("\n", counted, i)
        counted = i
        return line

    for m in _DOC_START.finditer(text):
        brace = m.end() - 1
        if brace < pos:
            continue
        if budget.exhausted:
            break
        got = decode_at(dec, text, brace, budget, what="fio JSON")
        if got is None:
            continue
        doc, end = got
        if not isinstance(doc, dict) or not ("jobs" in doc or "fio version" in doc):
            continue
        side.append((line_at(pos), text[pos:brace]))
        try:
            _jobs_from_doc(doc, report)
        except (TypeError, ValueError, OverflowError, AttributeError, KeyError) as e:
            raise ValueError(f"fio JSON with a field of the wrong type ({e})") from None
        pos = end
        found = True
    if not found:
        raise ValueError("no fio JSON document found")
    side.append((line_at(pos), text[pos:]))
    long_lines: list[int] = []
    for first, chunk in side:
        _scan_side_text(chunk, first, report, long_lines)
    _long_lines(long_lines)
    return report


_JOB_HEAD = re.compile(r"^(\S.*?): \(groupid=(\d+), jobs=(\d+)\): err=\s*(\d+)")
_JOB_DEF = re.compile(r"^(\S.*?): \(g=(\d+)\): rw=(\w+), bs=(?:\(R\) )?([\d.]+[KMGTkmgt]?i?B?)")
_JOB_DEF_ENGINE = re.compile(r"ioengine=(\w+), iodepth=(\d+)")
_IO3 = re.compile(
    r"^\s*(read|write|trim)\s*:\s*IOPS=([\d.]+)([kKmM]?),\s*BW=([\d.]+)([KMGT]?i?B/s)(?:\s*\(([\d.]+)([kKMGT]?B/s)\))?"
)
_IO2 = re.compile(r"^\s*(read|write|trim)\s*:\s*io=[^,]+,\s*bw=([\d.]+)([KMGT]?B/s),\s*iops=([\d.]+)")
_LAT = re.compile(r"^\s*lat \((nsec|usec|msec)\):\s*min=[^,]+,\s*max=[^,]+,\s*avg=\s*([\d.]+)")
_GROUP = re.compile(r"^\s*(READ|WRITE|TRIM):\s*bw=([\d.]+)([KMGT]?i?B/s)(?:\s*\(([\d.]+)([kKMGT]?B/s)\))?")
_RUN_STATUS = re.compile(r"^Run status group (\d+)")
_VERSION = re.compile(r"^fio-(\d[\w.\-]*)$")


def _rate(value: str, unit: str) -> float:
    """``("2694", "MiB/s")`` -> bytes/s; ``kB/MB/GB`` decimal, ``KiB/MiB`` binary."""
    u = unit.replace("/s", "")
    binary = "i" in u
    letter = u[0].upper() if u[0].upper() in "KMGT" else ""
    base = 1024 if binary else 1000
    return float(value) * base ** ("KMGT".index(letter) + 1 if letter else 0)


_CMDLINE = re.compile(r"(?:^|[\s$#>])fio\s+(-.*)$")
_FLAG_ONLY = frozenset({"thread", "group_reporting", "time_based", "norandommap", "readonly", "minimal",
                        "eta-newline", "allow_mounted_write"})


def command_line_options(line: str) -> dict[str, str]:
    """The job options a fio command line in ``line`` gives (``fio --rw=read ...``), in every spelling fio accepts:
    ``--name=value``, ``-name=value`` (fio takes single-dash long options too, as in ``fio -filename=/dev/sdb
    -direct=1``) and ``-name value``; options without a value (``-thread``, ``--group_reporting``) are ``"1"``.
    ``{}`` when the line holds no fio command line. Output options (``--output``, ``--output-format``) are left out."""
    m = _CMDLINE.search(line)
    if not m:
        return {}
    toks = m.group(1).split()
    opts: dict[str, str] = {}
    i = 0
    while i < len(toks):
        tok = toks[i]
        i += 1
        if not tok.startswith("-") or tok in ("-", "--"):
            continue
        name, eq, value = tok.lstrip("-").partition("=")
        if not eq:
            nxt = toks[i] if i < len(toks) else None
            if name not in _FLAG_ONLY and nxt is not None and not nxt.startswith("-") and not nxt.endswith(".fio"):
                value, i = nxt, i + 1
            else:
                value = "1"
        if name and not name.startswith("output"):
            opts[name.replace("-", "_") if name not in ("eta-newline",) else name] = value.strip("'\"")
    return opts


def parse_fio_text(text: str) -> FioReport:
    """Parse fio's normal (``--output-format=normal``) text output and verify failures.

    Per-job ``read: IOPS=..., BW=...`` lines (fio 3) or ``read : io=..., bw=..., iops=...`` (fio 2);
    the ``Run status group`` lines when no per-job line was printed. Never raises. Reads the first
    ``MAX_INPUT_CHARS`` characters and skips lines over ``MAX_LINE_CHARS`` (:mod:`~validate.parsers.bounds`).
    """
    text = clip_input(text)
    report = FioReport(fmt="text")
    long_lines: list[int] = []
    defs: dict[str, tuple[str, str, str | None, str | None]] = {}
    cur: FioJob | None = None
    cur_dir: str | None = None
    groups: dict[int, FioJob] = {}
    group_id: int | None = None
    cmd: dict[str, str] = {}
    for i, line in enumerate(text.splitlines(), start=1):
        if too_long(line):
            continue  # counted by _scan_side_text below
        s = line.rstrip()
        if "fio " in s and " -" in s:
            cmd.update(command_line_options(s))
        vm = _VERSION.match(s.strip())
        if vm:
            report.version = "fio-" + vm.group(1)
            continue
        dm = _JOB_DEF.match(s)
        if dm:
            em = _JOB_DEF_ENGINE.search(s)
            defs[dm.group(1)] = (dm.group(3), dm.group(4), em.group(1) if em else None, em.group(2) if em else None)
            continue
        hm = _JOB_HEAD.match(s)
        if hm:
            name = hm.group(1)
            opts: dict[str, Any] = {}
            if name in defs:
                rw, bs, engine, depth = defs[name]
                opts.update({"rw": rw, "bs": bs})
                if engine:
                    opts["ioengine"] = engine
                if depth:
                    opts["iodepth"] = depth
            cur = FioJob(name=name, groupid=int(hm.group(2)), error=int(hm.group(4)), options=opts, options_complete=False)
            report.jobs.append(cur)
            cur_dir = None
            continue
        m3 = _IO3.match(s)
        if m3 and cur is not None:
            io = getattr(cur, m3.group(1))
            iops = float(m3.group(2)) * {"": 1, "k": 1e3, "m": 1e6}[m3.group(3).lower()]
            bw = _rate(m3.group(6), m3.group(7)) if m3.group(6) else _rate(m3.group(4), m3.group(5))
            io.iops, io.bw_bytes_per_s, io.io_bytes = iops, bw, max(io.io_bytes, 1)
            cur_dir = m3.group(1)
            continue
        m2 = _IO2.match(s)
        if m2 and cur is not None:
            io = getattr(cur, m2.group(1))
            unit = m2.group(3)
            io.bw_bytes_per_s = float(m2.group(2)) * 1024 ** ("KMGT".index(unit[0]) + 1 if unit[0] in "KMGT" else 0)
            io.iops, io.io_bytes = float(m2.group(4)), max(io.io_bytes, 1)
            cur_dir = m2.group(1)
            continue
        lm = _LAT.match(s)
        if lm and cur is not None and cur_dir:
            scale = {"nsec": 1, "usec": 1e3, "msec": 1e6}[lm.group(1)]
            getattr(cur, cur_dir).lat_mean_ns = float(lm.group(2)) * scale
            continue
        rm = _RUN_STATUS.match(s)
        if rm:
            group_id = int(rm.group(1))
            cur = None
            continue
        gm = _GROUP.match(s)
        if gm and group_id is not None:
            job = groups.setdefault(group_id, FioJob(name=f"group {group_id}", groupid=group_id, options_complete=False))
            bw = _rate(gm.group(4), gm.group(5)) if gm.group(4) else _rate(gm.group(2), gm.group(3))
            io = getattr(job, gm.group(1).lower())
            io.bw_bytes_per_s, io.io_bytes = bw, max(io.io_bytes, 1)
            continue
    if not report.jobs and groups:
        report.jobs = list(groups.values())
        report.group_reporting = True
    if cmd:  # the command line printed with the output: options the text does not show (direct, size ...)
        for job in report.jobs:
            job.options = {**cmd, **job.options}
            job.command_line = True
    _scan_side_text(text, 1, report, long_lines)
    _long_lines(long_lines)
    return report


def parse_fio(text: str) -> FioReport:
    """Parse fio output, JSON (with surrounding text) or normal text, whichever ``text`` holds.
    Raises nothing for odd text (within the bounds of :mod:`~validate.parsers.bounds`)."""
    text = clip_input(text)
    if _DOC_START.search(text) and ('"jobs"' in text or '"fio version"' in text):
        try:
            return parse_fio_json(text)
        except ValueError:
            pass
    return parse_fio_text(text)
