"""OSU micro-benchmarks: every blocking collective (allgather[v], allreduce, reduce_scatter, reduce, bcast,
alltoall[v], gather[v], scatter[v], barrier) and point-to-point latency, bandwidth and bi-directional
bandwidth, MPI or NCCL/RCCL (xccl) and their -d cuda/rocm variants, with or without ``-f`` (full stats),
as result rows.

Checked against the OMB sources (c/mpi/collective/blocking/*.c, c/mpi/pt2pt/standard/*.c and
c/util/osu_util_mpi.c of 7.x; mpi/collective/*.c, mpi/pt2pt/*.c of 5.x): "Size" is the byte length of
each rank's send buffer.
* allgather, alltoall, gather, scatter (and v): each rank contributes Size bytes (for alltoall: to
  each peer) -> count_per_rank = Size / type size, bytes_total = Size * nranks (nccl-tests' size);
* allreduce, reduce, bcast: Size is the whole vector -> count_per_rank = Size / type size = bytes_total;
* reduce_scatter: Size is the whole vector every rank sends (recvcounts split it over the ranks) ->
  count_per_rank = Size / type size / nranks. OSU spreads a remainder over the first ranks, so sizes
  not divisible into nranks equal parts are skipped.
* point-to-point (2 ranks): latency is OSU's one-way latency (half the round trip); bandwidth and
  bi-bandwidth print MB/s (10^6 B/s) of a window of messages: algbw is that figure / 1000 as printed,
  and the time the mean per message it implies (Size / bandwidth; bi-bandwidth: 2 x Size / it).
  Point-to-point rows have no bus bandwidth (none is defined).
OMB 7 prints ``# Datatype: MPI_CHAR.`` before each table (``-T`` may run several types in one
file); OMB 5 prints none (reductions MPI_FLOAT, the rest MPI_CHAR).
Collective runs do not say how many ranks ran: --nranks, else the launcher line of the log (``mpirun
-np 8``, ``srun -n 8``); point-to-point tests always run 2. The collective, the library family (MPI,
NCCL, RCCL) and the device come from the title (or the file name), and the import says so on stderr;
--collective, --library and --device override them. "Avg Latency" (each rank's mean over iterations,
averaged over ranks) goes into time_us_mean and, unless a P50 tail column is printed, time_us_p50;
Min/Max (``-f``) into time_us_min/max; ``P50/P95/P99 Tail Lat(us)`` into time_us_p50/p95/p99.

The file must hold OSU's own table header (``# Size  Avg Latency(us) ...``): rows are read only under
one, so another tool's numbers are never taken for latencies. Every value is checked where it is read
(BadInput at ``file:line``). Non-blocking, one-sided, multi-pair and message-rate tests are refused by
name (their figures are not one collective's time).
"""


from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from bench.errors import BadInput
from bench.importers import importer
from bench.importers.frontend import MAX_SEQUENCE, Part, head_text, name_hint, split_by_sizes, with_runs
from bench.importers.imported_row import ITEMSIZE, ImportOptions, Measurement
from bench.importers.input_files import OSU, NoResults, RowWidth, count, hint_of, time_us
from bench.importers.kinds import kind as kind_of
from bench.importers.kinds import op_of

#: "# OSU MPI Allgather Latency Test v7.4", "# OSU NCCL-CUDA Allreduce Latency Test", "# OSU MPI-CUDA Bandwidth Test"
TITLE = re.compile(r"#\s*OSU\s+(?P<body>.*?)\s*(?:\bTest\b|\bBenchmark\b)"
                   r"(?:\s+\(?(?:v|Version\s*)(?P<version>[\w.]+)\)?)?", re.IGNORECASE)
