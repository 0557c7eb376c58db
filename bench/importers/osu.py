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
"""

from __future__ import annotations

import re

from bench.errors import BadInput
from bench.importers import importer
from bench.importers.rows import ITEMSIZE, ImportOptions, Measurement

TITLE = re.compile(r"#\s*OSU\s+(.*?)\s*(Allgather|Allreduce|Reduce[_ ]scatter(?:[_ ]block)?)\b.*?(?:v(\S+))?\s*$",
                   re.IGNORECASE | re.MULTILINE)
FILE_NAME = re.compile(r"osu_(?:xccl_)?(allgather|allreduce|reduce_scatter)", re.IGNORECASE)
DATATYPE = re.compile(r"#\s*Datatype:\s*MPI_(\w+)", re.IGNORECASE)  # MPI_Type_get_name
DTYPES = {"char": "char", "signed_char": "int8", "unsigned_char": "uint8", "int": "int32", "float": "float32",
          "double": "float64", "long": "int64", "long_long": "int64", "int64_t": "int64", "int32_t": "int32"}
DEFAULT_DTYPE = {"allgather": "char", "allreduce": "float32", "reduce_scatter": "float32"}


def _collective(name: str) -> str:
    name = name.lower().replace(" ", "_")
    return "reduce_scatter" if name.startswith("reduce_scatter") else name


def title_info(text: str, source: str, options: ImportOptions) -> dict:
    """Collective, device, library family and OSU version from the title line."""
    found = TITLE.search(text)
    prefix = found.group(1) if found else ""
    title = repr(found.group(0).strip()) if found else ""
    inferred = []
    if options.collective:
        collective = options.collective
    elif found:
        collective = _collective(found.group(2))
        inferred.append(f"collective={collective} from {title}")
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
            "osu_version": found.group(3) if found and found.group(3) else ""}


def _columns(line: str) -> list[str]:
    """Column keys of a ``# Size ...`` header line, in print order."""
    line = line.replace("Transmit Size", "Transmit")  # the -D (derived datatype) column
    return [name.lower() for name in re.findall(r"\b(Size|Avg|Min|Max|Iterations|Validation|P\d+|Transmit)\b", line)]


def _dtype(name: str, source: str) -> str:
    if name.lower() not in DTYPES:
        raise BadInput(source, f"Datatype: unknown OSU datatype MPI_{name}")
    return DTYPES[name.lower()]


def parse_rows(text: str, collective: str, nranks: int, source: str) -> list[Measurement]:
    """Every table of the file; each ``# Datatype:`` line sets the type of the table after it."""
    dtype, columns, found = DEFAULT_DTYPE[collective], ["size", "avg"], []
    for line in text.splitlines():
        if datatype := DATATYPE.match(line):
            dtype = _dtype(datatype.group(1), source)
            continue
        if re.match(r"#\s*Size\b", line):
            columns = _columns(line)
            continue
        tokens = line.split()
        if not tokens or line.lstrip().startswith("#") or not tokens[0].isdigit():
            continue
        values = dict(zip(columns, tokens, strict=False))
        elements = int(values["size"]) // ITEMSIZE[dtype]
        if collective == "reduce_scatter" and elements % nranks:
            continue  # uneven recvcounts (or fewer elements than ranks): not a regular reduce-scatter
        count = elements // nranks if collective == "reduce_scatter" else elements
        avg = _float(values.get("avg"))
        if count < 1 or avg is None:
            continue
        wrong = 1 if values.get("validation", "pass").lower().startswith("fail") else 0
        found.append(Measurement(collective, dtype, "sum", count, "out_of_place", avg,
                                 time_us_min=_float(values.get("min")), time_us_max=_float(values.get("max")),
                                 time_us_p50=_float(values.get("p50")), time_us_p95=_float(values.get("p95")),
                                 time_us_p99=_float(values.get("p99")),
                                 n_wrong=wrong, iters=int(values.get("iterations", 0) or 0)))
    return found


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


@importer("osu")
def osu(text: str, source: str, options: ImportOptions) -> tuple[list[Measurement], dict]:
    info = title_info(text, source, options)
    if not options.nranks:
        # OMB prints its title, the datatype and the table, never the number of processes
        raise BadInput(source, "OSU output does not say how many ranks ran (OMB prints no rank count): "
                               "pass --nranks N")
    measurements = parse_rows(text, info["collective"], options.nranks, source)
    if not measurements and info["collective"] == "reduce_scatter" and re.search(r"^\d+\s+\d", text, re.M):
        raise BadInput(source, f"no size splits into {options.nranks} equal parts (OSU gives the remainder "
                               "to the first ranks): nothing comparable to import")
    if not measurements:
        raise BadInput(source, "no OSU result lines (# Size  Avg Latency(us) ...)")
    library = options.library or info["xccl"] or "MPI"
    impl = options.impl or f"osu-{library.lower().split()[0]}"
    return measurements, {
        "nranks": options.nranks, "hosts": [], "warmup": 0, "library": library, "device": info["device"],
        "library_version": options.library_version or "", "impl": impl,
        "transport": (info["xccl"] or "mpi").lower(), "tool_version": f"osu {info['osu_version']}".strip(),
        "inferred": info["inferred"],
    }
