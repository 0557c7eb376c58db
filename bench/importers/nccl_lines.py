"""One result line of an nccl-tests/rccl-tests text table: the columns its ``#  size  count  type ...``
header names (old layouts, ``-I`` and ``-S`` included) and the measurements of a line."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from bench.errors import BadInput
from bench.importers.imported_row import ITEMSIZE, Measurement
from bench.importers.input_files import INT64_MAX, time_us
from bench.importers.input_files import count as whole
from bench.importers.kinds import op_of, ranks_in_total
from bench.importers.nccl_fields import DTYPES, reduction_op

#: the column header line: "#  size  count  type  redop  root  time  algbw  busbw  #wrong ..."
HEADER = re.compile(r"^#\s+size\s+count\s+type\b")
TIME_LABELS = ("time", "cputime")
WRONG_LABELS = ("#wrong", "error", "wrong")
#: used when a file has no column header (a pasted excerpt): the layout of nccl-tests >= 2.13
DEFAULT_COLUMNS = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                   "time", "algbw", "busbw", "#wrong"]
#: the older generations (before 2.13, NVIDIA/nccl-tests 51af557): no root column (reductions print
#: redop, rooted tests root, all_gather/alltoall/sendrecv neither) and a float ``error`` per placement
OLD_BLOCKS = ["time", "algbw", "busbw", "error", "time", "algbw", "busbw", "error"]
#: nccl-tests' own tolerance for the old ``error`` column (common.cu DeltaMaxValue, times nranks - 1):
#: an error above it made the test fail; every other type had to be exact
ERROR_TOLERANCE = {"float16": 1e-2, "bfloat16": 1e-2, "float32": 1e-5, "float64": 1e-12}
EXACT = 1e-200
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
    algbw: int | None = None
    busbw: int | None = None
    root: int | None = None


def layout_of(columns: list[str], where: str) -> Layout:
    starts = [i for i, label in enumerate(columns) if label in TIME_LABELS]
    if not starts:
        raise BadInput(where, f"result header without a time column: {' '.join(columns)[:200]}")
    end = starts[1] if len(starts) > 1 else len(columns)
    preamble, block = columns[:starts[0]], columns[starts[0]:end]
    if len(starts) > 1 and columns[end:] != block:  # nccl-tests prints both placements alike
        raise BadInput(where, f"the in-place columns ({' '.join(columns[end:])[:80]}) are not the out-of-place ones "
                              f"({' '.join(block)[:80]}): a column missing?")
    wrong = next((label for label in WRONG_LABELS if label in block), None)
    def at(label: str) -> int | None:
        return block.index(label) if label in block else None

    return Layout(len(preamble), len(block), preamble.index("redop") if "redop" in preamble else None,
                  next(i for i, label in enumerate(block) if label in TIME_LABELS), at(wrong) if wrong else None,
                  wrong or "", at("i_min"), at("i_max"), at("algbw"), at("busbw"),
                  preamble.index("root") if "root" in preamble else None)


def columns_without_header(tokens: list[str]) -> list[str]:
    """The columns of a result line pasted without its header, from its shape: the current layout
    (redop and root), or an old one (redop or root, or neither) with its ``error`` columns."""
    if len(tokens) >= len(DEFAULT_COLUMNS):
        return DEFAULT_COLUMNS
    named = "redop" if tokens[3][:1].isalpha() else "root"
    if len(tokens) == 3 + 1 + len(OLD_BLOCKS):
        return ["size", "count", "type", named, *OLD_BLOCKS]
    return ["size", "count", "type", *OLD_BLOCKS]


def _optional_time(token: str, where: str, name: str) -> float | None:
    return None if token in TEXT_NOT_MEASURED else time_us(token, where, name)


def _wrong_count(token: str, where: str, name: str) -> int:
    """#wrong: a count of wrong elements."""
    if token in TEXT_NOT_MEASURED:  # -c 0: not checked
        return 0
    try:
        value = float(token)
    except ValueError:
        raise BadInput(where, f"{name}: not a number: {token[:40]!r}") from None
    if not math.isfinite(value) or value < 0 or value > INT64_MAX or value != int(value):
        raise BadInput(where, f"{name}: {token[:40]!r} is not a count of wrong elements")
    return int(value)