#: the library/device words of a title, before the benchmark's name
FAMILY = re.compile(r"^(?:(?:MPI|NCCL|RCCL|XCCL|CUDA|ROCm|HIP|OpenACC|Managed)[-_ ]?)+", re.IGNORECASE)
#: benchmark names in titles (lowercased, spaces and dashes as "_") -> collective; checked in order
BENCHMARKS = (
    ("one_sided", None), ("multi", None), ("message_rate", None), ("_mt", None),
    ("put", None), ("get", None), ("accumulate", None), ("compare_and_swap", None), ("fetch_and_op", None),
    ("reduce_scatter_block", None),
    ("allgatherv", "allgatherv"), ("allgather", "allgather"), ("allreduce", "allreduce"),
    ("reduce_scatter", "reduce_scatter"), ("alltoallv", "alltoallv"), ("all_to_allv", "alltoallv"),
    ("alltoall", "alltoall"), ("all_to_all", "alltoall"), ("broadcast", "broadcast"), ("bcast", "broadcast"),
    ("gatherv", "gatherv"), ("gather", "gather"), ("scatterv", "scatterv"), ("scatter", "scatter"),
    ("reduce", "reduce"), ("barrier", "barrier"),
    ("bi_directional_bandwidth", "p2p_bibw"), ("bidirectional_bandwidth", "p2p_bibw"), ("bibw", "p2p_bibw"),
    ("bandwidth", "p2p_bw"), ("latency", "p2p_latency"),
)
#: OMB table headers: "# Size  Avg Latency(us) ...", "# Size  Bandwidth (MB/s)", barrier's "# Avg Latency(us)"
TABLE_HEADER = re.compile(r"#\s*(?:Size\b|Avg\s+Latency)", re.IGNORECASE)
FILE_NAME = re.compile(r"osu_(?:xccl_)?(?P<nonblocking>i)?(allgatherv|allgather|allreduce|reduce_scatter|alltoallv|"
                       r"alltoall|bcast|reduce|gatherv|gather|scatterv|scatter|barrier|latency|bibw|bw)(?![a-z])",
                       re.IGNORECASE)
FILE_COLLECTIVE = {"bcast": "broadcast", "latency": "p2p_latency", "bw": "p2p_bw", "bibw": "p2p_bibw"}
DATATYPE = re.compile(r"#\s*Datatype:\s*MPI_(\w{1,40})", re.IGNORECASE)  # MPI_Type_get_name
DTYPES = {"char": "char", "signed_char": "int8", "unsigned_char": "uint8", "byte": "uint8", "int": "int32",
          "float": "float32", "double": "float64", "long": "int64", "long_long": "int64", "int64_t": "int64",
          "int32_t": "int32"}
#: OMB 5's types (no Datatype line): MPI_FLOAT for the reductions, MPI_CHAR for the rest
REDUCTIONS = ("allreduce", "reduce", "reduce_scatter")
#: the columns that hold latencies (us)
TIMES = ("avg", "min", "max", "p50", "p95", "p99")
#: a non-blocking test's columns (osu_util_mpi.c print_preamble_nbc): Overall(us) [Compute(us) Coll. Init(us)
#: MPI_Test(us) MPI_Wait(us)] Pure Comm.(us) Overlap(%)
NB_COLUMNS = {"overall": "overall", "compute": "compute", "coll_init": "init", "mpi_test": "test",
              "mpi_wait": "wait", "pure_comm": "pure", "overlap": "overlap"}
NONBLOCKING = re.compile(r"non[-\s]?blocking", re.IGNORECASE)
POINT_TO_POINT = ("p2p_latency", "p2p_bw", "p2p_bibw")
#: a launcher's rank count on a command line in the log: "mpirun -np 8", "srun -n 8", "--ntasks=8"
LAUNCH = re.compile(r"\b(?:mpirun|mpiexec(?:\.\w+)?|srun|orterun|aprun|jsrun|flux run)\b.*?"
                    r"(?:\s-(?:np?|c)\s*|\s--(?:np|n|ntasks)[= ])(\d{1,7})\b")


def impl_of(library: str) -> str:
    """The label of a library's OSU rows: osu- and its whole name in lower case, each run of other
    characters one dash (Cray MPICH: osu-cray-mpich), so MPIs whose names start alike stay apart."""
    slug = re.sub(r"[^\w]+", "-", library.lower()).strip("-")
    return f"osu-{slug or '-'.join(library.split())}"  # a name of symbols alone stays as given


def default_dtype(collective: str) -> str:
    return "float32" if collective in REDUCTIONS else "char"


def benchmark_of(title: str) -> tuple[str | None, str]:
    """(collective or None for a test not imported, the benchmark's words) of a title's body (a
    non-blocking one's collective: ``nonblocking_of`` says it is)."""
    words = FAMILY.sub("", title.strip()).strip()
    key = re.sub(r"[\s-]+", "_", words.lower()).removeprefix("non_blocking_")
    for name, collective in BENCHMARKS:
        if name in key:
            return collective, words
    return None, words


