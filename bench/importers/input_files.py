"""The files an import reads: regular files only, read line by line with bounded lines, and
recognised by what they hold (so one tool's output is never read as another's).

Every check raises ``BadInput`` naming the file: a FIFO, socket, device or folder would block or
never end, a missing file has nothing to read, and a file of another tool's format would be read
as garbage (OSU's importer once took the count column of an nccl-tests log for a latency).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from bench.errors import BadInput

#: a line longer than this is no tool's result line (nccl-tests' widest, -I 1 -S 1, is ~260 characters):
#: it is skipped rather than held in memory whole (a 200 MB file without a line break)
MAX_LINE = 64 * 1024
#: what the format check reads of each file
HEAD_BYTES = 64 * 1024
#: the largest integer a table column holds (parquet int64)
INT64_MAX = 2**63 - 1

_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFLNK: "a symbolic link"}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def check_input(path: Path) -> None:
    """``path`` names a regular file this process may read (os.stat: nothing is opened, so a FIFO
    cannot block)."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise BadInput(str(path), "cannot read: no such file") from None
    except OSError as error:
        raise BadInput(str(path), f"cannot read: {error.strerror or error}") from None
    if not stat.S_ISREG(status.st_mode):
        raise BadInput(str(path), f"cannot read: {_kind(status.st_mode)}, not a regular file")
    if not os.access(path, os.R_OK):
        raise BadInput(str(path), "cannot read: permission denied")


def open_binary(path: Path) -> io.BufferedReader:
    """``path`` opened for reading, refused unless it is a regular file *when opened*: O_NONBLOCK
    keeps a FIFO put there after ``check_input`` from blocking, fstat sees what was opened."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise BadInput(str(path), f"cannot read: {error.strerror or error}") from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise BadInput(str(path), f"cannot read: {_kind(status.st_mode)}, not a regular file")
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def open_text(path: Path) -> TextIO:
    """``open_binary`` as UTF-8 text; bytes that are not UTF-8 become U+FFFD (no decode error)."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace", newline=None)


def lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number from 1, line without its line break) of ``path``, in constant memory: a line
    longer than MAX_LINE comes as "" (its number kept), never whole."""
    with open_text(path) as handle:
        number = 0
        while True:
            line = handle.readline(MAX_LINE)
            if not line:
                return
            number += 1
            if line.endswith("\n"):
                yield number, line[:-1]
                continue
            if len(line) < MAX_LINE:  # the last line, without a line break
                yield number, line
                return
            while line and not line.endswith("\n"):  # skip the rest of an over-long line
                line = handle.readline(MAX_LINE)
            yield number, ""


def read_limited(path: Path, limit: int, what: str) -> str:
    """The whole text of ``path`` (a format that cannot be streamed: JSON), refused above ``limit`` bytes."""
    with open_binary(path) as handle:
        too_large = os.fstat(handle.fileno()).st_size > limit
        data = b"" if too_large else handle.read(limit + 1)  # + 1: a file that grew meanwhile
    if too_large or len(data) > limit:
        raise BadInput(str(path), f"larger than {limit // 2**20} MiB: too large for {what} (a real one is far smaller)")
    return data.decode("utf-8", errors="replace")


def head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of ``path``."""
    with open_binary(path) as handle:
        return handle.read(size)


#: the decimals OSU (FLOAT_PRECISION) and IMB (%.2f) print a time or bandwidth with, at least
MIN_DECIMALS = 2


