"""OSU micro-benchmarks (osu_allgather, osu_reduce_scatter, osu_allreduce and their NCCL/CUDA/ROCm
variants): the ``# Size  Avg Latency(us) [Min Max Iterations] [Validation] [Pxx Tail Lat(us)]`` table
as result rows.

Checked against the OMB sources (c/mpi/collective/blocking/*.c and c/util/osu_util_mpi.c of 7.x,
mpi/collective/*.c of 5.x; see docs/PLOTS.md): "Size" is the byte length of each rank's send buffer.
* osu_allgather: each rank contributes Size bytes (MPI_Allgather sendcount = Size / type size)
  -> bytes_total = Size * nranks, count_per_rank = Size / type size;
* osu_allreduce: Size is the whole vector -> bytes_total = Size, count_per_rank = Size / type size;
* osu_reduce_scatter: Size is the whole vector every rank sends (MPI_Reduce_scatter with recvcounts
  splitting it over the ranks) -> bytes_total = Size, count_per_rank = Size / type size / nranks.
  OSU spreads a remainder over the first ranks (and gives 1 element to each rank when there are
  fewer elements than ranks), so sizes not divisible into nranks equal parts are skipped.
OMB 7 prints ``# Datatype: MPI_CHAR.`` before each table (``-T`` may run several types in one
file); OMB 5 prints none (allgather MPI_CHAR, allreduce and reduce_scatter MPI_FLOAT).
The output does not say how many ranks ran: --nranks is required. The collective, the library
family (MPI, NCCL, RCCL) and the device come from the title (or the file name), and the
import says so on stderr; --collective, --library and --device override them. "Avg Latency" (each rank's
mean over iterations, averaged over ranks) goes into time_us_mean and, unless a P50 tail column
is printed, time_us_p50; Min/Max (the smallest/largest rank mean, ``-f``) into time_us_min/max;
``P50/P95/P99 Tail Lat(us)`` (percentiles over iterations of the rank-averaged latency) into
time_us_p50/p95/p99.

The file must hold OSU's own table header (``# Size  Avg Latency(us) ...``): rows are read only
under one, so another tool's numbers (an nccl-tests count, IMB's #repetitions) are never taken for
latencies. Every value is checked where it is read (BadInput at ``file:line``).
"""


from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from bench.errors import BadInput
from bench.importers import importer
from bench.importers.inputs import OSU, count, head, hint_of, lines, not_this_format, time_us
from bench.importers.rows import ITEMSIZE, ImportOptions, Measurement

TITLE = re.compile(r"#\s*OSU\s+(.*?)\s*(Allgather|Allreduce|Reduce[_ ]scatter(?:[_ ]block)?)\b.*?(?:v(\S+))?\s*$",
                   re.IGNORECASE)
#: any OMB title ("# OSU MPI Bcast Latency Test v7.4"): a test pccl-bench does not compare when TITLE fails
ANY_TITLE = re.compile(r"#\s*OSU\b.*\bTest\b", re.IGNORECASE)
#: OMB's table header: "# Size       Avg Latency(us) [Min Latency(us) Max Latency(us) Iterations] ..."
TABLE_HEADER = re.compile(r"#\s*Size\b.*\bLatency\b", re.IGNORECASE)
FILE_NAME = re.compile(r"osu_(?:xccl_)?(allgather|allreduce|reduce_scatter)", re.IGNORECASE)
DATATYPE = re.compile(r"#\s*Datatype:\s*MPI_(\w{1,40})", re.IGNORECASE)  # MPI_Type_get_name
DTYPES = {"char": "char", "signed_char": "int8", "unsigned_char": "uint8", "int": "int32", "float": "float32",
          "double": "float64", "long": "int64", "long_long": "int64", "int64_t": "int64", "int32_t": "int32"}
DEFAULT_DTYPE = {"allgather": "char", "allreduce": "float32", "reduce_scatter": "float32"}
#: the columns that hold latencies (us)
TIMES = ("avg", "min", "max", "p50", "p95", "p99")


def _collective(name: str) -> str:
    name = name.lower().replace(" ", "_")
    return "reduce_scatter" if name.startswith("reduce_scatter") else name


def scan(path: Path) -> tuple[re.Match | None, str | None, int]:
    """The first pass: (the first title TITLE matches, the first other OMB title, the number of
    table header lines)."""
    title = other = None
    headers = 0
    for _, line in lines(path):
        if not line.lstrip().startswith("#"):
            continue
        if title is None and (found := TITLE.search(line)):
            title = found
        elif other is None and ANY_TITLE.search(line):
            other = line.strip()[:80]
        if TABLE_HEADER.match(line.lstrip()):
            headers += 1
    return title, other, headers


def title_info(found: re.Match | None, source: str, options: ImportOptions, other: str | None = None) -> dict:
    """Collective, device, library family and OSU version from the title line."""
    prefix = found.group(1) if found else ""
    title = repr(found.group(0).strip()) if found else ""
    inferred = []
    if options.collective:
        collective = options.collective
    elif found:
        collective = _collective(found.group(2))
        inferred.append(f"collective={collective} from {title}")
    elif other:
        raise BadInput(source, f"{other!r} is not a test of a collective pccl-bench compares (allgather, "
                               "reduce_scatter, allreduce); pass --collective to override")
    elif name := FILE_NAME.search(source):
        collective = _collective(name.group(1))
        inferred.append(f"collective={collective} from the file name {name.group(0)!r}")
    else:
        raise BadInput(source, "no '# OSU MPI <Collective> Latency Test' title and no osu_<collective> file "
                               "name: pass --collective")
    xccl = next((lib for lib in ("NCCL", "RCCL") if lib in prefix.upper()), None)
    device = "rocm" if re.search(r"ROCM|RCCL|HIP", prefix, re.I) else "cuda" if re.search(r"CUDA|NCCL", prefix, re.I) \
        else "host"
    if found and not options.library:
        inferred.append(f"library={xccl or 'MPI'} from {title}")
    if found and not options.device:
        inferred.append(f"device={device} from {title}")
    return {"collective": collective, "xccl": xccl, "device": options.device or device, "inferred": inferred,
            "osu_version": found.group(3)[:40] if found and found.group(3) else ""}