def scan(lines_of: Iterable[tuple[int, str]],
         sequence: list[tuple[int, tuple, int]] | None = None) -> tuple[re.Match | None, int, tuple[int, str] | None]:
    """The first pass: (the title, the number of table header lines, a launcher's rank count); each
    row's (line, table, Size) appended to ``sequence`` (two runs interleaved?)."""
    title = None
    headers = 0
    launched = None
    for number, line in lines_of:
        stripped = line.lstrip()
        if not stripped.startswith("#"):
            if launched is None and (found := LAUNCH.search(line)):
                launched = (int(found.group(1)), f"line {number}: {line.strip()[:60]!r}")
            elif sequence is not None and headers and stripped[:1].isdigit() and len(sequence) < MAX_SEQUENCE:
                size = stripped.split(None, 1)[0]
                if size.isdigit() and len(size) < 20:
                    sequence.append((number, (headers,), int(size)))
            continue
        if title is None and (found := TITLE.match(stripped)):
            title = found
        if TABLE_HEADER.match(stripped):
            headers += 1
    return title, headers, launched


def title_info(found: re.Match | None, source: str, options: ImportOptions) -> dict:
    """Collective, device, library family and OSU version from the title line."""
    body = found.group("body") if found else ""
    title = repr(found.group(0).strip()) if found else ""
    inferred = []
    mode = "nonblocking" if NONBLOCKING.search(body) else "blocking"
    if options.collective:
        collective = options.collective
    elif found:
        collective, words = benchmark_of(body)
        if collective is None:
            raise BadInput(source, f"{found.group(0).strip()[:80]!r}: not imported ({words!r} measures no single "
                                   "collective's or message's time: non-blocking overlap, one-sided, multi-pair "
                                   "or message-rate tests); pass --collective to override")
        inferred.append(f"collective={collective} from {title}")
    elif name := FILE_NAME.search(source):
        collective = FILE_COLLECTIVE.get(name.group(2).lower(), name.group(2).lower())
        inferred.append(f"collective={collective} from the file name {name.group(0)!r}")
        mode = "nonblocking" if name.group("nonblocking") else "blocking"
    elif hint := name_hint(source):
        collective = hint[0]
        inferred.append(f"collective={collective} from {hint[1]}")
    else:
        raise BadInput(source, "no '# OSU MPI <Benchmark> Test' title and no osu_<benchmark> file name: "
                               "pass --collective")
    family = FAMILY.match(body.strip())
    prefix = family.group(0) if family else ""
    xccl = next((lib for lib in ("NCCL", "RCCL") if lib in prefix.upper()), None)
    device = "rocm" if re.search(r"ROCM|RCCL|HIP", prefix, re.I) else "cuda" if re.search(r"CUDA|NCCL", prefix, re.I) \
        else "host"
    if found and not options.library:
        inferred.append(f"library={xccl or 'MPI'} from {title}")
    if found and not options.device:
        inferred.append(f"device={device} from {title}")
    if mode == "nonblocking":
        inferred.append(f"mode=nonblocking from {title or 'the file name'} (time: OSU's Pure Comm.)")
    return {"collective": collective, "xccl": xccl, "device": options.device or device, "inferred": inferred,
            "mode": mode,
            "osu_version": (found.group("version") or "")[:40] if found else ""}


def _columns(line: str) -> list[str]:
    """Column keys of a table header line, in print order: size, avg (``Avg Latency`` or the
    point-to-point ``Latency``), min, max, iterations, validation, p50/p95/p99, bw (``Bandwidth`` or
    ``Bi-Bandwidth`` MB/s), transmit (the -D derived-datatype column)."""
    if "Overall" in line:  # a non-blocking test's table
        labels = re.split(r"\s{2,}|\t", line.lstrip("#").strip())
        return ["size" if label.lower() == "size" else
                NB_COLUMNS.get(re.sub(r"\W+", "_", re.sub(r"\((?:us|%)\)", "", label.lower())).strip("_"), label)
                for label in labels]
    line = line.replace("Transmit Size", "Transmit")
    keys: list[str] = []
    for name in re.findall(r"\b(Size|Avg|Min|Max|Iterations|Validation|P\d+|Transmit|Bi-Bandwidth|Bandwidth|"
                           r"Latency)\b", line, re.IGNORECASE):
        name = name.lower()
        if name == "latency":  # "Avg Latency(us)" is one column; a bare "Latency (us)" is the mean
            if not keys or keys[-1] not in ("avg", "min", "max"):
                keys.append("avg")
        else:
            keys.append("bw" if name.endswith("bandwidth") else name)
    return keys