class RowWidth:
    """The cut-line check of a table whose rows the tool prints at fixed widths with two decimals
    (OSU, IMB): a row shorter than the row before it, a time with fewer decimals than the tool prints,
    or a table's first row that ends the file without its line break lost its end (a truncated log),
    whatever its tokens now read as. Tab-separated tables (old OSU) are not fixed-width: only their
    decimals are checked."""

    def __init__(self) -> None:
        self.width = 0

    def reset(self) -> None:
        self.width = 0

    def check(self, line: str, where: str, floats: list[str], unterminated: bool = False) -> None:
        """``floats``: the row's time and bandwidth tokens; ``unterminated``: it is the file's last line
        and has no line break."""
        width = len(line.rstrip())
        cut = next((token for token in floats if "." not in token or len(token.split(".")[1]) < MIN_DECIMALS), None)
        if cut is not None:
            raise BadInput(where, f"{cut!r} has fewer than {MIN_DECIMALS} decimals, which the tool always prints: a "
                                  f"cut line? ({line.strip()[:60]!r})")
        if "\t" not in line and width < self.width:
            raise BadInput(where, f"a row {self.width - width} characters shorter than the one before it: a cut "
                                  f"line? ({line.strip()[:60]!r})")
        if unterminated and not self.width:
            raise BadInput(where, f"the file ends inside its table's first row, without a line break: a cut line? "
                                  f"({line.strip()[:60]!r})")
        self.width = width


class NoResults(BadInput):
    """A file or run that holds none of its tool's result lines (a run that crashed before its table
    is skipped when its file holds other runs; alone, it is refused)."""


# ---------------------------------------------------------------------------------------------
# what a file looks like

NCCL_TESTS = "an nccl-tests/rccl-tests log"
NCCL_JSON = "nccl-tests JSON (-J)"
RCCL_REPORT = "an rccl-tests JSON report (-X -Z json)"
OSU = "OSU micro-benchmarks output"
IMB = "an IMB (Intel MPI Benchmarks) log"
REPRODUCER_LOG = "a pccl-reproducer Slurm log"
REPRODUCER_CSV = "the pccl-reproducer CSV"
#: the ``pccl-bench import`` tool that reads each format (None: no importer reads it)
TOOL_OF = {NCCL_TESTS: "nccl-tests", NCCL_JSON: "nccl-tests", RCCL_REPORT: "rccl-tests", OSU: "osu",
           REPRODUCER_LOG: "pccl-reproducer", REPRODUCER_CSV: "pccl-reproducer", IMB: "imb"}
#: the formats each ``pccl-bench import`` tool reads
FORMATS = {"nccl-tests": (NCCL_TESTS, NCCL_JSON, RCCL_REPORT), "rccl-tests": (NCCL_TESTS, NCCL_JSON, RCCL_REPORT),
           "osu": (OSU,), "imb": (IMB,), "pccl-reproducer": (REPRODUCER_LOG, REPRODUCER_CSV)}
#: what each tool's output has and a file of another format lacks
HALLMARK = {"nccl-tests": "no nccl-tests header or result line of a collective",
            "rccl-tests": "no rccl-tests header or result line of a collective",
            "osu": "no '# Size  Avg Latency(us)' table", "imb": "no '#bytes #repetitions' table",
            "pccl-reproducer": "no '<Collective> bus bw for N GPUs' line"}

#: (format, a line only that format prints); searched in the first HEAD_BYTES of a file, in order
SIGNATURES = (
    (NCCL_TESTS, re.compile(r"^#\s*(?:[nr]ccl-tests version|Collective test starting:|nThread\s+\d+\s+nGpus\s+\d+"
                            r"|\s*size\s+count\s+type\b|\s*Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+)", re.MULTILINE)),
    (OSU, re.compile(r"^#\s*OSU\b.*\bTest\b|^#\s*Size\s+(?:Avg\s+)?Latency", re.MULTILINE | re.IGNORECASE)),
    (IMB, re.compile(r"Intel\s?\(R\) MPI Benchmark|^#\s*Benchmarking\s+\w+|^\s*#bytes\s+#repetitions", re.MULTILINE)),
    (REPRODUCER_LOG, re.compile(r"^\s*(?:All-gather|Reduce scatter) bus bw for \d+ GPUs is|^\s*Method = \S+\s*$"
                                r"|^\s*time_\w+ = [\d.]+ ms\s*$", re.MULTILINE)),
    (REPRODUCER_CSV, re.compile(r"\A\s*gpu_count,slurm_job_id,output_size,unit,time_\w+")),
    (REPRODUCER_CSV, re.compile(r"\A\s*machine,(?:[^,\n]*,)*dir,(?:[^,\n]*,)*file,")),
)
BINARY = ((b"PAR1", "a Parquet file"), (b"\x1f\x8b", "gzip data"), (b"PK\x03\x04", "a zip archive"),
          (b"\x7fELF", "an executable"), (b"BZh", "bzip2 data"), (b"\xfd7zXZ", "xz data"))


