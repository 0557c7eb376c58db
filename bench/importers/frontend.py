"""The one front end of every importer: a file's lines without the prefixes launchers and terminals
add, the format of each run recognised by its headers, and the file split into runs.

* Prefixes stripped from the start of every line, repeatedly (they nest): Open MPI
  ``--tag-output`` (``[1,0]<stdout>:``), rank tags (``[0]``, ``[rank3]:``), ``srun --label``
  (``  0: ``), timestamps (``2024-05-01T10:00:00.123Z``, ``[2024-11-05 10:02:03]``, ``[10:00:01]``,
  a bare ``00:55:22``), CI runners' (GitHub Actions' ``2024-11-05T10:02:03.1234567Z``, with ``gh run
  view --log``'s job and step names before it; GitLab's ``section_start:...`` markers), a container
  log's ``stdout F``, pdsh's ``host: `` (before a header, a row or another prefix) and shell
  prompts (``$ ``, ``user@host:~$ ``); terminal escape sequences (colours, GitLab's ``ESC[0K``)
  anywhere. A ``#`` is never stripped: every tool's headers start with one.
* A format is recognised by a header only that tool prints (MARKERS), never by a first character:
  a file is JSON only when it starts like a JSON document and parses as one.
* A run starts where a tool's opening header appears again (nccl-tests' version / "Collective test
  starting" / "nThread" / column header lines, in that order; OSU's title; IMB's banner): each run is
  imported with its own run_id. IMB's ``# Benchmarking X`` blocks are parts of one run (a benchmark
  and process count each).
* Two tables side by side on one line (a paste of two logs) or a line that is two tools' header is
  refused, naming the file and line.

Lines are read in binary with their byte offsets, so each part is re-read from its own start (a log of
thousands of runs is read a bounded number of times, never held whole).
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BadInput
from bench.importers.imported_row import Measurement
from bench.importers.input_files import (
    BINARY,
    HEAD_BYTES,
    IMB,
    JSON_START,
    MAX_LINE,
    NCCL_TESTS,
    OSU,
    REPRODUCER_CSV,
    REPRODUCER_LOG,
    json_like,
    looks_like,
    open_binary,
)
from bench.importers.kinds import kind as kind_of
from bench.importers.nccl_fields import DTYPES as NCCL_DTYPES

#: one prefix a launcher or terminal puts before a tool's line; stripped repeatedly from the start
PREFIX = re.compile(
    r"^(?:"
    r"\[\d{1,9},\d{1,9}\]<std(?:out|err)>:[ \t]?"  # Open MPI --tag-output
    r"|\[(?:rank)?\d{1,7}\]:?[ \t]?"  # [0] rank tags (Intel MPI -l, MPICH -prepend-rank)
    r"|[ \t]*\d{1,7}:[ \t]"  # srun --label, mpiexec -l ("  0: ")
    r"|\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?\]?[ \t]*(?:[|:-][ \t]*)?"
    r"|\[\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\][ \t]*"  # [10:00:01]
    r"|\d\d:\d\d:\d\d(?:[.,]\d{1,9})?[ \t]+"  # a bare clock: 00:55:22 (ts, a terminal's log)
    r"|(?:stdout|stderr) [FP] "  # a container runtime's log (after its timestamp): stream and tag
    # pdsh/clush's host name, before a header, a row or another prefix only (a host's other lines keep theirs)
    r"|[A-Za-z][\w.-]{0,63}: (?=[ \t]*(?:#|\d+[ \t]+\d|\[))"
    # GitLab's collapsible sections (section_start:1699180923:step_script[collapsed=true]) before a line
    r"|section_(?:start|end):\d{1,12}:[\w.-]{1,200}(?:\[[^\]]{0,100}\])?"
    # asctime, as Open MPI's --timestamp-output and `date` print it
    r"|\[?[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?: [A-Z]{3,4})? \d{4}\]?[ \t]*"
    r"|\S{1,64}@\S{1,64}[:\s]\S{0,200}[$#%][ \t]+"  # user@host:~/dir$
    r"|\((?:\w|[-.]){1,64}\)[ \t]+(?=\S+@)"  # (venv) before a prompt
    r"|[$>][ \t]+"  # a bare prompt
    r")")
#: what a binary file is called (looks_like): one run, refused by its importer
BINARY_NAMES = {name for _, name in BINARY} | {"binary data"}
#: how many nested prefixes one line may carry (timestamp, rank tag, label ...)
MAX_PREFIXES = 6


#: terminal escape sequences (colours, GitLab's erase-line ``ESC[0K``): never part of a tool's output
ESCAPE = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]")
#: `gh run view --log`: the job and the step, tab-separated, before the runner's timestamp (tried only on
#: a line with a tab: a scan for one on every line of a 200 MB log costs seconds)
GH_LOG = re.compile(r"[^\t\n]{1,200}\t[^\t\n]{1,200}\t(?=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")


def clean(line: str) -> str:
    """``line`` without terminal escape sequences and the known prefixes at its start."""
    if "\x1b" in line:
        line = ESCAPE.sub("", line)
    if "\t" in line and (found := GH_LOG.match(line)):
        line = line[found.end():]
    for _ in range(MAX_PREFIXES):
        found = PREFIX.match(line)
        if not found or not found.end():
            return line
        line = line[found.end():]
    return line


def numbered(path: Path, offset: int = 0, number: int = 1, last: int | None = None) -> Iterator[tuple[int, str, int]]:
    """(line number, line without line break and prefixes, its byte offset) of
    ``path`` from ``offset`` (which is line ``number``) to line ``last``. A line over MAX_LINE comes as
    "" (its number kept), never whole; bytes that are not UTF-8 become U+FFFD."""
    return (line[:3] for line in _numbered(path, offset, number, last))


#: the raw lines kept from a file's end while looking for its last one: one of them is not blank once
#: its prefixes are stripped (a line of a timestamp alone is blank then)
TAIL_LINES = 16


@functools.lru_cache(maxsize=64)
def _last_line(path: Path, size: int, mtime_ns: int) -> tuple[int | None, bool]:
    # numbered's line numbers (a bare CR ends a line too), without decoding and cleaning every line:
    # only the raw lines near the end are cleaned
    tail: list[tuple[int, bytes, bool]] = []
    number = 0
    with open_binary(path) as handle:
        while data := handle.readline(MAX_LINE):
            terminated = data.endswith(b"\n")
            if not terminated and len(data) >= MAX_LINE:  # over-long: numbered gives it as ""
                while data and not data.endswith(b"\n"):
                    data = handle.readline(MAX_LINE)
                number += 1
                continue
            body = data.rstrip(b"\n").rstrip(b"\r")
            pieces = body.split(b"\r") if b"\r" in body else (body,)
            for piece in pieces:
                number += 1
                if piece.strip():
                    tail.append((number, piece, terminated))
            del tail[:-TAIL_LINES]
    for found, piece, terminated in reversed(tail):
        if clean(piece.decode("utf-8", errors="replace")).strip():
            return found, not terminated
    return None, False


def last_line(path: Path) -> tuple[int | None, bool]:
    """The file's last line that is not blank (a pasted log is often cut inside it, whether or not an
    editor added a line break after it), and whether the file ends inside it (no line break after it);
    (None, False) for a file of blank lines. One pass over the file, kept per path and version."""
    try:
        stat = path.stat()
    except OSError:
        return None, False
    return _last_line(path, stat.st_size, stat.st_mtime_ns)


def _numbered(path: Path, offset: int, number: int, last: int | None) -> Iterator[tuple[int, str, int, bool]]:
    """numbered's lines, each with whether it ended with a line break."""
    with open_binary(path) as handle:
        handle.seek(offset)
        while last is None or number <= last:
            start = handle.tell()
            data = handle.readline(MAX_LINE)
            if not data:
                return
            if not data.endswith(b"\n") and len(data) >= MAX_LINE:
                while data and not data.endswith(b"\n"):  # skip the rest of an over-long line
                    data = handle.readline(MAX_LINE)
                yield number, "", start, True
                number += 1
                continue
            text = data.rstrip(b"\n").rstrip(b"\r").decode("utf-8", errors="replace")
            for piece in text.split("\r") if "\r" in text else (text,):  # a bare CR ends a line too
                yield number, clean(piece), start, data.endswith(b"\n")
                number += 1