def _dtype(name: str, where: str) -> str:
    if name.lower() not in DTYPES:
        raise BadInput(where, f"Datatype: unknown OSU datatype MPI_{name}")
    return DTYPES[name.lower()]


def _count(collective: str, size: int, itemsize: int, nranks: int | None) -> int | None:
    """count_per_rank of a row of Size bytes (None: not a regular call of the collective)."""
    elements, left = divmod(size, itemsize)
    if left:
        return None
    if collective == "reduce_scatter":
        # uneven recvcounts (or fewer elements than ranks): not a regular reduce-scatter
        return elements // nranks if elements % nranks == 0 and elements >= nranks else None
    return elements


def parse_rows(numbered: Iterable[tuple[int, str]], collective: str, nranks: int | None, source: str,
               part: Part | None = None, notes: list[str] | None = None) -> Iterator[Measurement]:
    """Every table of the run, row by row; each ``# Datatype:`` line sets the type of the table
    after it, each header its columns. Rows count only under a header. The file's last line, cut
    without its line break, is left out and said in ``notes``."""
    dtype, columns = default_dtype(collective), None
    widths = RowWidth()
    for number, line in numbered:
        stripped = line.lstrip()
        if not stripped:
            continue
        if stripped[0] == "#":
            if datatype := DATATYPE.match(stripped):
                dtype = _dtype(datatype.group(1), f"{source}:{number}")
            elif TABLE_HEADER.match(stripped):
                columns = _columns(stripped)
                widths.reset()
                if not {"avg", "bw", "pure"} & set(columns) or "size" not in columns and collective != "barrier":
                    raise BadInput(f"{source}:{number}", f"table header without Size and a latency or bandwidth: "
                                                         f"{stripped[:80]!r}")
            continue
        tokens = stripped.split()
        if columns is None or not tokens[0][:1].isdigit():
            continue
        try:
            found = _row(tokens, columns, line, number, collective, dtype, nranks, source, part, widths)
        except BadInput as error:
            if part is None or notes is None:
                raise
            part.left_out(number, error, notes)
            continue
        if found is not None:
            yield found


def _row(tokens: list[str], columns: list[str], line: str, number: int, collective: str, dtype: str,
         nranks: int | None, source: str, part: Part | None, widths: RowWidth) -> Measurement | None:
    """One result row (None: not a regular call of the collective), each value checked."""
    where = f"{source}:{number}"
    if len(tokens) < len(columns):
        raise BadInput(where, f"{len(tokens)} values, but the header has {len(columns)} columns (a cut line?)")
    values = dict(zip(columns, tokens, strict=False))
    size = count(values["size"], where, "Size") if "size" in values else 0
    times = {name: time_us(values[name], where, f"{name.capitalize()} Latency") for name in TIMES if name in values}
    iterations = count(values["iterations"], where, "Iterations", 1) if "iterations" in values else 0
    per_rank = _count(collective, size, ITEMSIZE[dtype], nranks)
    if per_rank is None or per_rank < 1 and collective != "barrier":
        return None
    algbw = None
    if "bw" in values:  # MB/s: the time per message it implies (bi-directional: two messages)
        rate = time_us(values["bw"], where, "Bandwidth")
        times["avg"] = (2 if collective == "p2p_bibw" else 1) * size / rate
        algbw = rate / 1e3
    overlap: dict[str, float] = {}
    if "pure" in values:  # non-blocking: the cell's time is the pure time (post + wait), as a sweep's
        overlap = {name: time_us(values[name], where, f"{name.capitalize()}(us)", allow_zero=name == "compute")
                   for name in ("overall", "compute", "pure") if name in values}
        times["avg"] = overlap["pure"]
        if "overlap" in values:
            overlap["overlap"] = time_us(values["overlap"], where, "Overlap(%)", allow_zero=True)
    wrong = 1 if values.get("validation", "pass").lower().startswith("fail") else 0
    # its values read: now whether the row is whole (a cut one can read as other numbers)
    widths.check(line, where, [values[name] for name in (*TIMES, "bw", *NB_COLUMNS.values()) if name in values],
                 part is not None and part.cut_line == number and part.unterminated)
    found = Measurement(collective, dtype, op_of(collective, "sum"), per_rank, "out_of_place", times["avg"],
                        time_us_min=times.get("min"), time_us_max=times.get("max"), time_us_p50=times.get("p50"),
                        time_us_p95=times.get("p95"), time_us_p99=times.get("p99"), n_wrong=wrong,
                        iters=iterations, algbw_gbps=algbw, line=number)
    if "pure" in values:
        found.mode, found.pure_us = "nonblocking", overlap["pure"]
        found.overall_us, found.compute_us = overlap.get("overall"), overlap.get("compute")
        found.overlap_pct = overlap.get("overlap")
    return found