#: a JSON document's start: an object's first key, or an array of objects (a log starting with
#: "[1,0]<stdout>:", "[0]" or "[user@host]$" is not JSON)
JSON_START = re.compile(rb"\A\s*(?:\{\s*(?:\"|\})|\[\s*(?:\{|\]))")


def json_like(data: bytes) -> bool:
    """Whether a file that starts with ``data`` is a JSON document: it starts like one and, when it is
    all in ``data``, parses as one (a larger one is parsed by its importer, within its limit)."""
    if not JSON_START.match(data):
        return False
    if len(data) < HEAD_BYTES:
        try:
            json.loads(data.decode("utf-8", errors="replace"))
        except ValueError:
            return False
    return True


def looks_like(data: bytes) -> tuple[str, str] | None:
    """(format, the evidence: a line and its number) of a file's first bytes; None when nothing is recognised."""
    for magic, name in BINARY:
        if data.startswith(magic):
            return name, f"it starts with {magic!r}"
    if b"\0" in data[:4096]:
        return "binary data", "it holds NUL bytes"
    text = data.decode("utf-8", errors="replace")
    if json_like(data):
        if re.search(r'"inPlace"\s*:', text):
            return RCCL_REPORT, "its records have 'inPlace'"
        if re.search(r'"(?:results|nccl_version)"\s*:', text):
            return NCCL_JSON, "it has 'results'"
        return "JSON", f"it starts with {text.lstrip()[:1]!r} and parses as JSON"
    for name, pattern in SIGNATURES:
        if found := pattern.search(text):
            number = text.count("\n", 0, found.start()) + 1
            line = text[text.rfind("\n", 0, found.start()) + 1:].split("\n", 1)[0].strip()
            return name, f"line {number}: {line[:80]!r}"
    return None


def not_this_format(path: Path, data: bytes, kind: str, wanted: tuple[str, ...]) -> BadInput | None:
    """The error for a file that looks like another tool's output (None if it may be ``kind``'s):
    a file is refused early only on positive evidence of something else."""
    seen = looks_like(data)
    if seen is None or seen[0] in wanted:
        return None
    name, evidence = seen
    tool = TOOL_OF.get(name)
    hint = (f"; import it with `pccl-bench import {tool}`" if tool and tool != kind
            else "; no pccl-bench importer reads it" if name in TOOL_OF else "")
    lacks = f", {HALLMARK[kind]}" if kind in HALLMARK else ""
    return BadInput(str(path), f"looks like {name} ({evidence}), not {kind} output{lacks}{hint}")


def hint_of(data: bytes, wanted: tuple[str, ...]) -> str:
    """'' or ', and it looks like X (evidence)' for a message about a file with no data of its tool."""
    seen = looks_like(data)
    if seen is None or seen[0] in wanted:
        return ""
    return f"; it looks like {seen[0]} ({seen[1]})"


# ---------------------------------------------------------------------------------------------
# numbers read from files


def time_us(token: str, where: str, name: str, allow_zero: bool = False) -> float:
    """A time printed by a tool: a finite number above 0 (``allow_zero``: 0 too); else BadInput naming it."""
    try:
        value = float(token)
    except ValueError:
        raise BadInput(where, f"{name}: not a number: {token[:40]!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise BadInput(where, f"{name}: {token[:40]!r} is not a time (a finite number above 0)")
    return value


def count(token: str, where: str, name: str, minimum: int = 0) -> int:
    """A non-negative integer token (ASCII digits only: int() takes other scripts' digits) within int64."""
    if not (token.isascii() and token.isdigit()):
        raise BadInput(where, f"{name}: not a whole number: {token[:40]!r}")
    if len(token) > 19 or int(token) > INT64_MAX:
        raise BadInput(where, f"{name}: {token[:40]} is beyond a 64-bit integer")
    value = int(token)
    if value < minimum:
        raise BadInput(where, f"{name}: {value}: must be at least {minimum}")
    return value
