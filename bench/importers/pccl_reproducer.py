"""The PCCL authors' reproducer (``axonn-ai/sc2025-pccl-reproducer``): Slurm logs and the shared CSV.

A log is one Slurm job of ``benchmark_all_gather.py`` / ``benchmark_reduce_scatter.py``::

    srun -N 8 -n 64 -c7 --ntasks-per-node=8 --gpus-per-node=8 python -u benchmark_all_gather.py
    output size = 1 MB
    Method = nccl
    All-gather bus bw for 64 GPUs is 0.702 GBPS for message output size 1.049 MB
    time = 1.470 ms

Size semantics: the announced ``output size`` (all-gather) / ``input size`` (reduce-scatter) is
the whole buffer in MiB (the benchmark multiplies by 2**20), i.e. nccl-tests' ``size``
(``bytes_total``); the bus-bandwidth line prints decimal MB, and for reduce-scatter the per-rank
output. Elements are bfloat16 (the benchmark's type). ``time`` is rank 0's mean over the timed
calls (10-20 after 5 warm-ups), so it lands in ``time_us_mean`` and ``time_us_p50`` with no samples.

Methods: ``nccl`` -> ``xccl`` (RCCL on Frontier, NCCL on Perlmutter); ``mpi`` -> ``mpi`` (Cray
MPICH: ``MPI_Allgather`` for all-gather; for reduce-scatter the benchmark's own recursive halving
over ``Sendrecv`` with partner rank XOR 1, 2, 4 ..., written as ``resolved_algorithm = rh-dd``, which
the model runs as bench/model/mpich.py's ``rh_distance_doubling``); ``hybrid*`` -> ``pccl-hier``
with the intra phase RCCL/NCCL (``xccl``) and the inter phase as the reproducer ran it: all-gather
``mpi`` (Cray MPICH's collective on the rail; ``xccl`` for ``hybrid-nccl-nccl``), reduce-scatter
``rd`` (recursive halving over MPI point-to-point).
Each job (file) is one repeat of its cells.
"""

from __future__ import annotations

import csv
import io
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench import __version__
from bench.errors import BadInput
from bench.importers.rows import Measurement, make_row
from bench.plan.cells import Cell
from bench.results.table import COLUMNS, SAMPLE_COLUMNS, SCHEMA_VERSION

#: GPUs (GCDs) and NIC counts per node, and the vendor library, of the reproducer's machines
MACHINES = {"frontier": {"gpus_per_node": 8, "device": "rocm", "xccl": "RCCL"},
            "perlmutter": {"gpus_per_node": 4, "device": "cuda", "xccl": "NCCL"}}
MPI_LIBRARY = "Cray MPICH"
DTYPE, ITEMSIZE_BYTES = "bfloat16", 2
MIB = 1 << 20

SRUN = re.compile(r"^\s*srun\b(?P<args>.*)$", re.MULTILINE)
ANNOUNCE = re.compile(r"^\s*(?:output|input) size = (?P<size>[\d.]+) MB\s*$")
METHOD = re.compile(r"^\s*Method = (?P<method>\S+)\s*$")
BUSBW = re.compile(r"^\s*(?P<coll>All-gather|Reduce scatter) bus bw for (?P<gpus>\d+) GPUs is (?P<busbw>[\d.eE+-]+) "
                   r"GBPS for message (?:output |input )?size (?P<printed>[\d.eE+-]+) MB\s*$")
TIME = re.compile(r"^\s*time = (?P<ms>[\d.eE+-]+) ms\s*$")
COLLECTIVES = {"All-gather": "allgather", "Reduce scatter": "reduce_scatter",
               "all-gather": "allgather", "reduce-scatter": "reduce_scatter"}


@dataclass(frozen=True)
class ReproRow:
    """One measured call of the reproducer, in its own terms."""

    machine: str
    source: str  # the job: log path, or dir/file of the CSV
    collective: str  # allgather | reduce_scatter
    method: str  # nccl | mpi | hybrid | hybrid-nccl-nccl | hybrid-nccl-mpi
    nranks: int
    nnodes: int | None
    bytes_total: int
    time_ms: float