#: (tool format, marker kind, pattern): the header lines each tool prints. Kinds of one tool are in
#: print order: a kind at or before the last one seen opens a new run (OPENING), the others never do
MARKERS: tuple[tuple[str, int, re.Pattern], ...] = (
    (NCCL_TESTS, 0, re.compile(r"^#\s*[nr]ccl-tests version\b")),
    (NCCL_TESTS, 1, re.compile(r"^#\s*Collective test starting:")),
    (NCCL_TESTS, 2, re.compile(r"^#\s*nThread\s+\d+\s+nGpus\s+\d+")),
    (NCCL_TESTS, 3, re.compile(r"^#\s+size\s+count\s+type\b")),
    (OSU, 0, re.compile(r"^#\s*OSU\b.*\b(?:Test|Benchmark)\b", re.IGNORECASE)),
    (OSU, 1, re.compile(r"^#\s*Size\s+(?:Avg\s+|Min\s+)?(?:Latency|Bandwidth|Bi-Bandwidth|MB/s|Overall)",
                        re.IGNORECASE)),
    (IMB, 0, re.compile(r"^#?\s*Intel\s?\(R\)\s+MPI\s+Benchmark")),
    (IMB, 1, re.compile(r"^#\s*Benchmarking\s+(?:Multi-)?\w+")),
    (IMB, 2, re.compile(r"^\s*(?:#bytes\s+)?#repetitions\s+")),
    (REPRODUCER_LOG, 0, re.compile(r"^\s*(?:(?:output|input) size = [\d.]+ MB|Method = \S+"
                                   r"|time(?:_\w+)? = [\d.eE+-]+ ms|(?:All-gather|Reduce scatter) bus bw for)\s*")),
)
#: the kinds that open a run (seen again, or after a later kind, a new run starts)
OPENING = {NCCL_TESTS: {0, 1, 2, 3}, OSU: {0}, IMB: {0}, REPRODUCER_LOG: set()}
#: kinds that start a new part of the run (IMB: one benchmark and process count each)
PART = {IMB: {1}}
#: headers that one line holds only once (twice: two logs pasted side by side)
SIDE_BY_SIDE = (re.compile(r"#\s+size\s+count\s+type\b"), re.compile(r"#\s*OSU\b", re.IGNORECASE),
                re.compile(r"#\s*Size\s+(?:Avg\s+)?(?:Latency|Bandwidth|Bi-Bandwidth)", re.IGNORECASE),
                re.compile(r"#bytes\s+#repetitions"), re.compile(r"Collective test starting"),
                re.compile(r"\btime(?:_\w+)? = [\d.]+ ms"))