def _columns(line: str) -> list[str]:
    """Column keys of a ``# Size ...`` header line, in print order."""
    line = line.replace("Transmit Size", "Transmit")  # the -D (derived datatype) column
    return [name.lower() for name in re.findall(r"\b(Size|Avg|Min|Max|Iterations|Validation|P\d+|Transmit)\b", line)]


def _dtype(name: str, where: str) -> str:
    if name.lower() not in DTYPES:
        raise BadInput(where, f"Datatype: unknown OSU datatype MPI_{name}")
    return DTYPES[name.lower()]


def parse_rows(numbered: Iterable[tuple[int, str]], collective: str, nranks: int, source: str) -> Iterator[Measurement]:
    """Every table of the file, row by row; each ``# Datatype:`` line sets the type of the table
    after it, each ``# Size ...`` header its columns. Rows count only under a header."""
    dtype, columns = DEFAULT_DTYPE[collective], None
    for number, line in numbered:
        stripped = line.lstrip()
        if not stripped:
            continue
        if stripped[0] == "#":
            if datatype := DATATYPE.match(stripped):
                dtype = _dtype(datatype.group(1), f"{source}:{number}")
            elif TABLE_HEADER.match(stripped):
                columns = _columns(stripped)
                if "size" not in columns or "avg" not in columns:
                    raise BadInput(f"{source}:{number}", f"table header without Size and Avg Latency: "
                                                         f"{stripped[:80]!r}")
            continue
        tokens = stripped.split()
        if columns is None or not tokens[0].isdigit():
            continue
        where = f"{source}:{number}"
        if len(tokens) < len(columns):
            raise BadInput(where, f"{len(tokens)} values, but the header has {len(columns)} columns (a cut line?)")
        values = dict(zip(columns, tokens, strict=False))
        size = count(values["size"], where, "Size")
        times = {name: time_us(values[name], where, f"{name.capitalize()} Latency") for name in TIMES if name in values}
        iterations = count(values["iterations"], where, "Iterations", 1) if "iterations" in values else 0
        elements = size // ITEMSIZE[dtype]
        if collective == "reduce_scatter" and elements % nranks:
            continue  # uneven recvcounts (or fewer elements than ranks): not a regular reduce-scatter
        per_rank = elements // nranks if collective == "reduce_scatter" else elements
        if per_rank < 1:
            continue
        wrong = 1 if values.get("validation", "pass").lower().startswith("fail") else 0
        yield Measurement(collective, dtype, "sum", per_rank, "out_of_place", times["avg"],
                          time_us_min=times.get("min"), time_us_max=times.get("max"), time_us_p50=times.get("p50"),
                          time_us_p95=times.get("p95"), time_us_p99=times.get("p99"), n_wrong=wrong,
                          iters=iterations)


def _rows(path: Path, collective: str, nranks: int, first_bytes: bytes) -> Iterator[Measurement]:
    source, produced, table_rows = str(path), 0, 0
    for measurement in parse_rows(lines(path), collective, nranks, source):
        produced += 1
        yield measurement
    if produced:
        return
    if collective == "reduce_scatter":
        table_rows = sum(1 for _, line in lines(path) if re.match(r"\s*\d+\s+\d", line))
    if table_rows:
        raise BadInput(source, f"no size splits into {nranks} equal parts (OSU gives the remainder "
                               "to the first ranks): nothing comparable to import")
    raise BadInput(source, "no OSU result lines (# Size  Avg Latency(us) ...)" + hint_of(first_bytes, (OSU,)))


@importer("osu")
def osu(path: Path, options: ImportOptions) -> tuple[dict, Iterable[Measurement]]:
    source = str(path)
    first = head(path)
    if refused := not_this_format(path, first, "osu", (OSU,)):
        raise refused
    title, other, headers = scan(path)
    if not headers:
        raise BadInput(source, "no OSU table header ('# Size  Avg Latency(us) ...'): not OSU micro-benchmarks "
                               "output" + hint_of(first, (OSU,)))
    info = title_info(title, source, options, other)
    if not options.nranks:
        # OMB prints its title, the datatype and the table, never the number of processes
        raise BadInput(source, "OSU output does not say how many ranks ran (OMB prints no rank count): "
                               "pass --nranks N")
    library = options.library or info["xccl"] or "MPI"
    impl = options.impl or f"osu-{library.lower().split()[0]}"
    context = {
        "nranks": options.nranks, "hosts": [], "warmup": 0, "library": library, "device": info["device"],
        "library_version": options.library_version or "", "impl": impl,
        "transport": (info["xccl"] or "mpi").lower(), "tool_version": f"osu {info['osu_version']}".strip(),
        "inferred": info["inferred"],
    }
    return context, _rows(path, info["collective"], options.nranks, first)