def impl_of(method: str, collective: str, machine: str) -> dict:
    """impl, algorithm, intra, inter, library of a reproducer method (None: not one we know)."""
    vendor = MACHINES[machine]["xccl"]
    if method == "nccl":
        return {"impl": "xccl", "algorithm": "native", "intra": "", "inter": "", "library": vendor}
    if method == "mpi":  # reduce-scatter: the benchmark's own recursive halving, partner rank XOR 1, 2, 4 ...
        resolved = "rh-dd" if collective == "reduce_scatter" else "native"
        return {"impl": "mpi", "algorithm": "native", "intra": "", "inter": "", "library": MPI_LIBRARY,
                "resolved": resolved}
    if method in ("hybrid", "hybrid-nccl-mpi", "hybrid-nccl-nccl"):
        outer = "xccl" if method == "hybrid-nccl-nccl" else "mpi"
        inter = outer if collective == "allgather" else "rd"
        library = f"{vendor} (intra) + {vendor if outer == 'xccl' else MPI_LIBRARY} (inter)"
        return {"impl": "pccl-hier", "algorithm": "hier", "intra": "xccl", "inter": inter, "library": library}
    return {}


def _srun_shape(text: str) -> tuple[int | None, int | None]:
    """(nnodes, nranks) from the srun line (``-N``/``--nodes``, ``-n``/``--ntasks``)."""
    match = SRUN.search(text)
    if not match:
        return None, None
    args = match.group("args")
    nodes = re.search(r"(?:\s-N\s*|--nodes[= ])(\d+)", args)
    tasks = re.search(r"(?:\s-n\s*|--ntasks[= ])(\d+)", args)
    return (int(nodes.group(1)) if nodes else None), (int(tasks.group(1)) if tasks else None)


def machine_of_log(text: str, fallback: str | None) -> str | None:
    """frontier or perlmutter from what the log shows (host names, Perlmutter's ``-C gpu``)."""
    if fallback:
        return fallback
    if "frontier" in text.lower() or re.search(r"srun\b.*\s-c\s*7\b", text):
        return "frontier"
    if re.search(r"srun\b.*\s-C\s*gpu\b", text) or "perlmutter" in text.lower():
        return "perlmutter"
    return None


def parse_log(text: str, source: str, machine: str) -> tuple[list[ReproRow], list[str]]:
    """Rows of one Slurm log, and problems found (a bus-bw line without its time, ...)."""
    nnodes, nranks_srun = _srun_shape(text)
    rows, problems = [], []
    announced = method = None
    pending: re.Match | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if match := ANNOUNCE.match(line):
            announced = float(match.group("size"))
        elif match := METHOD.match(line):
            method = match.group("method")
        elif match := BUSBW.match(line):
            pending = match
        elif (match := TIME.match(line)) and pending is not None:
            gpus = int(pending.group("gpus"))
            if announced is None or method is None:
                problems.append(f"line {number}: a time before any 'Method =' / 'size =' line")
            else:
                rows.append(ReproRow(machine, source, COLLECTIVES[pending.group("coll")], method, gpus,
                                     nnodes if nranks_srun in (None, gpus) else None, round(announced * MIB),
                                     float(match.group("ms"))))
            pending = None
    return rows, problems


CSV_COLUMNS = ("machine", "dir", "file", "collective", "method", "gpus", "buffer_mb", "time_ms")