#: what tells an rccl-tests run from an nccl-tests one (the same table)
RCCL_MARK = re.compile(r"rccl-tests|\bRCCL version")
#: a launcher's command line (a run that follows it starts there: its rank count is read from it)
LAUNCHER = re.compile(r"^\s*(?:\+\s*)?(?:\S*/)?(?:mpirun|mpiexec(?:\.\w+)?|srun|orterun|aprun|jsrun|flux\s+run)\s")


@dataclass
class Part:
    """Lines ``first`` to ``last`` of a file (``offset``: the byte where ``first`` starts), read
    through the front end."""

    path: Path
    first: int = 1
    last: int | None = None
    offset: int = 0
    #: the run's first part (its banner: IMB's types and version), None for the first part itself
    head: Part | None = None
    #: the file's last line that is not blank (set while ``lines`` reads it): maybe cut
    cut_line: int | None = None
    #: whether that line ends the file without a line break (the file surely ends inside it)
    unterminated: bool = False

    def lines(self) -> Iterator[tuple[int, str]]:
        """(line number in the file, cleaned line) of this part."""
        number, unterminated = last_line(self.path)
        if number is not None and number >= self.first and (self.last is None or number <= self.last):
            self.cut_line, self.unterminated = number, unterminated
        yield from ((number, line) for number, line, _ in numbered(self.path, self.offset, self.first, self.last))

    def __str__(self) -> str:
        return str(self.path)

    def left_out(self, number: int, error: BadInput, notes: list[str]) -> None:
        """A row that failed its checks: the file's last line (a pasted log cut inside it) is left out and
        said in ``notes``; any other is refused (``error``)."""
        if number != self.cut_line:
            raise error
        reason = str(error).split(": ", 1)[-1]
        notes.append(f"line {number} left out: the file's last line, cut inside it ({reason[:120]})")


