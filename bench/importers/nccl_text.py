"""An nccl-tests/rccl-tests text log, read twice line by line (200 MB in bounded memory): the first
pass reads the header facts (collective, ``#  Rank`` lines of every run, versions), the second the
result lines."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from bench.errors import BadInput
from bench.importers.frontend import (
    MAX_SEQUENCE,
    Interleaved,
    Part,
    RowShape,
    busbw_above_algbw,
    name_hint,
    ranks_from_bandwidth,
    shape_candidates,
    split_by_sizes,
)
from bench.importers.imported_row import ITEMSIZE, ImportOptions, Measurement
from bench.importers.input_files import NCCL_TESTS, NoResults, hint_of
from bench.importers.input_files import count as whole
from bench.importers.kinds import kind as kind_of
from bench.importers.nccl_fields import (
    DTYPES,
    MAX_RANKS,
    STARTING,
    TEST_NAME,
    choose_collective,
    decode_version,
)
from bench.importers.nccl_lines import (
    HEADER,
    columns_of,
    columns_without_header,
    layout_of,
    parse_data_line,
    with_blank_redop,
)

#: "#  Rank  0 Group  0 Pid  41721 on     nid001 device  0 [0x07] ..." (nccl-tests >= 2.13), and without
#: "Group N" (older nccl-tests, rccl-tests): bounded, a number of 5000 digits is no rank
RANK_LINE = re.compile(r"#\s*Rank\s+(\d{1,9})\s+(?:Group\s+\d+\s+)?Pid\s+(\d{1,12})\s+on\s+(\S{1,255})\s+device\s+\d+")
ITERS = re.compile(r"warmup iters:\s*(\d+)\s+iters:\s*(\d+)")
#: "NCCL version 2.18.5+cuda12.2" (NCCL_DEBUG=INFO), "RCCL version 2.20.5-HEAD:..." / "RCCL version : 2.20.5"
VERSION = re.compile(r"\b([NR]CCL) version\s*:?\s*(\d{1,4}\.\d{1,4}\.\d{1,4})")
LIBRARY_CODE = re.compile(r"nccl-library=(\d{1,9})")
#: "# nccl-tests version 2.13.8 ..." and rccl-tests' "rccl-tests: Version develop:4d8e1f2"
TOOL_VERSION = re.compile(r"#?\s*([nr]ccl-tests):? [Vv]ersion (\S{1,80})")
#: "# nThread 1 nGpus 4 ...": every process drives nThread * nGpus ranks
THREADS_GPUS = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")


@dataclass
class _Run:
    """The '#  Rank' lines of the run being read (from a '# nThread' line to the next)."""

    line: int
    pids: dict[int, set[str]] = field(default_factory=dict)
    hosts: set[str] = field(default_factory=set)


#: result lines whose shape and bandwidths are read for the collective and the rank count
MAX_SAMPLES = 512

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
    threads_line: str = ""  # that line whole (its sizes, iterations ...)
    run: _Run = field(default_factory=lambda: _Run(0))
    runs: int = 0  # runs with '#  Rank' lines
    rank_counts: dict[int, int] = field(default_factory=dict)  # '#  Rank' lines of a run -> its first run's line
    repeated: tuple[int, int, int] | None = None  # (rank, processes printing it, the run's line)
    alone: tuple[int, int] | None = None  # (processes each printing only '# Rank 0', the run's line)
    interleaved: tuple[int, int] | None = None  # (processes printing each of the ranks 0..n-1, the run's line)
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
    samples: list[list[str]] = field(default_factory=list)  # the first result lines' tokens (the row shape)
    sample_lines: list[int] = field(default_factory=list)  # their line numbers
    sequence: list[tuple[int, tuple, int]] = field(default_factory=list)  # (line, type and op, size) of each row

    def end_run(self, source: str) -> None:
        """Fold the run just read into the summary."""
        run = self.run
        if not run.pids:
            return
        self.runs += 1
        printers = {len(seen) for seen in run.pids.values()}
        if max(printers) > 1 and self.repeated is None and self.alone is None and self.interleaved is None:
            if set(run.pids) == {0}:  # N processes, each rank 0 of its own test
                self.alone = (len(run.pids[0]), run.line)
            elif len(printers) == 1 and sorted(run.pids) == list(range(len(run.pids))):
                # ranks 0..n-1 each printed by k processes: k runs of n ranks writing to one terminal
                self.interleaved = (next(iter(printers)), run.line)
            else:
                repeated = next(rank for rank, seen in sorted(run.pids.items()) if len(seen) > 1)
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
                    h.threads_line = stripped.lstrip("# ")[:200]
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
        elif h.tool is None and stripped.startswith("rccl-tests") and (found := TOOL_VERSION.match(stripped)):
            h.tool = f"{found.group(1)} {found.group(2)}"
        elif h.data_lines < MAX_SEQUENCE or (not h.rank_lines and len(h.implied) < 2):
            # the first result-looking lines, the rank count their sizes imply (rank lines lacking), and
            # their size sequence (two runs interleaved?)
            tokens = stripped.split(None, 4)
            if len(tokens) >= 3 and tokens[2] in DTYPES and tokens[0].isascii() and tokens[0].isdigit() \
                    and tokens[1].isascii() and tokens[1].isdigit() and len(tokens[0]) < 20 and len(tokens[1]) < 20:
                h.data_lines += 1
                if len(h.samples) < MAX_SAMPLES:
                    h.samples.append(stripped.split())
                    h.sample_lines.append(number)
                size, count = int(tokens[0]), int(tokens[1])
                if len(h.sequence) < MAX_SEQUENCE:  # a row's sequence: its type and op (-d all, -o all)
                    h.sequence.append((number, (tokens[2], tokens[3] if len(tokens) > 3 and tokens[3][:1].isalpha()
                                                else ""), size))
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
    if candidates or not h.samples:
        return choose_collective(candidates, source)
    return _shape_collective(h, source)


def _shapes(h: TextHeader) -> list[RowShape]:
    """The shape of each sampled result line (its layout from the header, else from its own columns)."""
    shapes = []
    for tokens in h.samples:
        columns = h.columns or (columns_without_header(tokens) if len(tokens) >= 4 else None)
        if not columns:
            continue
        preamble = columns[:next((i for i, c in enumerate(columns) if c in ("time", "cputime")), len(columns))]
        if "redop" in preamble:
            tokens = with_blank_redop(tokens, preamble.index("redop"))
        count = int(tokens[1])
        if not count or len(tokens) < len(preamble):
            continue
        ratio = int(tokens[0]) // (count * ITEMSIZE[DTYPES[tokens[2]]])
        redop = tokens[preamble.index("redop")] if "redop" in preamble else None
        root_token = tokens[preamble.index("root")] if "root" in preamble else None
        root = int(root_token) if root_token and root_token.lstrip("-").isdigit() else None
        block = columns[len(preamble):]
        pairs = []
        if "algbw" in block and "busbw" in block:
            width = len(block) // 2 if block.count("time") > 1 else len(block)
            for start in range(len(preamble), len(tokens) - width + 1, width):
                algbw, busbw = start + block.index("algbw"), start + block.index("busbw")
                if busbw < len(tokens) and algbw < len(tokens):
                    pairs.append((tokens[algbw], tokens[busbw]))
        shapes.append(RowShape(ratio, tokens[2], redop, root, tuple(pairs)))
    return shapes


def _shape_collective(h: TextHeader, source: str) -> tuple[str, str]:
    """The collective the rows' shape leaves, with the file name's hint where the shape allows two;
    BadInput naming the candidates where nothing decides."""
    shapes = _shapes(h)
    if not shapes:
        return choose_collective([], source)
    sized = [s for s in shapes if s.ratio > 1] or shapes  # a 1-rank gather has ratio 1 too
    candidates, said = shape_candidates(sized[0])
    for other in sized[1:]:
        if shape_candidates(other)[0] != candidates:
            raise BadInput(source, f"result lines of different shapes ({said}; {shape_candidates(other)[1]}): "
                                   "a log of several tests? import each on its own, or pass --collective")
    if len(candidates) > 1 and "allreduce" in candidates:  # sendrecv's busbw = algbw; all-reduce's only at 2 ranks
        pairs = [pair for s in shapes for pair in s.bandwidths]
        try:
            if ranks_from_bandwidth("allreduce", pairs)[0] not in (None, 2) or busbw_above_algbw(pairs):
                candidates = ["allreduce"]
                said += ", busbw above algbw (never so for sendrecv)"
        except ValueError:
            candidates = ["sendrecv"]
    hint = name_hint(source)
    if len(candidates) == 1:
        if hint and hint[0] != candidates[0]:
            raise BadInput(source, f"{hint[1]} says {hint[0]} but the rows are {candidates[0]} ({said}): "
                                   "pass --collective")
        return candidates[0], f"the row shape: {said}"
    if hint and hint[0] in candidates:
        return hint[0], f"{hint[1]} (the row shape, {said}, fits {' or '.join(candidates)})"
    raise BadInput(source, f"the row shape ({said}) fits {' or '.join(candidates)}"
                           + (f", not {hint[0]} as {hint[1]} says" if hint else "")
                           + f": pass --collective {candidates[0]} (or {', '.join(candidates[1:])})")


def separate_tests(tables: int, how: str) -> str:
    """The refusal of N 1-rank tests of one launch (a known trap: nccl-tests #27, #213)."""
    return (f"{tables} separate 1-rank tests ({how}): nccl-tests built without MPI=1 and started under mpirun, "
            "so every process ran a test of its own (nccl-tests #27, #213), not one test of "
            f"{tables} ranks; rebuild nccl-tests with MPI=1, or pass --nranks 1 to import them as {tables} runs "
            "of 1 rank")


def _text_ranks(h: TextHeader, source: str, collective: str,
                options: ImportOptions) -> tuple[int | None, str | None]:
    """(nranks, what it was read from; None when --nranks gave it); nranks None where nothing tells and
    the rows do not need it (their bytes are the same at any rank count)."""
    if options.nranks:
        return options.nranks, None
    if h.alone is not None:
        processes, line = h.alone
        raise BadInput(f"{source}:{line}", separate_tests(processes, f"each printing only '# Rank  0' ({processes} "
                                                                      "Pids)"))
    if h.repeated is not None:
        rank, processes, line = h.repeated
        raise BadInput(source, f"'# Rank {rank:2d}' is printed by {processes} processes"
                               + (f" in the run from line {line}" if h.runs > 1 else "")
                               + ", the other ranks not as often: several runs (or processes) wrote to one "
                                 "terminal; import each run's lines on their own (or pass --nranks)")
    if h.runs > 1 and h.rank_counts == {1: next(iter(h.rank_counts.values()))} and h.threads_gpus \
            and h.threads_gpus[1] == 1:
        raise BadInput(source, separate_tests(h.runs, "each with one '# Rank  0' line"))
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
        if h.interleaved:
            evidence += f", each printed by {h.interleaved[0]} processes (runs writing to one terminal)"
        return nranks, evidence
    spread = kind_of(collective).ranks_in_total
    pairs = [pair for shape in _shapes(h) for pair in shape.bandwidths]
    try:
        from_bandwidth, rows = ranks_from_bandwidth(collective, pairs)
    except ValueError:  # the printed bandwidths fit no one count: they decide nothing
        from_bandwidth, rows = None, 0
    if spread and len(h.implied) == 1 and next(iter(h.implied)) >= 1:
        implied = next(iter(h.implied))
        if from_bandwidth is not None and from_bandwidth != implied:
            raise BadInput(source, f"size/count says {implied} ranks but busbw/algbw says {from_bandwidth}: "
                                   "pass --nranks (or --collective)")
        return implied, "size / (count * type size) of the result lines"
    if from_bandwidth is not None:
        factor = "2(n-1)/n" if kind_of(collective).busbw_scale == 2 else "(n-1)/n"
        return from_bandwidth, f"busbw/algbw = {factor} in {rows} result lines"
    if spread:  # bytes_total depends on the rank count: no row could be written without it
        raise BadInput(source, "cannot tell how many ranks ran (no '#  Rank N ... device' lines, and the sizes "
                               "do not tell): pass --nranks")
    # the bytes do not depend on it (all-reduce, broadcast, reduce, sendrecv): the rows are what the
    # table says, the rank count left empty rather than guessed (a gate across runs refuses such cells)
    return None, (f"no '#  Rank N ... device' lines, {collective} sizes do not tell, and "
                  f"{_undecided(collective, pairs)}: left empty (pass --nranks N to set it)")


def _undecided(collective: str, pairs: list[tuple[str, str]]) -> str:
    """Why the printed bandwidths leave the rank count open."""
    if not kind_of(collective).spread:
        return f"{collective}'s busbw is its algbw at any rank count"
    if not pairs:
        return "the rows print no busbw/algbw"
    if all(_zero(busbw) for _, busbw in pairs):
        return f"every busbw is printed as 0.00 ({len(pairs)} values)"
    return f"the printed busbw/algbw digits of {len(pairs)} values fit more than one rank count"


def _zero(token: str) -> bool:
    try:
        return float(token) == 0
    except ValueError:
        return False


def parse_text_file(part: Part, options: ImportOptions, kind: str,
                    first_bytes: bytes = b"") -> tuple[dict, Iterator[Measurement]]:
    """(context, the result lines' measurements as they are read) of a text log's run, in two passes."""
    source = str(part)
    h = scan_text(part.lines(), source)
    _without_cut_sample(h, part.cut_line)
    if h.tool and h.tool.startswith("rccl") and kind == "nccl-tests":
        kind = "rccl-tests"  # its library when no version line names one
    if not h.data_lines:
        raise NoResults(source, f"no {kind} result lines (size count type redop ... time algbw busbw #wrong)"
                               + hint_of(first_bytes, (NCCL_TESTS,)))
    collective, collective_from = _text_collective(h, source, options)
    nranks, ranks_from = _text_ranks(h, source, collective, options)
    interleaved = split_by_sizes(h.sequence, source, doubles=h.interleaved is None and h.alone is None,
                                 cut_line=part.cut_line if part.unterminated else None)
    if nranks is not None and nranks > MAX_RANKS:
        raise BadInput(source, f"{nranks} ranks: more than any machine runs ({MAX_RANKS})")
    library, version = _library_of(h, kind)
    inferred = [f"collective={collective} from {collective_from}"] if collective_from else []
    if ranks_from:
        inferred.append(f"nranks={nranks} from {ranks_from}" if nranks is not None else f"nranks unknown: {ranks_from}")
    if interleaved:
        inferred.append(interleaved.said())
    if not options.library:
        evidence = repr(h.version[2]) if h.version else repr(h.code[1]) if h.code else f"the tool ({kind})"
        inferred.append(f"library={f'{library} {version}'.strip()} from {evidence}")
    alone = nranks == 1 and ranks_from is not None and h.rank_lines == 1 and h.runs == 1 and h.threads_gpus \
        and h.threads_gpus[1] == 1
    context = {"nranks": nranks, "nranks_unknown": nranks is None,
               # a 1-rank test: N of them alike in one file are N processes of an nccl-tests without MPI
               "alone": (h.threads_line, h.starting[0] if h.starting else "") if alone else None,
               "hosts": sorted(h.hosts), "nnodes": h.max_hosts or None,
               "warmup": h.iters[0], "iters": h.iters[1], "library": library, "library_version": version,
               "tool_version": h.tool or kind, "inferred": inferred,
               "interleaved": len(interleaved.starts) if interleaved else 0}
    return context, text_rows(part, h, collective, nranks, kind, first_bytes, interleaved, inferred)


def _without_cut_sample(h: TextHeader, cut_line: int | None) -> None:
    """The file's last line, with fewer values than the row before it, is a cut row: not a row shape of
    its own (the second pass leaves it out and says so)."""
    if cut_line is None or len(h.sample_lines) < 2 or h.sample_lines[-1] != cut_line:
        return
    if len(h.samples[-1]) < len(h.samples[-2]):
        h.samples.pop()
        h.sample_lines.pop()


def _library_of(h: TextHeader, kind: str) -> tuple[str, str]:
    library = h.version[0] if h.version else ("RCCL" if kind == "rccl-tests" else "NCCL")
    version = h.version[1] if h.version else (decode_version(h.code[0]) if h.code else "")
    return library, version


def text_rows(part: Part, h: TextHeader, collective: str, nranks: int | None, kind: str,
              first_bytes: bytes = b"", interleaved: Interleaved | None = None,
              notes: list[str] | None = None) -> Iterator[Measurement]:
    """The second pass: every result line's measurements, each checked (BadInput at file:line); each
    with its run's index where runs are ``interleaved``."""
    source = str(part)
    # no header (a pasted excerpt): each line's columns from its shape
    layout = layout_of(h.columns, f"{source}:{h.header_line}") if h.columns else None
    iters = h.iters[1]
    produced = 0
    width = 1 << 20  # of the last result row (a first row that ends the file unterminated is refused)
    for number, line in part.lines():
        stripped = line.lstrip()
        if not stripped:
            continue
        if stripped[0] == "#":
            if HEADER.match(stripped):  # a later run may print another layout (-I, -S)
                layout = layout_of(columns_of(stripped), f"{source}:{number}")
            continue
        try:
            found = parse_data_line(line, layout, collective, nranks, f"{source}:{number}", iters, number)
            if found and number == part.cut_line and (len(line.rstrip()) < width if produced else part.unterminated):
                # the file's last line, shorter than the row before (nccl-tests prints fixed-width rows;
                # the first row has none before it: cut if the file ends inside it), whatever it now reads as
                raise BadInput(f"{source}:{number}", "shorter than the row before it")
        except BadInput as error:  # the file's last line, cut: left out and said; any other refused
            part.left_out(number, error, notes if notes is not None else [])
            continue
        if not found and number == part.cut_line and notes is not None and stripped[:1].isdigit():
            notes.append(f"line {number} left out: the file's last line, cut inside it "
                         f"({stripped[:60]!r})")
        if found:
            width = len(line.rstrip())
            if interleaved:
                for measurement in found:
                    measurement.run = interleaved.run_of_line.get(number, 0)
        produced += len(found)
        yield from found
    if not produced and notes and notes[-1].startswith(f"line {part.cut_line} left out"):
        reason = notes[-1].split(" (", 1)[-1].rstrip(")")
        raise NoResults(f"{source}:{part.cut_line}", f"{reason}; it is the only result line, and the file's last: "
                                                     "cut inside it? nothing else to import")
    if not produced:
        raise NoResults(source, f"no {kind} result lines (size count type redop ... time algbw busbw #wrong)"
                               + hint_of(first_bytes, (NCCL_TESTS,)))