def parse_csv(text: str, source: str) -> list[ReproRow]:
    """Rows of the shared CSV (README of ../shared/data/pccl-reproducer): one per logged call."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [name for name in CSV_COLUMNS if name not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"missing column(s) {', '.join(missing)}")
    rows = []
    for line, record in enumerate(reader, 2):
        try:
            rows.append(ReproRow(record["machine"], f"{record['dir']}/{record['file']}",
                                 COLLECTIVES[record["collective"]], record["method"], int(record["gpus"]), None,
                                 round(float(record["buffer_mb"]) * MIB), float(record["time_ms"])))
        except (KeyError, ValueError) as error:
            raise ValueError(f"line {line}: {type(error).__name__} {error}") from None
    return rows


def _read_rows(path: Path, machine: str | None) -> list[ReproRow]:
    try:
        text = path.read_text(errors="replace")
    except OSError as error:
        raise BadInput(str(path), f"cannot read: {error.strerror or error}") from None
    if text.lstrip().startswith("machine,") or path.suffix == ".csv":
        try:
            rows = parse_csv(text, str(path))
        except ValueError as error:
            raise BadInput(str(path), str(error)) from None
    else:
        found = machine_of_log(text, machine)
        if found is None:
            raise BadInput(str(path), "cannot tell the machine (no Frontier/Perlmutter srun line): pass --machine")
        rows, problems = parse_log(text, str(path), found)
        if problems:
            raise BadInput(str(path), problems[0])
    if not rows:
        raise BadInput(str(path), "no '<Collective> bus bw for N GPUs ...' line followed by 'time = T ms'")
    return rows


def _row(item: ReproRow, run_id: str, repeat: int) -> dict:
    shape = MACHINES[item.machine]
    per_node = shape["gpus_per_node"] if item.nnodes is None else max(item.nranks // item.nnodes, 1)
    nnodes = item.nnodes or max(item.nranks // per_node, 1)
    per_node = min(per_node, item.nranks)
    names = impl_of(item.method, item.collective, item.machine)
    count = item.bytes_total // (ITEMSIZE_BYTES * item.nranks)
    m = Measurement(item.collective, DTYPE, "sum", count, "out_of_place", item.time_ms * 1e3)
    context = {"run_id": run_id, "suite": f"import:pccl-reproducer:{item.machine}", "launch_id": item.source,
               "timestamp": None, "impl": names["impl"], "device": shape["device"], "nranks": item.nranks,
               "nnodes": nnodes, "hosts": "", "library": names["library"], "library_version": "",
               "transport": "", "tool_version": f"pccl-reproducer ({item.method})", "warmup": 5}
    row = make_row(m, context, repeat)
    cell = Cell(collective=item.collective, impl=names["impl"], algorithm=names["algorithm"],
                intra=names["intra"], inter=names["inter"], device=shape["device"], nranks=item.nranks,
                nnodes=nnodes, ranks_per_node=per_node, virtual_nodes=False, dtype=DTYPE, op="sum",
                placement="out_of_place", count_per_rank=count, bytes_per_rank=count * ITEMSIZE_BYTES,
                bytes_total=item.bytes_total, timing_mode="sync", repeat=repeat)
    row.update(cell.to_dict(), resolved_algorithm=names.get("resolved", names["algorithm"]))
    return row


def import_reproducer(paths: list[Path], machine: str | None = None,
                      dirs: list[str] | None = None) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """(results, meta, samples) of reproducer logs / CSVs: one machine's rows, each job a repeat."""
    if machine is not None and machine not in MACHINES:
        raise BadInput("--machine", f"{machine!r}: expected one of {', '.join(MACHINES)}")
    rows: list[ReproRow] = []
    for path in paths:
        rows += _read_rows(path, machine)
    if machine:
        rows = [row for row in rows if row.machine == machine]
    if dirs:
        rows = [row for row in rows if row.source.rsplit("/", 1)[0].rsplit("/", 1)[-1] in dirs]
    machines = sorted({row.machine for row in rows})
    if len(machines) != 1:
        raise BadInput("--machine", f"the files hold rows of {machines or 'no machine'}: choose one with --machine"
                       + (" (or fewer --dir)" if dirs else ""))
    unknown = sorted({row.method for row in rows if not impl_of(row.method, row.collective, row.machine)})
    if unknown:
        raise BadInput(rows[0].source, f"method {unknown[0]!r} is not nccl, mpi or hybrid[-nccl-mpi|-nccl-nccl]")
    run_id = f"import-pccl-reproducer-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    seen: dict[tuple, int] = {}
    built = []
    for item in rows:  # each job is one repeat of its cells
        key = (item.collective, item.method, item.nranks, item.bytes_total)
        repeat = seen.get(key, 0)
        seen[key] = repeat + 1
        built.append(_row(item, run_id, repeat))
    results = pd.DataFrame(built, columns=COLUMNS)
    results["timestamp"] = pd.Timestamp.now(tz="UTC")
    meta = {"schema_version": SCHEMA_VERSION, "run_id": run_id, "suite": f"import:pccl-reproducer:{machines[0]}",
            "imported_from": [{"path": str(p)} for p in paths], "dirs": dirs or [], "tool_version": __version__,
            "started": time.time(), "finished": time.time(), "machine": {"name": machines[0]}, "env": {},
            "versions": {}, "note": ("imported: no per-iteration samples; time_us_p50 = time_us_mean = rank 0's "
                                     "mean over the timed calls; bytes_total = the announced buffer (MiB x 2**20)")}
    return results, meta, pd.DataFrame(columns=SAMPLE_COLUMNS)
