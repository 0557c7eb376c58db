"""nccl-tests and rccl-tests: the text table and the ``-J``/``--output_file x.json`` JSON as result rows.

Checked against NVIDIA/nccl-tests src/common.cu and src/util.cu (see docs/PLOTS.md for commits):

* ``size`` is ``max(sendBytes, expectedBytes)`` (all-gather output, reduce-scatter input, all-reduce
  buffer) and ``count`` is ``paramcount`` (per rank: all-gather send count, reduce-scatter receive
  count, all-reduce count): exactly pccl-bench's ``bytes_total`` and ``count_per_rank``.
* ``time`` is the host-timer mean over iterations (cross-rank reduction per ``-a``): it goes into
  ``time_us_mean`` and, unless a per-iteration median exists, ``time_us_p50``.
* ``-I 1`` (per_iter_timing) adds ``i_min i_max i_p99 i_cv%`` after each placement's ``#wrong``
  (CUDA-event times, per iteration the max over ranks): i_min/i_max go into time_us_min/max. The
  JSON adds ``<placement>_per_iter`` objects (util.cu ``writePerIterReport``): ``times_us`` holds one
  time per timed iteration (``config.iterations`` of them; common.cu ``BenchTime``: the CUDA-event
  time of iteration i divided by ``-m`` agg_iters, max over the GPUs of a process, then over
  processes), and min_us/max_us/p50_us/p95_us/p99_us summarise ``times_us[skipped_iterations:]``
  (``-K`` per_iter_skip, JSON version 3) with nearest-rank definitions (p50 = sorted[n/2],
  pXX = sorted[min(n-1, ceil(n*XX/100)-1)]). Those kept times become the cell's per-iteration
  samples, pccl-bench's own definition of a sample (time = max over ranks per iteration).
* The columns of a line are read from the ``#  size  count  type  redop  root  time ...`` header, so
  old layouts (no root, ``error``), ``-I``, the bitwise-check column and ``-S`` timestamps all parse.

rccl-tests prints the same table and writes the same ``-J`` JSON; its own ``-X file -Z json`` report
(a list of flat records with ``inPlace``) is read too.

A text log is read twice, line by line (200 MB in bounded memory): the first pass reads the
header facts (collective, ``#  Rank`` lines of every run, versions), the second the result lines.
Every number used is checked where it is read, and a bad one is a BadInput naming ``file:line``.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.errors import BadInput
from bench.importers import importer
from bench.importers.inputs import (
    INT64_MAX,
    NCCL_JSON,
    NCCL_TESTS,
    RCCL_REPORT,
    head,
    hint_of,
    lines,
    not_this_format,
    read_limited,
    time_us,
)
from bench.importers.inputs import count as whole
from bench.importers.rows import ITEMSIZE, ImportOptions, Measurement

COLLECTIVES = {"all_gather": "allgather", "allgather": "allgather", "reduce_scatter": "reduce_scatter",
               "reducescatter": "reduce_scatter", "all_reduce": "allreduce", "allreduce": "allreduce"}
DTYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16", "int8": "int8",
          "uint8": "uint8", "int32": "int32", "int": "int32", "uint32": "uint32", "int64": "int64",
          "uint64": "uint64", "float32": "float32", "float64": "float64", "float16": "float16",
          "f8e4m3": "fp8_e4m3", "f8e5m2": "fp8_e5m2", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2",
          "char": "int8"}
#: "#  Rank  0 Group  0 Pid  41721 on     nid001 device  0 [0x07] ..." (bounded: a number of 5000 digits
#: is no rank, and int() refuses it)
RANK_LINE = re.compile(r"#\s*Rank\s+(\d{1,9})\s+Group\s+\d+\s+Pid\s+(\d{1,12})\s+on\s+(\S{1,255})\s+device\s+\d+")
ITERS = re.compile(r"warmup iters:\s*(\d+)\s+iters:\s*(\d+)")
VERSION = re.compile(r"\b([NR]CCL) version (\d{1,4}\.\d{1,4}\.\d{1,4})")
LIBRARY_CODE = re.compile(r"nccl-library=(\d{1,9})")
TOOL_VERSION = re.compile(r"#\s*([nr]ccl-tests) version (\S{1,80})")
TEST_NAME = re.compile(r"(?<![a-z])(all_gather|reduce_scatter|all_reduce|alltoall|broadcast|reduce|sendrecv|gather|"
                       r"scatter|hypercube)_perf")
#: the column header line: "#  size  count  type  redop  root  time  algbw  busbw  #wrong ..."
HEADER = re.compile(r"^#\s+size\s+count\s+type\b")
TIME_LABELS = ("time", "cputime")
WRONG_LABELS = ("#wrong", "error", "wrong")
#: used when a file has no column header (a pasted excerpt): the layout of nccl-tests >= 2.13
DEFAULT_COLUMNS = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                   "time", "algbw", "busbw", "#wrong"]
#: "-S 1" appends "%Y-%m-%d %H:%M:%S" (two tokens) after the in-place block
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s*$")
TIMESTAMP_DATE, TIMESTAMP_TIME = re.compile(r"\d{4}-\d\d-\d\d"), re.compile(r"\d\d:\d\d:\d\d")
#: writeBenchMarkLineNullBody prints 32 blanks where the out-of-place block would be
NULL_BODY = 32
#: <placement>_per_iter summaries checked against times_us (the writer prints both with %lf)
PER_ITER_STATS = ("min_us", "max_us", "p50_us", "p95_us", "p99_us")
#: a reduction op as nccl-tests prints it (sum, prod, max, min, avg, mulsum, none)
REDOP = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
#: what nccl-tests prints for a value it did not measure (-c 0: #wrong; a placement not run); a time
#: of nan is a broken measurement, not a missing one
TEXT_NOT_MEASURED = ("N/A",)
#: JSON fields that mean the same (the writer's strings)
NOT_MEASURED = ("N/A", "n/a")
#: nccl-tests JSON is read whole (~14 bytes of memory per byte): a real one is KiBs, -I 1 with 1000
#: iterations of 30 sizes ~1 MiB
MAX_JSON_BYTES = 32 * 2**20
#: nccl-tests JSON nests 5 deep (results[i].<placement>_per_iter.times_us)
MAX_JSON_DEPTH = 32
#: more ranks than any machine has: a rank count beyond it is a corrupt number
MAX_RANKS = 1 << 24


#: "# Collective test starting: all_gather_perf" (common.cu writeDeviceReport)
STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S{1,200})")
#: "# nThread 1 nGpus 4 ...": every process drives nThread * nGpus ranks
THREADS_GPUS = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")


def infer_collective(text: str, source: str, options: ImportOptions,
                     text_is: str = "the output") -> tuple[str, str | None]:
    """(collective, what it was read from; None when --collective gave it). ``text_is`` names
    ``text`` in that note (the output, or the JSON's args[0])."""
    if options.collective:
        return options.collective, None
    candidates = []
    if starting := re.search(STARTING.pattern, text, re.MULTILINE):
        candidates.append((starting.group(1), repr(starting.group(0).strip())))
    if found := TEST_NAME.search(text):
        candidates.append((found.group(0), f"{found.group(0)!r} in {text_is}"))
    return _choose_collective(candidates, source)


def _choose_collective(candidates: list[tuple[str, str]], source: str) -> tuple[str, str]:
    """The first candidate (program, evidence) that names a test, else the file name's test."""
    if found := TEST_NAME.search(source):
        candidates = [*candidates, (found.group(0), f"the file name {os.path.basename(source)!r}")]
    for program, evidence in candidates:
        if not (found := TEST_NAME.search(program)):
            continue
        name = found.group(1)
        if name not in COLLECTIVES:
            raise BadInput(source, f"{name}_perf is not a collective pccl-bench compares "
                                   "(all_gather, reduce_scatter, all_reduce); pass --collective to override")
        return COLLECTIVES[name], evidence
    raise BadInput(source, "cannot tell which collective this is (no '# Collective test starting: <test>_perf' "
                           "line, no test name in the file name): pass --collective")


def _number(token: object) -> float | None:
    """A float from a token or JSON value; None for N/A, "nan" (the JSON writer's NaN) and the like."""
    if isinstance(token, bool):
        return None
    try:
        value = float(token)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return value if value == value else None


def columns_of(line: str) -> list[str]:
    """The column labels of a ``#  size  count  type ...`` header (without the timestamp label)."""
    return [label for label in line.lstrip("#").split() if label != "timestamp"]


@dataclass(frozen=True)
class Layout:
    """Where the values of a result line are, from the header: the preamble (size count type redop
    root) and one placement block (time algbw busbw #wrong [i_min i_max i_p99 i_cv%] ...)."""

    preamble: int
    block: int
    redop: int | None  # index in the line
    time: int  # indices in a block
    wrong: int | None
    wrong_label: str
    low: int | None
    high: int | None


def layout_of(columns: list[str], where: str) -> Layout:
    starts = [i for i, label in enumerate(columns) if label in TIME_LABELS]
    if not starts:
        raise BadInput(where, f"result header without a time column: {' '.join(columns)[:200]}")
    end = starts[1] if len(starts) > 1 else len(columns)
    preamble, block = columns[:starts[0]], columns[starts[0]:end]
    wrong = next((label for label in WRONG_LABELS if label in block), None)
    def at(label: str) -> int | None:
        return block.index(label) if label in block else None

    return Layout(len(preamble), len(block), preamble.index("redop") if "redop" in preamble else None,
                  next(i for i, label in enumerate(block) if label in TIME_LABELS), at(wrong) if wrong else None,
                  wrong or "", at("i_min"), at("i_max"))


def _optional_time(token: str, where: str, name: str) -> float | None:
    return None if token in TEXT_NOT_MEASURED else time_us(token, where, name)


def _wrong_count(token: str, where: str, name: str) -> int:
    """#wrong (a count), or the old layouts' ``error`` (a magnitude; as before, its integer part)."""
    if token in TEXT_NOT_MEASURED:  # -c 0: not checked
        return 0
    try:
        value = float(token)
    except ValueError:
        raise BadInput(where, f"{name}: not a number: {token[:40]!r}") from None
    if not math.isfinite(value) or value < 0 or value > INT64_MAX:
        raise BadInput(where, f"{name}: {token[:40]!r} is not a count of wrong elements")
    return int(value)


def _redop(token: str, collective: str, where: str) -> str:
    if not REDOP.fullmatch(token):
        raise BadInput(where, f"redop: {token[:40]!r} is not a reduction op")
    # pccl-bench records all-gathers with the suite's op; nccl-tests says "none"
    return "sum" if token == "none" or collective == "allgather" else token


def parse_data_line(line: str, layout: Layout, collective: str, nranks: int | None, where: str,
                    iters: int = 0) -> list[Measurement]:
    """One result line, its columns named by the header; [] for a line that is not a result.

    A result line is one whose size and count are whole numbers and whose type is an nccl-tests
    type; its times must then be times, its size count x type size (x ranks, but for all-reduce)."""
    tokens = line.split()
    if len(tokens) < 3 or tokens[2] not in DTYPES or not tokens[0].isdigit() or not tokens[1].isdigit():
        return []
    body = line
    if ":" in tokens[-1] and len(tokens) > 2 and TIMESTAMP_TIME.fullmatch(tokens[-1]) \
            and TIMESTAMP_DATE.fullmatch(tokens[-2]):
        tokens = tokens[:-2]
        body = TIMESTAMP.sub("", line)
    if len(tokens) < layout.preamble + layout.block:
        return []
    size, count = whole(tokens[0], where, "size"), whole(tokens[1], where, "count")
    dtype = DTYPES[tokens[2]]
    itemsize = ITEMSIZE[dtype]
    if nranks is not None:
        ranks = 1 if collective == "allreduce" else nranks
        if size != count * itemsize * ranks:
            raise BadInput(where, f"size {size} is not count {count} x {itemsize} B ({tokens[2]})"
                                  + (f" x {ranks} ranks" if ranks > 1 else "") + f" = {count * itemsize * ranks}: "
                                  "a corrupt line, or a wrong --nranks/--collective")
    op = _redop(tokens[layout.redop], collective, where) if layout.redop is not None else "sum"
    start, width = layout.preamble, layout.block
    if len(tokens) - start >= 2 * width:
        blocks = (("out_of_place", start), ("in_place", start + width))
    else:
        # one block: nccl-tests' null out-of-place body leaves 32 blanks before the in-place one;
        # rccl-tests -O prints either placement alone, with nothing to tell which
        spans = [token.span() for token in re.finditer(r"\S+", body)]
        if spans[start][0] - spans[start - 1][1] < NULL_BODY:
            raise BadInput(where, "only one of out-of-place/in-place on this line (rccl-tests -O?) and the "
                                  "layout does not say which; rerun without -O")
        blocks = (("in_place", start),)
    found = []
    for placement, offset in blocks:
        token = tokens[offset + layout.time]
        if token in TEXT_NOT_MEASURED:
            continue  # a placement the test does not run
        # a zero-byte call may take no measurable time (nccl-tests prints 0.00)
        mean = time_us(token, where, f"{placement} time", allow_zero=count == 0)
        low = _optional_time(tokens[offset + layout.low], where, f"{placement} i_min") if layout.low is not None \
            else None
        high = _optional_time(tokens[offset + layout.high], where, f"{placement} i_max") \
            if layout.high is not None else None
        wrong = _wrong_count(tokens[offset + layout.wrong], where, f"{placement} {layout.wrong_label}") \
            if layout.wrong is not None else 0
        found.append(Measurement(collective, dtype, op, count, placement, mean, time_us_min=low, time_us_max=high,
                                 n_wrong=wrong, iters=iters))
    return found


@dataclass
class _Run:
    """The '#  Rank' lines of the run being read (from a '# nThread' line to the next)."""

    line: int
    pids: dict[int, set[str]] = field(default_factory=dict)
    hosts: set[str] = field(default_factory=set)


#: distinct host names a log may name (a union over its runs; each a rank's host)
MAX_HOSTS = 1 << 16


@dataclass
class TextHeader:
    """What the first pass over a text log found (each the first occurrence in the file). Runs are
    summarised as they end, so a log of 30,000 runs costs no more memory than one."""

    starting: tuple[str, str] | None = None  # (program, evidence) of '# Collective test starting'
    programs: dict[str, tuple[str, int]] = field(default_factory=dict)  # test -> (program, its first line)
    test_name: tuple[str, str] | None = None  # the first '<test>_perf' anywhere
    threads_gpus: tuple[str, int] | None = None  # ('nThread 1 nGpus 4', ranks per process)
    run: _Run = field(default_factory=lambda: _Run(0))
    runs: int = 0  # runs with '#  Rank' lines
    rank_counts: dict[int, int] = field(default_factory=dict)  # '#  Rank' lines of a run -> its first run's line
    repeated: tuple[int, int, int] | None = None  # (rank, processes printing it, the run's line)
    hosts: set[str] = field(default_factory=set)
    max_hosts: int = 0  # the most hosts of one run
    rank_lines: int = 0
    iters: tuple[int, int] = (0, 0)  # warmup, iters
    version: tuple[str, str, str] | None = None  # (NCCL|RCCL, version, its line)
    code: tuple[str, str] | None = None  # (nccl-library=N, its line)
    tool: str | None = None
    columns: list[str] | None = None
    header_line: int = 0
    data_lines: int = 0  # lines that look like results (size count type)
    implied: set[int] = field(default_factory=set)  # size // (count * type size) of those lines

    def end_run(self, source: str) -> None:
        """Fold the run just read into the summary."""
        run = self.run
        if not run.pids:
            return
        self.runs += 1
        if self.repeated is None:
            repeated = next((rank for rank, seen in sorted(run.pids.items()) if len(seen) > 1), None)
            if repeated is not None:
                self.repeated = (repeated, len(run.pids[repeated]), run.line)
        if len(self.rank_counts) < 2:
            self.rank_counts.setdefault(len(run.pids), run.line)
        self.hosts |= run.hosts
        if len(self.hosts) > MAX_HOSTS:
            raise BadInput(source, f"more than {MAX_HOSTS} distinct hosts in '#  Rank' lines")
        self.max_hosts = max(self.max_hosts, len(run.hosts))


def scan_text(numbered: Iterable[tuple[int, str]], source: str) -> TextHeader:
    """The first pass: header facts of every run, and whether result lines are there at all."""
    h = TextHeader()
    iters_seen = False
    for number, line in numbered:
        stripped = line.lstrip()
        if not stripped:
            continue
        if stripped[0] == "#":
            if "Rank" in stripped and (found := RANK_LINE.match(stripped)):
                pids = h.run.pids.setdefault(int(found.group(1)), set())
                if len(pids) < 64:  # enough to say how many processes printed it
                    pids.add(found.group(2))
                h.run.hosts.add(found.group(3))
                h.rank_lines += 1
                continue
            if "nThread" in stripped and (found := THREADS_GPUS.match(stripped)):
                where = f"{source}:{number}"
                per_process = whole(found.group(1), where, "nThread", 1) * whole(found.group(2), where, "nGpus", 1)
                if h.run.pids:
                    h.end_run(source)
                    h.run = _Run(number)
                else:
                    h.run.line = number
                if h.threads_gpus is None:
                    h.threads_gpus = (found.group(0).lstrip("# "), per_process)
            if not iters_seen and "iters:" in stripped and (found := ITERS.search(stripped)):
                where = f"{source}:{number}"
                h.iters = (whole(found.group(1), where, "warmup iters"), whole(found.group(2), where, "iters"))
                iters_seen = True
            if stripped.startswith("# Coll") or "test starting" in stripped:
                if found := STARTING.match(stripped):
                    if len(h.programs) < 3:  # two tell that the log mixes tests
                        test = TEST_NAME.search(found.group(1))
                        h.programs.setdefault(test.group(1) if test else found.group(1), (found.group(1), number))
                    if h.starting is None:
                        h.starting = (found.group(1), repr(found.group(0).strip()))
            elif h.columns is None and HEADER.match(stripped):
                h.columns, h.header_line = columns_of(stripped), number
            if h.tool is None and "-tests version" in stripped and (found := TOOL_VERSION.search(stripped)):
                h.tool = f"{found.group(1)} {found.group(2)}"
        elif h.data_lines < 2 or (not h.rank_lines and len(h.implied) < 2):
            # the first result-looking lines, and the rank count their sizes imply (rank lines lacking)
            tokens = stripped.split(None, 3)
            if len(tokens) >= 3 and tokens[2] in DTYPES and tokens[0].isascii() and tokens[0].isdigit() \
                    and tokens[1].isascii() and tokens[1].isdigit() and len(tokens[0]) < 20 and len(tokens[1]) < 20:
                h.data_lines += 1
                size, count = int(tokens[0]), int(tokens[1])
                if count:  # size = count * itemsize * nranks
                    h.implied.add(size // (count * ITEMSIZE[DTYPES[tokens[2]]]))
        if h.test_name is None and "_perf" in line and (found := TEST_NAME.search(line)):
            h.test_name = (found.group(0), f"{found.group(0)!r} in the output")
        if h.version is None and "CCL version" in line and (found := VERSION.search(line)):
            h.version = (found.group(1), found.group(2), line.strip()[:200])
        if h.code is None and "nccl-library=" in line and (found := LIBRARY_CODE.search(line)):
            h.code = (found.group(1), line.strip()[:200])
    h.end_run(source)
    return h


def _text_collective(h: TextHeader, source: str, options: ImportOptions) -> tuple[str, str | None]:
    if len(h.programs) > 1:
        shown = ", ".join(f"{program} (line {number})" for program, number in h.programs.values())
        raise BadInput(source, f"holds runs of several tests ({shown}): import each test's part of the log "
                               "on its own")
    if options.collective:
        return options.collective, None
    candidates = [c for c in (h.starting, h.test_name) if c is not None]
    return _choose_collective(candidates, source)


def _text_ranks(h: TextHeader, source: str, collective: str, options: ImportOptions) -> tuple[int, str | None]:
    """(nranks, what it was read from; None when --nranks gave it)."""
    if options.nranks:
        return options.nranks, None
    if h.repeated is not None:
        rank, processes, line = h.repeated
        raise BadInput(source, f"'# Rank {rank:2d}' is printed by {processes} processes"
                               + (f" in the run from line {line}" if h.runs > 1 else "")
                               + ": nccl-tests was built without MPI, so each process ran alone; rebuild with "
                                 "MPI=1 (or pass --nranks for what was meant)")
    if len(h.rank_counts) > 1:
        shown = " and ".join(f"{n} (the run from line {line})" for n, line in h.rank_counts.items())
        raise BadInput(source, f"runs of different rank counts in one file: {shown} '#  Rank' lines; import each "
                               "run on its own (or pass --nranks)")
    if h.rank_counts:
        nranks = next(iter(h.rank_counts))
        evidence = f"{nranks} '#  Rank N ... device' lines" + (f" in each of {h.runs} runs" if h.runs > 1 else "")
        if h.threads_gpus:
            text, per_process = h.threads_gpus
            evidence += f" ({text}: {nranks // per_process or 1} processes)"
        return nranks, evidence
    if collective != "allreduce" and len(h.implied) == 1 and next(iter(h.implied)) >= 1:
        return next(iter(h.implied)), "size / (count * type size) of the result lines"
    raise BadInput(source, "cannot tell how many ranks ran (no '#  Rank N ... device' lines"
                           + (", and all-reduce sizes do not tell" if collective == "allreduce" else "")
                           + "): pass --nranks")


def parse_text_file(path: Path, options: ImportOptions, kind: str,
                    first_bytes: bytes = b"") -> tuple[dict, Iterator[Measurement]]:
    """(context, the result lines' measurements as they are read) of a text log, in two passes."""
    source = str(path)
    h = scan_text(lines(path), source)
    if not h.data_lines:
        raise BadInput(source, f"no {kind} result lines (size count type redop ... time algbw busbw #wrong)"
                               + hint_of(first_bytes, (NCCL_TESTS,)))
    collective, collective_from = _text_collective(h, source, options)
    nranks, ranks_from = _text_ranks(h, source, collective, options)
    if nranks > MAX_RANKS:
        raise BadInput(source, f"{nranks} ranks: more than any machine runs ({MAX_RANKS})")
    library, version = _library_of(h, kind)
    inferred = [f"collective={collective} from {collective_from}"] if collective_from else []
    if ranks_from:
        inferred.append(f"nranks={nranks} from {ranks_from}")
    if not options.library:
        evidence = repr(h.version[2]) if h.version else repr(h.code[1]) if h.code else f"the tool ({kind})"
        inferred.append(f"library={f'{library} {version}'.strip()} from {evidence}")
    context = {"nranks": nranks, "hosts": sorted(h.hosts), "nnodes": h.max_hosts or None,
               "warmup": h.iters[0], "iters": h.iters[1], "library": library, "library_version": version,
               "tool_version": h.tool or kind, "inferred": inferred}
    return context, text_rows(path, h, collective, nranks, kind, first_bytes)


def _library_of(h: TextHeader, kind: str) -> tuple[str, str]:
    library = h.version[0] if h.version else ("RCCL" if kind == "rccl-tests" else "NCCL")
    version = h.version[1] if h.version else (_decode_version(h.code[0]) if h.code else "")
    return library, version


def text_rows(path: Path, h: TextHeader, collective: str, nranks: int, kind: str,
              first_bytes: bytes = b"") -> Iterator[Measurement]:
    """The second pass: every result line's measurements, each checked (BadInput at file:line)."""
    source = str(path)
    layout = layout_of(h.columns or DEFAULT_COLUMNS, f"{source}:{h.header_line}" if h.columns else source)
    iters = h.iters[1]
    produced = 0
    for number, line in lines(path):
        stripped = line.lstrip()
        if not stripped:
            continue
        if stripped[0] == "#":
            if HEADER.match(stripped):  # a later run may print another layout (-I, -S)
                layout = layout_of(columns_of(stripped), f"{source}:{number}")
            continue
        found = parse_data_line(line, layout, collective, nranks, f"{source}:{number}", iters)
        produced += len(found)
        yield from found
    if not produced:
        raise BadInput(source, f"no {kind} result lines (size count type redop ... time algbw busbw #wrong)"
                               + hint_of(first_bytes, (NCCL_TESTS,)))


def _decode_version(code: object) -> str:
    """NCCL_VERSION_CODE 22105 -> 2.21.5 (major*10000 + minor*100 + patch; 1000s before 2.9)."""
    try:
        value = int(str(code))
    except ValueError:
        return str(code)[:40]
    if value >= 10000:
        return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
    return f"{value // 1000}.{value // 100 % 10}.{value % 100}" if value >= 1000 else str(value)


# ---------------------------------------------------------------------------------------------
# JSON: nccl-tests -J, rccl-tests -X -Z json

JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth(text: str) -> int:
    """How deep ``text``'s arrays and objects nest (brackets inside strings do not count), without
    parsing it: json.loads recurses, and a deep document would end in RecursionError."""
    brackets = NOT_BRACKET.sub("", JSON_STRING.sub("", text)).encode("ascii")
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    depth = peak = 0
    for start in range(0, len(codes), 1 << 20):  # int64 steps, 1 Mi brackets at a time: 8 MiB
        chunk = codes[start:start + (1 << 20)]
        levels = np.cumsum(np.where((chunk == ord("[")) | (chunk == ord("{")), 1, -1), dtype=np.int64) + depth
        peak, depth = max(peak, int(levels.max())), int(levels[-1])
    return peak


def load_json(text: str, source: str) -> object:
    if (depth := json_depth(text)) > MAX_JSON_DEPTH:
        raise BadInput(source, f"JSON nested {depth} deep: not nccl-tests output (it nests 5 deep; at most "
                               f"{MAX_JSON_DEPTH} is read)")
    try:
        return json.loads(text)
    except RecursionError:  # the depth check above should have caught it
        raise BadInput(source, "JSON nested too deep") from None
    except ValueError as error:
        raise BadInput(source, f"not JSON (a run killed before the file was closed?): {error}") from None


def _json_int(value: object, where: str, name: str, default: int, minimum: int = 0) -> int:
    """An integer config field (absent or null: ``default``); anything else that is not a whole number
    from ``minimum`` to int64 is a BadInput."""
    if value is None:
        return default
    number = _number(value)
    if number is None or not math.isfinite(number) or number != int(number) or not minimum <= number <= INT64_MAX:
        raise BadInput(where, f"{name}: {str(value)[:40]!r} is not a whole number >= {minimum}")
    return int(number)


def _json_time(value: object, where: str, name: str, allow_zero: bool = False) -> float | None:
    """A time field: None where not measured (null, "N/A"), else a finite time above 0 (NaN, the
    writer's "nan", is a broken measurement: BadInput, as in the text table)."""
    if value is None or (isinstance(value, str) and value.strip() in NOT_MEASURED):
        return None
    number = _number(value)
    if number is None or not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        raise BadInput(where, f"{name}: {str(value)[:40]!r} is not a time (a finite number above 0)")
    return number


def parse_json(text: str, source: str, options: ImportOptions, kind: str) -> tuple[list[Measurement], dict]:
    """nccl-tests -J (util.cu: {"version", "args", "nccl_version", "config": {..., "devices"},
    "results": [...]}), or rccl-tests' -X/-Z json report (a list of flat records)."""
    data = load_json(text, source)
    if isinstance(data, list):
        return _rccl_report(data, source, options, kind)
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise BadInput(source, "not nccl-tests -J JSON: no top-level 'results' list")
    args = data.get("args") if isinstance(data.get("args"), list) else []
    program = os.path.basename(str(args[0]))[:200] if args else ""
    collective, collective_from = infer_collective(program, source, options, "args[0]")
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    devices = [d for d in config.get("devices") or [] if isinstance(d, dict)]
    # one "devices" entry per process (its first rank's line); each process drives nthreads*ngpus ranks
    per_process = (_json_int(config.get("nthreads"), f"{source}: config", "nthreads", 1, minimum=1)
                   * _json_int(config.get("ngpus"), f"{source}: config", "ngpus", 1, minimum=1))
    iterations = config.get("iterations")
    iterations = None if iterations is None else _json_int(iterations, f"{source}: config", "iterations", 0)
    skip = _json_int(config.get("per_iter_skip"), f"{source}: config", "per_iter_skip", 0)
    warmup = _json_int(config.get("warmup_iters"), f"{source}: config", "warmup_iters", 0)
    measurements, sizes = [], []
    for index, record in enumerate(data["results"]):
        where = f"{source}: results[{index}]"
        found, size = _json_record(record, collective, where, iterations, skip)
        measurements += found
        if found:
            sizes.append((where, size, found[0]))
    if not measurements:
        raise BadInput(source, "no results in this nccl-tests JSON")
    code = data.get("nccl_version")
    code = code if isinstance(code, int | str) and not isinstance(code, bool) else None
    inferred = [f"collective={collective} from {collective_from}"] if collective_from else []
    counted = len(devices) * per_process
    if counted > MAX_RANKS:
        raise BadInput(f"{source}: config", f"{len(devices)} devices x {per_process} ranks each: more ranks than "
                                            f"any machine runs ({MAX_RANKS})")
    if devices and not options.nranks:
        inferred.append(f"nranks={counted} from {len(devices)} config.devices entries "
                        f"x nthreads*ngpus {per_process}")
    nranks = options.nranks or counted or None
    if nranks:
        for where, size, m in sizes:
            _check_size(size, m, nranks, where)
    if not options.library:
        inferred.append(f"library={'RCCL' if kind == 'rccl-tests' else 'NCCL'}"
                        + (f" {_decode_version(code)} from nccl_version {code}" if code is not None else
                           f" from the tool ({kind})"))
    context = {"inferred": inferred, "nranks": counted or None,
               "hosts": sorted({str(d["hostname"])[:255] for d in devices if d.get("hostname")}),
               "warmup": warmup, "iters": iterations or 0,
               "library": "RCCL" if kind == "rccl-tests" else "NCCL",
               "library_version": _decode_version(code) if code is not None else "",
               "tool_version": f"{kind} (JSON v{str(data.get('version', '?'))[:20]})"}
    return measurements, context


def _check_size(size: int, m: Measurement, nranks: int, where: str) -> None:
    ranks = 1 if m.collective == "allreduce" else nranks
    expected = m.count_per_rank * ITEMSIZE[m.dtype] * ranks
    if size != expected:
        raise BadInput(where, f"size {size} is not count {m.count_per_rank} x {ITEMSIZE[m.dtype]} B"
                              + (f" x {ranks} ranks" if ranks > 1 else "") + f" = {expected}: a corrupt record, "
                              "or a wrong --nranks/--collective")


def _json_record(record: object, collective: str, where: str, iterations: int | None = None,
                 per_iter_skip: int = 0) -> tuple[list[Measurement], int]:
    if not isinstance(record, dict):
        raise BadInput(where, f"not an object: {str(record)[:80]}")
    for key in ("size", "count", "type"):
        if key not in record:
            raise BadInput(where, f"no '{key}' field")
    if str(record["type"]) not in DTYPES:
        raise BadInput(where, f"type: unknown nccl-tests type {str(record['type'])[:40]!r}")
    count = _number(record["count"])
    if count is None or not math.isfinite(count) or count < 0 or count != int(count) or count > INT64_MAX:
        raise BadInput(where, f"count: not an element count: {str(record['count'])[:40]!r}")
    count = int(count)
    size = _json_int(record["size"], where, "size", 0)
    dtype = DTYPES[str(record["type"])]
    op = _redop(str(record.get("redop") or "sum"), collective, f"{where}: redop")
    actual = record.get("actual_iterations")
    found = []
    for placement in ("out_of_place", "in_place"):
        block = record.get(placement)  # null where a placement was not run
        if not isinstance(block, dict):
            continue
        name = "time" if "time" in block else "cpu_time"  # "cpu_time" with -C 1
        time_value = _json_time(block.get(name), f"{where}: {placement}", name, allow_zero=count == 0)
        if time_value is None:
            continue
        stats = record.get(f"{placement}_per_iter")
        stats = stats if isinstance(stats, dict) else {}
        expected, field_name = iterations, "config.iterations"
        if expected is None and actual is not None:
            expected, field_name = _json_int(actual, where, "actual_iterations", 0), "actual_iterations"
        per_iter = f"{where}: {placement}_per_iter"
        samples = per_iter_samples(stats, per_iter, expected, per_iter_skip, field_name)
        summary = {name: _json_time(stats.get(name), per_iter, name) for name in PER_ITER_STATS}
        wrong = block.get("nwrong")
        wrong = 0 if wrong is None or (isinstance(wrong, str) and wrong.strip() in NOT_MEASURED) else \
            _json_int(wrong, f"{where}: {placement}", "nwrong", 0)
        found.append(Measurement(collective, dtype, op, count, placement, time_value,
                                 time_us_min=summary["min_us"], time_us_max=summary["max_us"],
                                 time_us_p50=summary["p50_us"], time_us_p95=summary["p95_us"],
                                 time_us_p99=summary["p99_us"], n_wrong=wrong, samples_us=samples))
    return found, size


def _nearest_rank(ordered: list[float], percentile: int) -> float:
    """util.cu ``percentileIndex``: sorted[min(n - 1, ceil(n * p / 100) - 1)]."""
    n = len(ordered)
    return ordered[min(n - 1, (n * percentile + 99) // 100 - 1)]


def per_iter_samples(stats: dict, where: str, iterations: int | None, per_iter_skip: int,
                     iterations_field: str = "config.iterations") -> list[float] | None:
    """The per-iteration times of one ``<placement>_per_iter`` object (None without ``times_us``).

    ``times_us`` has one entry per timed iteration (``config.iterations``); the first
    ``skipped_iterations`` (``-K``) are left out of the tool's summary and of the samples. A list of
    another length, a value that is not a time, or a summary that does not describe the kept times
    is a corrupt or foreign file: BadInput naming the field and the value.
    """
    if "times_us" not in stats:
        return None
    times = stats["times_us"]
    if not isinstance(times, list):
        raise BadInput(where, f"times_us: not a list of times: {str(times)[:80]!r}")
    values = []
    for position, value in enumerate(times):
        number = None if isinstance(value, bool) or not isinstance(value, int | float) else float(value)
        if number is None or not math.isfinite(number) or number < 0:
            shown = repr(value[:40] if isinstance(value, str) else value) \
                if isinstance(value, str | int | float | bool | None) else f"a {type(value).__name__}"
            raise BadInput(where, f"times_us[{position}]: not a time in microseconds: {shown}")
        values.append(number)
    skip = stats.get("skipped_iterations")
    skip = per_iter_skip if skip is None else _json_int(skip, where, "skipped_iterations", 0)
    if iterations is None or len(values) == iterations:
        kept = values[skip:]
    elif skip and len(values) == iterations - skip:
        kept = values  # the skipped iterations already left out
    else:
        raise BadInput(where, f"times_us: {len(values)} values, but {iterations_field} is {iterations}"
                              + (f" (skipped_iterations {skip})" if skip else ""))
    if not kept:
        return None
    ordered = sorted(kept)
    ours = {"min_us": ordered[0], "max_us": ordered[-1], "p50_us": ordered[len(ordered) // 2],
            "p95_us": _nearest_rank(ordered, 95), "p99_us": _nearest_rank(ordered, 99)}
    for name in PER_ITER_STATS:
        told = _number(stats.get(name))
        if told is not None and abs(told - ours[name]) > 1e-3 + 1e-6 * abs(told):
            raise BadInput(where, f"{name}: {str(stats[name])[:40]} does not summarise times_us"
                                  + (f"[{skip}:]" if skip and len(values) == iterations else "")
                                  + f" (nearest-rank value {ours[name]:g}); a corrupt or edited file?")
    return kept


def _rccl_report(records: list, source: str, options: ImportOptions, kind: str) -> tuple[list[Measurement], dict]:
    """rccl-tests Reporter (-X file -Z json): {"numCycle", "name": "AllReduce", MPI: "nodes", "ranks"
    (processes), "ranksPerNode", "gpusPerRank" / else "gpus", "size" (bytes, as the table's size),
    "type", "redop", "inPlace", "time", "algBw", "busBw", "wrong"}: no count, so it is derived."""
    measurements, nranks_seen = [], set()
    for index, record in enumerate(records):
        where = f"{source}: [{index}]"
        if not isinstance(record, dict) or "inPlace" not in record or "size" not in record:
            raise BadInput(where, "not an rccl-tests report record (name, size, type, inPlace, time, ...)")
        if record.get("gpusPerRank") is not None:
            nranks = (_json_int(record.get("ranks"), where, "ranks", 1, minimum=1)
                      * _json_int(record.get("gpusPerRank"), where, "gpusPerRank", 1, minimum=1))
        else:
            nranks = _json_int(record.get("gpus"), where, "gpus", 0, minimum=1) if "gpus" in record else 0
        if not 1 <= nranks <= MAX_RANKS:
            raise BadInput(where, "ranks x gpusPerRank (or gpus) must give a rank count")
        collective = options.collective or COLLECTIVES.get(str(record.get("name", "")).lower())
        if not collective:
            raise BadInput(where, f"name: {str(record.get('name'))[:40]!r} is not all_gather, reduce_scatter or "
                                  "all_reduce")
        if str(record.get("type")) not in DTYPES:
            raise BadInput(where, f"type: unknown type {str(record.get('type'))[:40]!r}")
        size = _json_int(record.get("size"), where, "size", 0)
        dtype = DTYPES[str(record["type"])]
        ranks = 1 if collective == "allreduce" else nranks
        if size % (ITEMSIZE[dtype] * ranks):
            raise BadInput(where, f"size {size} is not a whole count of {ITEMSIZE[dtype]} B elements"
                                  + (f" on each of {ranks} ranks" if ranks > 1 else ""))
        count = size // ITEMSIZE[dtype] // ranks
        time_value = _json_time(record.get("time"), where, "time", allow_zero=count == 0)
        if time_value is None:
            raise BadInput(where, "time: not measured")
        op = "sum" if collective == "allgather" or record.get("redop") in (None, "none") else \
            _redop(str(record["redop"]), collective, f"{where}: redop")
        placement = "in_place" if _json_int(record["inPlace"], where, "inPlace", 0) else "out_of_place"
        wrong = record.get("wrong")
        wrong = 0 if wrong is None or (isinstance(wrong, str) and wrong.strip() in NOT_MEASURED) else \
            _json_int(wrong, where, "wrong", 0)
        measurements.append(Measurement(collective, dtype, op, count, placement, time_value, n_wrong=wrong))
        nranks_seen.add(nranks)
    if not measurements:
        raise BadInput(source, "an empty rccl-tests report")
    return measurements, {"nranks": nranks_seen.pop() if len(nranks_seen) == 1 else None, "hosts": [],
                          "warmup": 0, "iters": 0, "library": "RCCL" if kind == "rccl-tests" else "NCCL",
                          "library_version": "", "tool_version": f"{kind} (report JSON)"}


@importer("nccl-tests")
def nccl_tests(path: Path, options: ImportOptions) -> tuple[dict, Iterable[Measurement]]:
    return _parse(path, options, "nccl-tests")


@importer("rccl-tests")
def rccl_tests(path: Path, options: ImportOptions) -> tuple[dict, Iterable[Measurement]]:
    return _parse(path, options, "rccl-tests")


def _parse(path: Path, options: ImportOptions, kind: str) -> tuple[dict, Iterable[Measurement]]:
    """(context, measurements) of one nccl-tests/rccl-tests file: JSON read whole (bounded), text
    streamed. The context is complete before the first measurement is read."""
    first = head(path)
    if refused := not_this_format(path, first, kind, (NCCL_TESTS, NCCL_JSON, RCCL_REPORT)):
        raise refused
    measurements: Iterable[Measurement]
    if first.lstrip().startswith((b"{", b"[")):
        text = read_limited(path, MAX_JSON_BYTES, f"{kind} JSON")
        measurements, context = parse_json(text, str(path), options, kind)
        for measurement in measurements:
            measurement.iters = context.get("iters", 0)
    else:
        context, measurements = parse_text_file(path, options, kind, first)
    context["device"] = "rocm" if context["library"] == "RCCL" else "cuda"
    context.update(impl="xccl", transport=context["library"].lower())
    return context, measurements