@dataclass
class Run:
    """One run of one tool in a file: its parts (one, except IMB's benchmarks), what told the format."""

    format: str
    evidence: str
    parts: list[Part] = field(default_factory=list)
    #: the latest marker kind seen in the run (MARKERS): an opening one at or before it opens a new run
    last_kind: int = -1
    #: an nccl-tests-format run that names rccl-tests or RCCL (read as rccl-tests under --auto)
    rccl: bool = False

    @property
    def first(self) -> int:
        return self.parts[0].first

    @property
    def last(self) -> int | None:
        return self.parts[-1].last

    def span(self) -> str:
        return f"lines {self.first}-{self.last}" if self.last else "(the whole file)"


def _refuse_side_by_side(line: str, where: str) -> None:
    for pattern in SIDE_BY_SIDE:
        if len(pattern.findall(line)) > 1:
            raise BadInput(where, f"two tables side by side on one line ({pattern.pattern!r} twice: a paste of two "
                                  "logs?): import each log on its own")


def _markers(line: str, where: str) -> tuple[str, int] | None:
    """(format, kind) of a header line, None for any other line; a line two tools claim is refused."""
    if "#" not in line and "Intel" not in line and " = " not in line and "bus bw" not in line:
        return None
    found = [(name, kind) for name, kind, pattern in MARKERS if pattern.search(line)]
    if not found:
        return None
    _refuse_side_by_side(line, where)
    if len({name for name, _ in found}) > 1:
        raise BadInput(where, f"ambiguous: the line is a header of {' and of '.join(sorted({n for n, _ in found}))}: "
                              f"{line.strip()[:80]!r}")
    return found[0]


def split_runs(path: Path) -> list[Run]:
    """The runs of ``path``, in file order; a file of no recognised tool is one run of format ""
    (its importer, when named, says what is missing). The reproducer's CSV and JSON files are one run."""
    with open_binary(path) as handle:
        data = handle.read(HEAD_BYTES)
    seen = looks_like(data)
    if seen and (seen[0] == REPRODUCER_CSV or json_like(data) or seen[0] in BINARY_NAMES):
        return [Run(seen[0] if seen else "", seen[1] if seen else "", [Part(path)])]
    runs: list[Run] = []
    current: Run | None = None
    preamble: tuple[int, int] | None = None  # lines before the first header: (first line, its offset)
    launched: tuple[int, int] | None = None  # the last launcher line since the current run opened
    final = 0
    rccl = False  # RCCL named since the current run opened (or in the preamble)
    rows = False  # a line that starts with a number (a result row) since the last header line
    last_header = ""  # that header line
    # a table pasted without its headers before the first header of another test: its own run
    preamble_rows = 0  # result lines in nccl-tests' shape before any header
    resume: tuple[int, int] | None = None  # the first line after them that is neither a row nor a comment
    for number, line, offset in numbered(path):
        final = number
        if preamble is None:
            preamble = (number, offset)
        if not rows and line.lstrip()[:1].isdigit():
            rows = True
        if current is None:
            if NCCL_ROW.match(line):
                preamble_rows, resume = preamble_rows + 1, None
            elif preamble_rows and resume is None and line.strip() and not line.lstrip().startswith("#"):
                resume = (number, offset)
        if "CCL" in line or "ccl" in line:
            rccl = rccl or bool(RCCL_MARK.search(line))
            if current is not None:
                current.rccl = current.rccl or rccl
        if LAUNCHER.match(line):
            launched = (number, offset)
            continue
        found = _markers(line, f"{path}:{number}")
        if found is None:
            continue
        name, kind = found
        # a header seen again opens a new run, but for the very line just printed again with no row between:
        # two processes writing to one terminal (their runs interleaved, told apart by their rows' sizes)
        text = line.strip()
        again = current is not None and (kind < current.last_kind or kind == current.last_kind
                                         and (rows or text != last_header))
        opens = current is None or current.format != name or (kind in OPENING[name] and again)
        rows, last_header = False, text
        if opens:
            # the first run holds the file's preamble; a later one starts at the launcher line before it
            start = preamble if not runs else launched or (number, offset)
            if current is None and preamble_rows >= NCCL_ROWS_NEEDED:  # rows, then another test's header
                start = resume or launched or (number, offset)
                runs.append(Run(NCCL_TESTS, f"lines {preamble[0]}-{start[0] - 1}: rows in nccl-tests' shape before "
                                            f"the header of line {number}",
                                [Part(path, preamble[0], start[0] - 1, preamble[1])]))
            if current is not None:
                current.parts[-1].last = start[0] - 1
            launched = None
            current = Run(name, f"line {number}: {line.strip()[:80]!r}", [Part(path, start[0], None, start[1])],
                          rccl=rccl and not runs)
            rccl = current.rccl
            runs.append(current)
        elif kind in PART.get(name, ()) and current.parts[-1].first != number:
            current.parts[-1].last = number - 1
            current.parts.append(Part(path, number, None, offset, current.parts[0]))
        current.last_kind = kind if kind in OPENING[name] else max(current.last_kind, kind)
    if not runs:
        shaped = seen or _nccl_rows(path)
        return [Run(shaped[0] if shaped else "", shaped[1] if shaped else "", [Part(path)])]
    runs[-1].parts[-1].last = final
    return runs