def _rows(part: Part, collective: str, nranks: int | None, first_bytes: bytes,
          notes: list[str]) -> Iterator[Measurement]:
    source, produced, table_rows = str(part), 0, 0
    for measurement in parse_rows(part.lines(), collective, nranks, source, part, notes):
        produced += 1
        yield measurement
    if produced:
        return
    if collective == "reduce_scatter":
        table_rows = sum(1 for _, line in part.lines() if re.match(r"\s*\d+\s+\d", line))
    if table_rows:
        raise BadInput(source, f"no size splits into {nranks} equal parts (OSU gives the remainder "
                               "to the first ranks): nothing comparable to import")
    raise NoResults(source, "no OSU result lines (# Size  Avg Latency(us) ...)" + hint_of(first_bytes, (OSU,)))


@importer("osu")
def osu(part: Part, options: ImportOptions) -> tuple[dict, Iterable[Measurement]]:
    source = str(part)
    first = head_text(part.path)
    sequence: list[tuple[int, tuple, int]] = []
    title, headers, launched = scan(part.lines(), sequence)
    if not headers:
        raise NoResults(source, "no OSU table header ('# Size  Avg Latency(us) ...'): not OSU micro-benchmarks "
                                "output" + hint_of(first, (OSU,)))
    info = title_info(title, source, options)
    collective = info["collective"]
    nranks = options.nranks
    if not nranks and collective in POINT_TO_POINT:
        nranks = 2  # OMB's point-to-point tests run on exactly two processes
        info["inferred"].append("nranks=2 (a point-to-point test)")
    elif not nranks and launched:
        nranks = launched[0]
        info["inferred"].append(f"nranks={nranks} from the launcher, {launched[1]}")
    if not nranks and (kind_of(collective).ranks_in_total or collective == "reduce_scatter"):
        # OMB prints its title, the datatype and the table, never the number of processes
        raise BadInput(source, "OSU output does not say how many ranks ran (OMB prints no rank count, and no "
                               "mpirun/srun line gives one): pass --nranks N")
    if not nranks:  # its bytes are the same at any rank count: the rows as printed, the count left empty
        info["inferred"].append(f"nranks unknown: OMB prints no rank count and no mpirun/srun line gives one; "
                                f"{collective}'s sizes do not depend on it: left empty (pass --nranks N to set it)")
    library = options.library or info["xccl"] or "MPI"
    impl = options.impl or impl_of(library)
    context = {
        "nranks": nranks, "hosts": [], "warmup": 0, "library": library, "device": info["device"],
        "library_version": options.library_version or "", "impl": impl,
        "transport": (info["xccl"] or "mpi").lower(), "tool_version": f"osu {info['osu_version']}".strip(),
        "inferred": info["inferred"], "nranks_unknown": not nranks,
    }
    interleaved = split_by_sizes(sequence, source, cut_line=part.cut_line if part.unterminated else None)
    if interleaved:
        context["interleaved"] = len(interleaved.starts)
        info["inferred"].append(interleaved.said())
    return context, with_runs(_rows(part, collective, nranks, first, info["inferred"]), interleaved)
