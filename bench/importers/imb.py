"""IMB-MPI1 (Intel MPI Benchmarks 3.x "Intel (R) MPI Benchmark Suite" to 2021.x): every benchmark
block of a log as result rows, each block (``# Benchmarking X`` / ``# #processes = N``) a part of the
run with its own rank count (``-npmin`` runs several in one file).

Checked against intel/mpi-benchmarks src_c (IMB_output.c: the table headers; IMB_g_info.c: the banner;
the benchmarks' sources for what ``#bytes`` is):
* Allreduce, Reduce, Reduce_local, Bcast: ``#bytes`` is the whole vector -> count_per_rank = #bytes /
  type size = bytes_total;
* Allgather(v), Gather(v), Scatter(v), Alltoall(v): each rank's contribution (alltoall: to each peer) ->
  count_per_rank = #bytes / type size, bytes_total x nranks;
* Reduce_scatter: the whole vector, split over the ranks with the remainder to the first ones ->
  count_per_rank = #bytes / type size / nranks, uneven sizes skipped; Reduce_scatter_block: the
  receive count of each rank (``s_num = size / s_size``) -> count_per_rank = #bytes / type size;
* PingPong, PingPing, Sendrecv, Exchange: one message of #bytes (no bus bandwidth is defined);
  Barrier: no bytes. Uniband/Biband print only rates (no time) and Multi- blocks run several groups at
  once: they are skipped, and meta.json says so.
Types: the banner's ``MPI_Datatype`` (MPI_BYTE) and ``MPI_Datatype for reductions`` (MPI_FLOAT); op its
``MPI_Op``. ``t_avg`` (the mean over ranks of each rank's mean) goes into time_us_mean and p50,
``t_min``/``t_max`` into time_us_min/max; PingPong/PingPing's ``t[usec]`` is the mean. ``-check``'s
``defects`` column above 0 makes the row ``wrong`` (a count IMB does not give: n_wrong stays empty).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from bench.errors import BadInput
from bench.importers import importer
from bench.importers.frontend import MAX_SEQUENCE, Part, name_hint, split_by_sizes, with_runs
from bench.importers.imported_row import ITEMSIZE, ImportOptions, Measurement
from bench.importers.input_files import NoResults, RowWidth, count, time_us
from bench.importers.kinds import kind as kind_of
from bench.importers.kinds import op_of

#: "#    Intel(R) MPI Benchmarks 2021.3, MPI-1 part", "#    Intel (R) MPI Benchmark Suite V3.2.4, MPI-1 part"
BANNER = re.compile(r"Intel\s?\(R\)\s+MPI\s+Benchmark(?:s|\s+Suite)?\s+V?(?P<version>[\w.]+(?:\s+Update\s+\d+)?)"
                    r"(?:,\s*(?P<part>[\w-]+)\s+part)?")
BLOCK = re.compile(r"^#\s*Benchmarking\s+(?P<multi>Multi-)?(?P<name>\w+)")
PROCESSES = re.compile(r"^#\s*#processes\s*=\s*(\d{1,9})")
HEADER = re.compile(r"^\s*(?:#bytes\s+)?#repetitions\s+")
DATATYPE = re.compile(r"^#\s*MPI_Datatype(?P<reductions>\s+for\s+reductions)?\s*:\s*MPI_(?P<name>\w+)")
OP = re.compile(r"^#\s*MPI_Op\s*:\s*MPI_(\w+)")
#: IMB's benchmark names -> the table's collective
BENCHMARKS = {"pingpong": "pingpong", "pingping": "pingping", "sendrecv": "imb_sendrecv", "exchange": "exchange",
              "allreduce": "allreduce", "reduce": "reduce", "reduce_local": "reduce_local",
              "reduce_scatter": "reduce_scatter", "reduce_scatter_block": "reduce_scatter",
              "allgather": "allgather", "allgatherv": "allgatherv", "gather": "gather", "gatherv": "gatherv",
              "scatter": "scatter", "scatterv": "scatterv", "alltoall": "alltoall", "alltoallv": "alltoallv",
              "bcast": "broadcast", "barrier": "barrier"}
#: IMB-NBC's non-blocking benchmarks (Iallreduce ...): the blocking one's collective, mode nonblocking; their
#: "_pure" blocks (the call without overlap, min/max/avg) are read as they are, also non-blocking
NONBLOCKING = {f"i{name}": collective for name, collective in BENCHMARKS.items()
               if name in ("allreduce", "reduce", "reduce_scatter", "allgather", "allgatherv", "gather", "gatherv",
                           "scatter", "scatterv", "alltoall", "alltoallv", "bcast", "barrier")}
#: what a part before the first block (the banner) says: not a skipped benchmark
NO_BLOCK = "no '# Benchmarking <benchmark>' block"
#: rate-only benchmarks (no time column): not one call's time
RATE_ONLY = ("uniband", "biband")
REDUCING = ("allreduce", "reduce", "reduce_local", "reduce_scatter", "reduce_scatter_block")
MPI_TYPES = {"byte": "uint8", "char": "char", "float": "float32", "double": "float64", "int": "int32",
             "long": "int64", "long_long": "int64"}
#: the header's columns -> Measurement fields
COLUMNS = {"#bytes": "size", "#repetitions": "iters", "t_min[usec]": "min", "t_max[usec]": "max",
           "t_avg[usec]": "avg", "t[usec]": "avg", "defects": "defects",
           # IMB-NBC: the overlapped call, the pure one, the computation, OSU-style overlap
           "t_ovrl[usec]": "overall", "t_pure[usec]": "pure", "t_CPU[usec]": "compute", "overlap[%]": "overlap"}


def _banner(lines_of: Iterable[tuple[int, str]], source: str) -> dict:
    """The run's shared facts from its banner: version, types, op (IMB's defaults where not printed)."""
    facts = {"version": "", "dtype": "uint8", "reduction_dtype": "float32", "op": "sum", "buffers": "warm"}
    for number, line in lines_of:
        stripped = line.strip()
        if BLOCK.match(stripped):
            break
        if stripped.startswith("# ") and " -off_cache" in stripped:  # the calling sequence: cold buffers
            facts["buffers"] = "cold"
        if not facts["version"] and (found := BANNER.search(stripped)):
            facts["version"] = found.group("version")[:40]
        elif found := DATATYPE.match(stripped):
            name = found.group("name").lower()
            if name not in MPI_TYPES:
                raise BadInput(f"{source}:{number}", f"MPI_Datatype: MPI_{found.group('name')[:40]} is not a type "
                                                     "pccl-bench reads")
            facts["reduction_dtype" if found.group("reductions") else "dtype"] = MPI_TYPES[name]
        elif found := OP.match(stripped):
            facts["op"] = found.group(1).lower()[:20]
    return facts


def _block(lines_of: Iterable[tuple[int, str]]) -> tuple[str, str, int | None, int]:
    """(benchmark name, Multi- or "", #processes, its line) of a part."""
    name, multi, processes, line = "", "", None, 0
    for number, text in lines_of:
        stripped = text.strip()
        if not name and (found := BLOCK.match(stripped)):
            name, multi, line = found.group("name"), found.group("multi") or "", number
        elif processes is None and (found := PROCESSES.match(stripped)):
            processes = int(found.group(1))
        elif HEADER.match(stripped):
            break
    return name, multi, processes, line


def _count(collective: str, block: str, size: int, itemsize: int, nranks: int | None) -> int | None:
    elements, left = divmod(size, itemsize)
    if left:
        return None
    if block == "reduce_scatter":  # the whole vector, remainder to the first ranks
        return elements // nranks if elements % nranks == 0 else None
    return 0 if collective == "barrier" else elements


def _rows(part: Part, collective: str, block: str, nranks: int | None, dtype: str, op: str,
          notes: list[str]) -> Iterator[Measurement]:
    """The block's rows; the file's last line, cut without its line break, left out and said in ``notes``."""
    source = str(part)
    columns: list[str] | None = None
    produced = 0
    uneven: list[str] = []  # Reduce_scatter sizes that do not split evenly over the ranks
    widths = RowWidth()
    for number, line in part.lines():
        stripped = line.strip()
        if not stripped:
            continue
        if HEADER.match(stripped):
            columns = [COLUMNS.get(label, label) for label in stripped.split()]
            widths.reset()
            if "avg" not in columns and "pure" not in columns:
                raise BadInput(f"{source}:{number}", f"an IMB table without a time column: {stripped[:80]!r}")
            if "size" not in columns and collective != "barrier":  # only Barrier moves no bytes
                raise BadInput(f"{source}:{number}", f"an IMB {block} table without #bytes: {stripped[:80]!r}")
            continue
        if columns is None or stripped.startswith("#") or not stripped[0].isdigit():
            continue
        try:
            found = _row(stripped.split(), columns, line, f"{source}:{number}", collective, block, nranks, dtype, op,
                         widths, part.cut_line == number and part.unterminated)
        except BadInput as error:
            part.left_out(number, error, notes)
            continue
        if found is not None:
            produced += 1
            found.line = number
            yield found
        elif block == "reduce_scatter" and nranks and stripped.split()[0] != "0":
            uneven.append(stripped.split()[0])
    if uneven:  # IMB gives the remainder to the first ranks: no one count per rank, so no cell
        notes.append(f"{len(uneven)} rows left out: {', '.join(uneven[:6])} B do not split evenly over {nranks} "
                     "ranks (IMB's Reduce_scatter gives the first ranks the remainder: no one count per rank)")
    if not produced:
        raise NoResults(source, f"no IMB result lines under '# Benchmarking {block}'")


def _row(tokens: list[str], columns: list[str], line: str, where: str, collective: str, block: str,
         nranks: int | None, dtype: str, op: str, widths: RowWidth, last: bool) -> Measurement | None:
    """One result row (None: nothing measured, or not a regular call), each value checked."""
    if len(tokens) < len(columns):
        raise BadInput(where, f"{len(tokens)} values, but the header has {len(columns)} columns (a cut line?)")
    values = dict(zip(columns, tokens, strict=False))
    size = count(values["size"], where, "#bytes") if "size" in values else 0
    iters = count(values["iters"], where, "#repetitions", 1)
    mean = time_us(values["avg" if "avg" in values else "pure"], where, "t_avg[usec]" if "avg" in values
                   else "t_pure[usec]", allow_zero=True)
    if mean == 0:
        return None  # nothing measured (a zero-byte call below the timer's resolution)
    per_rank = _count(collective, block, size, ITEMSIZE[dtype], nranks)
    if per_rank is None:
        return None
    low = time_us(values["min"], where, "t_min[usec]", allow_zero=True) if "min" in values else None
    high = time_us(values["max"], where, "t_max[usec]") if "max" in values else None
    status, note = None, ""
    if "defects" in values:
        defects = time_us(values["defects"], where, "defects", allow_zero=True)
        if defects:
            status, note = "wrong", f"IMB -check defects {values['defects']}"
    # its values read: now whether the row is whole (a cut one can read as other numbers)
    timed = ("min", "max", "avg", "overall", "pure", "compute", "overlap")
    widths.check(line, where, [values[name] for name in timed if name in values], last)
    found = Measurement(collective, dtype, op, per_rank, "out_of_place", mean, time_us_min=low, time_us_max=high,
                        n_wrong=None if status else 0, iters=iters, status=status, note=note)
    if "pure" in values:  # the cell's time is the pure call's (post + wait), as OSU's and a sweep's
        found.pure_us = mean
        found.overall_us = time_us(values["overall"], where, "t_ovrl[usec]", allow_zero=True) \
            if "overall" in values else None
        found.compute_us = time_us(values["compute"], where, "t_CPU[usec]", allow_zero=True) \
            if "compute" in values else None
        found.overlap_pct = time_us(values["overlap"], where, "overlap[%]", allow_zero=True) \
            if "overlap" in values else None
    return found


@importer("imb")
def imb(part: Part, options: ImportOptions) -> tuple[dict, Iterable[Measurement]]:
    """One ``# Benchmarking`` block of an IMB-MPI1 run (the run's banner gives the types and version)."""
    source = str(part)
    name, multi, processes, line = _block(part.lines())
    inferred = []
    if not name and (hint := _hinted_block(part, options)):  # a table pasted without its '# Benchmarking X'
        name, evidence = hint
        inferred.append(f"collective={BENCHMARKS[name.lower()]} from {evidence} (no '# Benchmarking' line)")
    if not name:
        raise NoResults(source, NO_BLOCK)
    block = name.lower()
    if block in RATE_ONLY or multi:
        raise NoResults(f"{source}:{line}", f"{multi}{name}: " + ("prints rates only, no time" if not multi else
                                                                   "several groups run at once") + ": not imported")
    nonblocking, pure = block.removesuffix("_pure") in NONBLOCKING, block.endswith("_pure")
    if nonblocking:  # IMB-NBC: the blocking benchmark's name and collective
        block = block.removesuffix("_pure")[1:]
    if block not in BENCHMARKS:
        raise NoResults(f"{source}:{line}", f"{name}: not an IMB-MPI1 or IMB-NBC benchmark pccl-bench reads")
    collective = options.collective or BENCHMARKS[block]
    nranks = options.nranks or processes
    if not nranks and (kind_of(collective).ranks_in_total or block == "reduce_scatter"):
        if not any(HEADER.match(text.strip()) for _, text in part.lines()):
            raise NoResults(f"{source}:{line}", f"'# Benchmarking {name}': the file ends before its table")
        raise BadInput(f"{source}:{line or 1}", f"'# Benchmarking {name}' without '# #processes = N', and "
                                                f"{collective}'s sizes depend on it: pass --nranks")
    facts = _banner((part.head or part).lines(), source)
    dtype = facts["reduction_dtype"] if block in REDUCING else facts["dtype"]
    if line:
        inferred.append(f"collective={collective} from '# Benchmarking {name}' (line {line})")
    if not options.nranks and nranks:
        inferred.append(f"nranks={nranks} from '# #processes = {processes}'")
    elif not nranks:
        inferred.append(f"nranks unknown: no '# #processes = N' line; {collective}'s sizes do not depend on it: "
                        "left empty (pass --nranks N to set it)")
    context = {"nranks": nranks, "hosts": [], "warmup": 0, "library": options.library or "MPI",
               "library_version": options.library_version or "", "impl": options.impl or "imb-mpi",
               "device": "host", "transport": "mpi", "tool_version": f"IMB {facts['version']}".strip(),
               "buffers": facts["buffers"],
               # MPI_Reduce_scatter_block is another call than MPI_Reduce_scatter of equal counts: its own cells
               # and IMB-NBC's _pure block (the call alone, its min/max/avg) another measurement than t_pure's
               "algorithm": "native:Reduce_scatter_block" if block == "reduce_scatter_block" else
               "native:pure" if nonblocking and pure else "native",
               "inferred": inferred, "nranks_unknown": not nranks}
    sequence = [(number, (), int(text.split(None, 1)[0])) for number, text in part.lines()
                if text.strip()[:1].isdigit() and text.split(None, 1)[0].isdigit() and len(text.split(None, 1)[0]) < 20]
    interleaved = split_by_sizes(sequence[:MAX_SEQUENCE], source, cut_line=part.cut_line if part.unterminated else None)
    if interleaved:
        context["interleaved"] = len(interleaved.starts)
        inferred.append(interleaved.said())
    if nonblocking:
        inferred.append(f"mode=nonblocking from '# Benchmarking {name}' (time: t_pure, or the _pure block's)")
    rows = _rows(part, collective, block, nranks, dtype, op_of(collective, facts["op"]), inferred)
    return context, with_runs(_nonblocking(rows) if nonblocking else rows, interleaved)


def _nonblocking(measurements: Iterator[Measurement]) -> Iterator[Measurement]:
    for measurement in measurements:
        measurement.mode = "nonblocking"
        yield measurement


def _hinted_block(part: Part, options: ImportOptions) -> tuple[str, str] | None:
    """(IMB benchmark name, evidence) of a part that holds an IMB table but no '# Benchmarking' line,
    from --collective or its file name's hint; None without a table (the banner before the first block)."""
    if not any(HEADER.match(text.strip()) for _, text in part.lines()):
        return None
    hint = (options.collective, "--collective") if options.collective else name_hint(str(part))
    if hint is None:
        raise BadInput(str(part), "an IMB table without its '# Benchmarking <benchmark>' line, and no collective in "
                                  "the file name: pass --collective")
    names = [name for name, collective in BENCHMARKS.items() if collective == hint[0]]
    if not names:
        raise BadInput(str(part), f"{hint[1]} names {hint[0]}, which IMB-MPI1 does not run: pass --collective")
    return names[0], hint[1]