#: a result line of nccl-tests / rccl-tests: size, count, a type name, then the op or the numbers
NCCL_ROW = re.compile(r"^\s*\d+\s+\d+\s+(?:" + "|".join(sorted(NCCL_DTYPES, key=len, reverse=True))
                      + r")\s+(?:sum|prod|min|max|avg|none|-?\d+\s|\d+\.\d+)")
#: rows in that shape that tell a table without any header line (one could be anything)
NCCL_ROWS_NEEDED = 3


def _nccl_rows(path: Path) -> tuple[str, str] | None:
    """A pasted nccl-tests table with none of its header lines: (format, evidence) where its rows alone
    say so (size, count, one of nccl-tests' type names, then its op or numbers, on several lines)."""
    found: list[int] = []
    for number, line, _ in numbered(path):
        if NCCL_ROW.match(line):
            found.append(number)
            if len(found) == NCCL_ROWS_NEEDED:
                return NCCL_TESTS, f"lines {found[0]}-{found[-1]}: rows in nccl-tests' shape (size count type ...)"
    return None


def head_text(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of ``path`` as the importers see them: line prefixes stripped (read once
    per version of the file: every run of a log of thousands asks)."""
    status = os.stat(path)
    return _head_text(str(path), status.st_mtime_ns, status.st_size, size)


@functools.lru_cache(maxsize=16)
def _head_text(path: str, _mtime_ns: int, _size: int, size: int) -> bytes:
    with open_binary(Path(path)) as handle:
        data = handle.read(size)
    if JSON_START.match(data):
        return data
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").split("\n")
    return "\n".join(clean(line) for line in text).encode()


# --- what a table says of itself: the collective from its rows' shape, the rank count from its bandwidths ---

#: a file name's common spellings of a collective (a hint the user gave): matched between non-letters
NAME_HINTS: tuple[tuple[str, re.Pattern], ...] = tuple((collective, re.compile(rf"(?<![a-z])(?:{pattern})(?![a-z])"))
                                                       for collective, pattern in (
    ("allreduce", r"all[_-]?reduce|ar"), ("allgather", r"all[_-]?gather|ag"),
    ("reduce_scatter", r"reduce[_-]?scatter|rs"), ("alltoall", r"all[_-]?to[_-]?all|a2a"),
    ("sendrecv", r"send[_-]?recv"), ("broadcast", r"broadcast|bcast"), ("reduce", r"reduce"),
    ("gather", r"gather"), ("scatter", r"scatter")))


def name_hint(source: str) -> tuple[str, str] | None:
    """(collective, evidence) a file name spells, None when it spells none (or two)."""
    name = os.path.basename(source).lower()
    found = []
    for collective, pattern in NAME_HINTS:
        if match := pattern.search(name):
            found.append((collective, match.group(0)))
            name = name[:match.start()] + " " + name[match.end():]  # "all_reduce" is no "reduce" too
    if len(found) != 1:
        return None
    return found[0][0], f"the file name {os.path.basename(source)!r}"


@dataclass(frozen=True)
class RowShape:
    """What one result row says of its collective: size / (count x type size), redop, root (None:
    the layout has no such column), the printed algbw and busbw (tokens, for their digits)."""

    ratio: int
    dtype: str
    redop: str | None
    root: int | None
    bandwidths: tuple[tuple[str, str], ...] = ()


def shape_candidates(shape: RowShape) -> tuple[list[str], str]:
    """(the collectives a row of this shape can be, why): nccl-tests' print format (common.cu)."""
    reduces = shape.redop is not None and shape.redop != "none"
    rooted = shape.root is not None and shape.root >= 0
    said = f"size/count/sizeof({shape.dtype}) = {shape.ratio}" + (f" with redop {shape.redop}" if shape.redop else "") \
        + (f", root {shape.root}" if shape.root is not None else "")
    if shape.ratio == 1:
        if reduces and shape.root is None:  # before nccl-tests 2.13 sendrecv printed no redop column
            return ["allreduce"], (f"{said}, no root column (the format before nccl-tests 2.13: sendrecv printed "
                                   "no redop)")
        if reduces:
            return (["reduce"] if rooted else ["allreduce", "sendrecv"]), said
        return (["broadcast"] if rooted else ["sendrecv"]), said
    if reduces:
        return ["reduce_scatter"], said
    if shape.redop is None and shape.root is None:  # before nccl-tests 2.13 only all_gather printed neither
        return ["allgather"], f"{said}, no redop column (the format before nccl-tests 2.13: alltoall printed one)"
    return (["gather", "scatter"] if rooted else ["allgather", "alltoall"]), said


def busbw_above_algbw(pairs: list[tuple[str, str]]) -> bool:
    """Whether a row's busbw is above its algbw beyond the printed rounding (never so for sendrecv)."""
    for algbw, busbw in pairs:
        try:
            a, b = float(algbw), float(busbw)
        except ValueError:
            continue
        if a > 0 and b - _printed_half(busbw) > a + _printed_half(algbw):
            return True
    return False


def _printed_half(token: str) -> float:
    return 0.5 * 10 ** -(len(token) - token.index(".") - 1) if "." in token else 0.5


def ranks_from_bandwidth(collective: str, pairs: list[tuple[str, str]]) -> tuple[int | None, int]:
    """(the rank count busbw / algbw decides across all rows, the rows that bound it) for a collective
    whose factor is scale * (n-1)/n; None when the digits leave more than one (or no) count. Raises
    ValueError when two rows contradict each other."""
    found = kind_of(collective)
    if not found.spread or not found.busbw_scale:
        return None, 0
    scale = found.busbw_scale
    low, high, used = 1.0, math.inf, 0
    for algbw, busbw in pairs:
        try:
            a, b = float(algbw), float(busbw)
        except ValueError:
            continue
        da, db = _printed_half(algbw), _printed_half(busbw)
        if a - da <= 0 or not math.isfinite(a) or not math.isfinite(b):
            continue
        ratio_low, ratio_high = max(b - db, 0.0) / (a + da), (b + db) / (a - da)
        # ratio = scale (n-1)/n  <=>  n = scale / (scale - ratio)
        n_low = scale / (scale - ratio_low) if ratio_low < scale else math.inf
        n_high = scale / (scale - ratio_high) if ratio_high < scale else math.inf
        if n_high < math.inf:
            used += 1
        low, high = max(low, n_low), min(high, n_high)
        if high < math.inf and (low == math.inf or math.ceil(low - 1e-9) > math.floor(high + 1e-9)):
            raise ValueError(f"busbw/algbw {busbw}/{algbw} fits no rank count the rows before it allow")
    if low == math.inf:
        return None, used
    first, last = math.ceil(low - 1e-9), math.floor(high + 1e-9) if high < math.inf else None
    return (first if last == first else None), used


# --- two runs in one table: told apart by their size sequences ---

#: result rows whose sizes are followed for interleaved runs (a longer table is taken as one run's cycles)
MAX_SEQUENCE = 1 << 14


@dataclass
class Interleaved:
    """Runs of one table told apart by their rows' sizes: each row's run (by line), where each run starts."""

    run_of_line: dict[int, int]
    starts: list[int]

    def said(self) -> str:
        return (f"{len(self.starts)} runs interleaved (two processes writing to one terminal?), told apart by their "
                "size sequences: from lines " + ", ".join(map(str, self.starts[:8])) + "; each its own run_id")


def with_runs(measurements: Iterator[Measurement], interleaved: Interleaved | None) -> Iterator[Measurement]:
    """``measurements`` each with its run's index where runs are ``interleaved`` (by its line)."""
    for measurement in measurements:
        if interleaved:
            measurement.run = interleaved.run_of_line.get(measurement.line, 0)
        yield measurement


def _refuse_runs_in_step(rows: list[tuple[int, tuple, int]], source: str) -> None:
    """Every size of a table printed k >= 2 times in a row: k runs in step, not nccl-tests' rounding
    (which repeats only the sizes that round alike); which row is whose, nothing tells."""
    lengths: dict[tuple, list[list[int]]] = {}  # key -> [size, times in a row, its second row's line] each
    for line, key, size in rows:
        seen = lengths.setdefault(key, [])
        if seen and seen[-1][0] == size:
            seen[-1][1] += 1
            seen[-1][2] = seen[-1][2] or line
        else:
            seen.append([size, 1, 0])
    for seen in lengths.values():
        times = {length for _, length, _ in seen}
        if len(seen) > 1 and len(times) == 1 and (k := next(iter(times))) > 1:
            raise BadInput(f"{source}:{seen[0][2]}", f"every size printed {k} times in a row: {k} runs in step "
                                                    "(processes writing to one terminal?) whose rows the sizes "
                                                    "cannot tell apart; import each run's lines on their own")


def split_by_sizes(rows: list[tuple[int, tuple, int]], source: str, doubles: bool = True,
                   cut_line: int | None = None) -> Interleaved | None:
    """(line, key, size) of a table's rows in file order (key: what else tells a sequence, e.g. the type)
    as runs, each of sizes that rise by the table's own steps without a gap. None where the rows are one
    run, or runs one after the other (a tool's repeated cycles: nccl-tests -N); BadInput naming the line
    where a second run starts when the rows cannot be split so: a size that follows no run's last size, or
    one that two runs could take next (which row is whose, nothing tells). ``doubles``: a row of the size
    of the row just before it is that row's run (nccl-tests prints a size twice where two requested sizes
    round to one: 0 B for 8 and 16 B of an all-gather on 16 ranks), unless the runs are known to be
    several (their rank lines each printed by several processes). ``cut_line``: the file's last line, cut
    without its line break: a size that fits no run there is no restart (the row's own checks leave it out)."""
    order: dict[tuple, set[int]] = {}
    for _, key, size in rows:
        order.setdefault(key, set()).add(size)
    before = {key: dict(zip(sorted(sizes)[1:], sorted(sizes), strict=False)) for key, sizes in order.items()}
    first = {key: min(sizes) for key, sizes in order.items()}
    runs: dict[tuple, list[list[int]]] = {}  # key -> each run's [last size, its index]
    run_of_line: dict[int, int] = {}
    starts: list[int] = []
    second: int | None = None  # the line where a run restarts its sizes while another is unfinished
    previous: dict[tuple, list[int]] = {}  # key -> the run of its last row
    if doubles:
        _refuse_runs_in_step(rows, source)
    for line, key, size in rows:
        mine = runs.setdefault(key, [])
        if doubles and key in previous and previous[key][0] == size:
            run_of_line[line] = previous[key][1]
            continue
        fits = [run for run in mine if run[0] == before[key][size]] if size in before[key] else []
        if len(fits) > 1:  # two runs at the same size: which row is whose, nothing in the sizes tells
            raise BadInput(f"{source}:{line}", f"two runs interleaved (the second from line {second}) reach size "
                                               f"{size} together: their sizes cannot tell which row is whose; "
                                               "import each run's lines on their own")
        found = fits[0] if fits else None
        if found is None and (not mine or size == first[key]):
            found = [size, len(mine)]
            mine.append(found)
            if found[1] >= len(starts):
                starts.append(line)
            if len(mine) > 1 and second is None:
                second = line
        elif found is None and line == cut_line:
            continue
        elif found is None:
            raise BadInput(f"{source}:{line}", f"size {size} follows no run's last size: the result lines hold more "
                                               f"than one run (a second from line {second or line}?) that their "
                                               "size sequence cannot split; import each run's lines on their own")
        found[0] = size
        run_of_line[line] = found[1]
        previous[key] = found
    if len(starts) < 2:
        return None
    last_of: dict[int, int] = {}
    for line, index in run_of_line.items():
        last_of[index] = line
    if all(last_of[index] < starts[index + 1] for index in range(len(starts) - 1)):
        return None  # one after the other: cycles of one run
    return Interleaved(run_of_line, starts)
