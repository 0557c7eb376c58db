"""One result line of an nccl-tests/rccl-tests text table: the columns its ``#  size  count  type ...``
header names (old layouts, ``-I`` and ``-S`` included) and the measurements of a line."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from bench.errors import BadInput
from bench.importers.inputs import INT64_MAX, time_us
from bench.importers.inputs import count as whole
from bench.importers.nccl_fields import DTYPES, reduction_op
from bench.importers.rows import ITEMSIZE, Measurement

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
#: what nccl-tests prints for a value it did not measure (-c 0: #wrong; a placement not run); a time
#: of nan is a broken measurement, not a missing one
TEXT_NOT_MEASURED = ("N/A",)


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
    op = reduction_op(tokens[layout.redop], collective, where) if layout.redop is not None else "sum"
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