def _old_error(token: str, where: str, name: str, dtype: str, nranks: int | None) -> tuple[int | None, str | None, str]:
    """The old ``error`` column (the largest deviation from the expected value, not a count):
    (n_wrong, status, note). 0 is 0 wrong; any other value leaves the count unknown (None), and the
    row is ``wrong`` when it is above nccl-tests' own tolerance, which failed the test."""
    if token in TEXT_NOT_MEASURED:
        return 0, None, ""
    value = _non_negative(token, where, name, "an error magnitude")
    if "e" not in token.lower():  # nccl-tests prints it "%5.0le": a value without its exponent was cut
        raise BadInput(where, f"{name}: {token[:40]!r} is not as nccl-tests prints it (like 2e-06): a cut line?")
    if value == 0:
        return 0, None, ""
    tolerance = ERROR_TOLERANCE.get(dtype, EXACT) * max((nranks or 2) - 1, 1)
    verdict = "above" if value > tolerance else "within"
    return None, "wrong" if value > tolerance else None, (f"nccl-tests error {token} {verdict} its tolerance "
                                                          f"{tolerance:g}")


def _bandwidth(token: str, where: str, name: str) -> float | None:
    """A printed bandwidth (GB/s), kept as printed; None where the tool printed none."""
    if token in TEXT_NOT_MEASURED:
        return None
    return _non_negative(token, where, name, "a bandwidth")


def _non_negative(token: str, where: str, name: str, what: str) -> float:
    """A printed figure that is ``what``: a finite number >= 0, else BadInput naming the line."""
    try:
        value = float(token)
    except ValueError:
        raise BadInput(where, f"{name}: not a number: {token[:40]!r}") from None
    if not math.isfinite(value) or value < 0:
        raise BadInput(where, f"{name}: {token[:40]!r} is not {what} (a finite number >= 0)")
    return value


def _decimals(token: str) -> int | None:
    """Decimals of a printed time (%.2f, %.1f, %.0f); None for the exponent form (no check then)."""
    if "e" in token.lower():
        return None
    return len(token) - token.index(".") - 1 if "." in token else 0


def with_blank_redop(tokens: list[str], redop: int | None) -> list[str]:
    """The tokens of a row whose redop column is blank (old nccl-tests' alltoall printed an empty op
    name: the time then sits where the op would) with ``none`` in its place; others as they are."""
    if redop is None or redop >= len(tokens) or tokens[redop][:1].isalpha():
        return tokens
    return [*tokens[:redop], "none", *tokens[redop:]]


def parse_data_line(line: str, layout: Layout | None, collective: str, nranks: int | None, where: str,
                    iters: int = 0, number: int = 0) -> list[Measurement]:
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
    if layout is None:  # no header: the columns from the line's shape
        if len(tokens) < 4:
            return []
        layout = layout_of(columns_without_header(tokens), where)
    tokens = with_blank_redop(tokens, layout.redop)
    if len(tokens) < layout.preamble + layout.block:
        return []
    size, count = whole(tokens[0], where, "size"), whole(tokens[1], where, "count")
    dtype = DTYPES[tokens[2]]
    itemsize = ITEMSIZE[dtype]
    if nranks is not None:
        ranks = ranks_in_total(collective, nranks)
        if size != count * itemsize * ranks:
            raise BadInput(where, f"size {size} is not count {count} x {itemsize} B ({tokens[2]})"
                                  + (f" x {ranks} ranks" if ranks > 1 else "") + f" = {count * itemsize * ranks}: "
                                  "a corrupt line, or a wrong --nranks/--collective")
    op = reduction_op(tokens[layout.redop], collective, where) if layout.redop is not None \
        else op_of(collective, "sum")  # no redop column: old all_gather/broadcast (none), else sum
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
        status, note = None, ""
        if layout.wrong is None:
            wrong: int | None = 0
        elif layout.wrong_label == "error":
            wrong, status, note = _old_error(tokens[offset + layout.wrong], where, f"{placement} error", dtype, nranks)
        else:
            wrong = _wrong_count(tokens[offset + layout.wrong], where, f"{placement} {layout.wrong_label}")
        algbw = _bandwidth(tokens[offset + layout.algbw], where, f"{placement} algbw") \
            if layout.algbw is not None else None
        busbw = _bandwidth(tokens[offset + layout.busbw], where, f"{placement} busbw") \
            if layout.busbw is not None else None
        found.append(Measurement(collective, dtype, op, count, placement, mean, time_us_min=low, time_us_max=high,
                                 n_wrong=wrong, iters=iters, algbw_gbps=algbw, busbw_gbps=busbw,
                                 time_decimals=_decimals(token), status=status, note=note, line=number))
    return found
