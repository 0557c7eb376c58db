"""OSU micro-benchmarks (osu_allgather, osu_reduce_scatter, osu_allreduce and their xccl/CUDA/ROCm
variants): the ``# Size  Avg Latency(us) [Min Max Iterations] [Validation]`` table as result rows.

OSU prints the size of each rank's send buffer, so (REFERENCE.md §3):
* osu_allgather: Size is the bytes each rank contributes -> nccl-tests size = Size * nranks;
* osu_allreduce: Size is the whole vector -> nccl-tests size = Size;
* osu_reduce_scatter: Size is the whole vector each rank reduces (MPI_Reduce_scatter's send buffer,
  split into nranks parts) -> nccl-tests size = Size; sizes below nranks elements are skipped.
The output does not say how many ranks ran: --nranks is required. "Avg Latency" (mean over
iterations and ranks) goes into time_us_p50 and time_us_mean; Min/Max (over ranks) into
time_us_min/time_us_max.
"""

from __future__ import annotations

import re

from bench.errors import BadInput
from bench.importers import importer
from bench.importers.rows import ITEMSIZE, ImportOptions, Measurement

TITLE = re.compile(r"#\s*OSU\s+(.*?)\s*(Allgather|Allreduce|Reduce[_ ]scatter(?:[_ ]block)?)\b.*?(?:v(\S+))?\s*$",
                   re.IGNORECASE | re.MULTILINE)
FILE_NAME = re.compile(r"osu_(?:xccl_)?(allgather|allreduce|reduce_scatter)", re.IGNORECASE)
DATATYPE = re.compile(r"#\s*Datatype:\s*MPI_(\w+)", re.IGNORECASE)
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
    if options.collective:
        collective = options.collective
    elif found:
        collective = _collective(found.group(2))
    elif name := FILE_NAME.search(source):
        collective = _collective(name.group(1))
    else:
        raise BadInput(source, "no '# OSU MPI <Collective> Latency Test' title; pass --collective")
    xccl = next((lib for lib in ("NCCL", "RCCL") if lib in prefix.upper()), None)
    device = "rocm" if re.search(r"ROCM|RCCL|HIP", prefix, re.I) else "cuda" if re.search(r"CUDA|NCCL", prefix, re.I) \
        else "host"
    return {"collective": collective, "xccl": xccl, "device": options.device or device,
            "osu_version": found.group(3) if found and found.group(3) else ""}


def _columns(text: str) -> list[str]:
    for line in text.splitlines():
        if re.match(r"#\s*Size\b", line):
            return [name.lower() for name in re.findall(r"(Size|Avg|Min|Max|Iterations|Validation|P\d+)", line)]
    return []


def parse_rows(text: str, collective: str, dtype: str, nranks: int) -> list[Measurement]:
    columns = _columns(text)
    found = []
    for line in text.splitlines():
        tokens = line.split()
        if not tokens or line.lstrip().startswith("#") or not tokens[0].isdigit():
            continue
        values = dict(zip(columns or ["size", "avg"], tokens, strict=False))
        size = int(values["size"])
        count = size // ITEMSIZE[dtype] // (nranks if collective == "reduce_scatter" else 1)
        if count < 1:
            continue
        wrong = 1 if values.get("validation", "pass").lower().startswith("fail") else 0
        found.append(Measurement(collective, dtype, "sum", count, "out_of_place", float(values["avg"]),
                                 time_us_min=_float(values.get("min")), time_us_max=_float(values.get("max")),
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
        raise BadInput(source, "OSU output does not say how many ranks ran: pass --nranks N")
    datatype = DATATYPE.search(text)
    dtype = DTYPES.get(datatype.group(1).lower(), "") if datatype else DEFAULT_DTYPE[info["collective"]]
    if not dtype:
        raise BadInput(source, f"unknown OSU datatype MPI_{datatype.group(1)}")
    measurements = parse_rows(text, info["collective"], dtype, options.nranks)
    if not measurements:
        raise BadInput(source, "no OSU result lines (# Size  Avg Latency(us) ...)")
    library = options.library or info["xccl"] or "MPI"
    impl = options.impl or f"osu-{library.lower().split()[0]}"
    return measurements, {
        "nranks": options.nranks, "hosts": [], "warmup": 0, "library": library, "device": info["device"],
        "library_version": options.library_version or "", "impl": impl,
        "transport": (info["xccl"] or "mpi").lower(), "tool_version": f"osu {info['osu_version']}".strip(),
    }
