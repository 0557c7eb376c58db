"""The PCCL authors' reproducer (``axonn-ai/sc2025-pccl-reproducer``): Slurm logs and the shared CSV.

A log is one Slurm job of ``benchmark_all_gather.py`` / ``benchmark_reduce_scatter.py``::

    srun -N 8 -n 64 -c7 --ntasks-per-node=8 --gpus-per-node=8 python -u benchmark_all_gather.py
    output size = 1 MB
    Method = nccl
    All-gather bus bw for 64 GPUs is 0.702 GBPS for message output size 1.049 MB
    time = 1.470 ms

The reproducer's current scripts (``benchmark_raw_collectives/all_gather.py`` / ``reduce_scatter.py``,
branch develop) print, per size, ``output size = N MB`` then ``time_<library> = T ms`` (library
``xccl``, ``mpi``, ``pccl_cpp_ring``, ``pccl_cpp_rec``, ``pccl_py_ring``, ``pccl_py_rec``; the collective
from the script named on the launch line), and write ``data/<collective>/<machine>/gpus_N_slurm_J.csv``
with the columns ``gpu_count,slurm_job_id,output_size,unit,time_<library>``: both are read too.
Their all-gather runs bfloat16 unless ``--dtype fp32`` is on the launch line (the CSV cannot say);
their reduce-scatter float32. ``xccl`` is the vendor library, ``mpi`` Cray MPICH (reduce-scatter: the
C++ backend's recursive halving, the default), ``pccl_*`` PCCL's 2-D composition: inner xccl, outer
MPI (all-gather ``_ring``: MPI_Allgather; ``_rec`` and reduce-scatter: recursive doubling/halving
over MPI point-to-point); the Python backend (``_py``) is its own algorithm name, ``hier-py``.

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

Logs and the CSV are read line by line; every number is checked where it is read (BadInput at
``file:line``): sizes, times, GPU counts and the srun shape must be finite and positive, machines
one of MACHINES.
"""

from __future__ import annotations

import csv
import math
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from bench import __version__
from bench.errors import BadInput
from bench.importers import importer
from bench.importers.frontend import numbered
from bench.importers.imported_row import ImportOptions, Measurement, make_row
from bench.importers.input_files import INT64_MAX, REPRODUCER_CSV, REPRODUCER_LOG, check_input, head, hint_of, lines
from bench.importers.input_files import count as whole
from bench.importers.kinds import op_of
from bench.plan.cells import Cell
from bench.results.table import COLUMNS, SAMPLE_COLUMNS, SCHEMA_VERSION

#: GPUs (GCDs) and NIC counts per node, and the vendor library, of the reproducer's machines
MACHINES = {"frontier": {"gpus_per_node": 8, "device": "rocm", "xccl": "RCCL"},
            "perlmutter": {"gpus_per_node": 4, "device": "cuda", "xccl": "NCCL"}}
MPI_LIBRARY = "Cray MPICH"
#: the published logs' type (benchmark_all_gather.py / benchmark_reduce_scatter.py)
DTYPE = "bfloat16"
#: the current scripts' types: all-gather bf16 (or --dtype fp32), reduce-scatter float32
CURRENT_DTYPES = {"allgather": "bfloat16", "reduce_scatter": "float32"}
ITEMSIZES = {"bfloat16": 2, "float32": 4}
MIB = 1 << 20
#: more GPUs than either machine has
MAX_GPUS = 1 << 20

SRUN = re.compile(r"^\s*srun\b(?P<args>.*)$")
FRONTIER_SRUN = re.compile(r"srun\b.*\s-c\s*7\b")
PERLMUTTER_SRUN = re.compile(r"srun\b.*\s-C\s*gpu\b")
ANNOUNCE = re.compile(r"^\s*(?:output|input) size = (?P<size>[\d.]+) MB\s*$")
METHOD = re.compile(r"^\s*Method = (?P<method>\S+)\s*$")
BUSBW = re.compile(r"^\s*(?P<coll>All-gather|Reduce scatter) bus bw for (?P<gpus>\d+) GPUs is (?P<busbw>[\d.eE+-]+) "
                   r"GBPS for message (?:output |input )?size (?P<printed>[\d.eE+-]+) MB\s*$")
TIME = re.compile(r"^\s*time(?:_(?P<lib>\w{1,40}))? = (?P<ms>[\d.eE+-]+) ms\s*$")
#: the script a launch line runs names the collective (current scripts print no collective)
SCRIPT = re.compile(r"\b(?:benchmark_)?(all_gather|reduce_scatter)\.py\b")
SCRIPT_DTYPE = re.compile(r"--dtype[= ](bf16|fp32)\b")
#: the current scripts' CSV: data/<collective>/<machine>/gpus_N_slurm_J.csv
RUN_CSV = re.compile(r"\A\s*gpu_count,slurm_job_id,output_size,unit,time_(\w{1,40})\s*$")
UNITS = {"MB": 1 << 20, "KB": 1 << 10}
#: the current scripts' library names -> the published logs' methods
LIBRARIES = {"xccl": "nccl", "mpi": "mpi"}
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
    dtype: str = DTYPE


def impl_of(method: str, collective: str, machine: str) -> dict:
    """impl, algorithm, intra, inter, library of a reproducer method (None: not one we know)."""
    vendor = MACHINES[machine]["xccl"]
    if method == "nccl":
        return {"impl": "xccl", "algorithm": "native", "intra": "", "inter": "", "library": vendor}
    if method == "mpi":  # reduce-scatter: the benchmark's own recursive halving, partner rank XOR 1, 2, 4 ...
        resolved = "rh-dd" if collective == "reduce_scatter" else "native"
        return {"impl": "mpi", "algorithm": "native", "intra": "", "inter": "", "library": MPI_LIBRARY,
                "resolved": resolved}
    if method.startswith("pccl_") and method.endswith(("_ring", "_rec")):  # the current scripts' PCCL
        recursive = method.endswith("_rec") or collective == "reduce_scatter"
        return {"impl": "pccl-hier", "algorithm": "hier-py" if "_py_" in method else "hier", "intra": "xccl",
                "inter": "rd" if recursive else "mpi", "library": f"{vendor} (intra) + {MPI_LIBRARY} (inter)"}
    if method in ("hybrid", "hybrid-nccl-mpi", "hybrid-nccl-nccl"):
        outer = "xccl" if method == "hybrid-nccl-nccl" else "mpi"
        inter = outer if collective == "allgather" else "rd"
        library = f"{vendor} (intra) + {vendor if outer == 'xccl' else MPI_LIBRARY} (inter)"
        return {"impl": "pccl-hier", "algorithm": "hier", "intra": "xccl", "inter": inter, "library": library}
    return {}


def _srun_shape(args: str, where: str) -> tuple[int | None, int | None]:
    """(nnodes, nranks) from the srun line's arguments (``-N``/``--nodes``, ``-n``/``--ntasks``)."""
    nodes = re.search(r"(?:\s-N\s*|--nodes[= ])(\d+)", args)
    tasks = re.search(r"(?:\s-n\s*|--ntasks[= ])(\d+)", args)
    nnodes = whole(nodes.group(1), where, "srun -N", 1) if nodes else None
    ntasks = whole(tasks.group(1), where, "srun -n", 1) if tasks else None
    if nnodes is not None and nnodes > MAX_GPUS or ntasks is not None and ntasks > MAX_GPUS:
        raise BadInput(where, f"srun -N {nnodes} -n {ntasks}: more than any machine runs")
    if nnodes is not None and ntasks is not None and nnodes > ntasks:
        raise BadInput(where, f"srun -N {nnodes} -n {ntasks}: more nodes than tasks")
    return nnodes, ntasks


def _positive(token: str, where: str, name: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise BadInput(where, f"{name}: not a number: {token[:40]!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise BadInput(where, f"{name}: {token[:40]!r} is not a finite number above 0")
    return value


def _bytes_of(mib: float, where: str, name: str) -> int:
    if mib * MIB > INT64_MAX:
        raise BadInput(where, f"{name}: {mib:g} MB is beyond a 64-bit byte count")
    return round(mib * MIB)


def _gpus(token: str, where: str) -> int:
    gpus = whole(token, where, "GPUs", 1)
    if gpus > MAX_GPUS:
        raise BadInput(where, f"for {gpus} GPUs: more than any machine runs")
    return gpus


def _method(token: str, where: str) -> str:
    if len(token) > 40 or not token.isprintable():
        raise BadInput(where, f"Method: {token[:40]!r} is not a method name")
    return token


@dataclass
class LogScan:
    """What one log holds: rows (machine still unknown), problems, and what tells the machine."""

    rows: list[ReproRow]
    problems: list[str]
    frontier: bool = False
    perlmutter: bool = False
    #: the collective and type the launch line's script names (current scripts)
    collective: str | None = None
    dtype: str | None = None


def scan_log(numbered: Iterable[tuple[int, str]], source: str) -> LogScan:
    """Rows of one Slurm log read line by line, and problems found (a bus-bw line without its time, ...)."""
    shape: tuple[int | None, int | None] | None = None
    scan = LogScan([], [])
    announced = method = None
    pending: tuple[re.Match, int] | None = None
    for number, line in numbered:
        where = f"{source}:{number}"
        lower = line.lower()  # the machine: host names, Frontier's "-c7", Perlmutter's "-C gpu"
        scan.frontier = scan.frontier or "frontier" in lower or bool(FRONTIER_SRUN.search(line))
        scan.perlmutter = scan.perlmutter or "perlmutter" in lower or bool(PERLMUTTER_SRUN.search(line))
        if scan.collective is None and "_" in line and (match := SCRIPT.search(line)):
            scan.collective = COLLECTIVES[match.group(1).replace("_", "-")]
            chosen = SCRIPT_DTYPE.search(line)
            scan.dtype = ("float32" if chosen.group(1) == "fp32" else "bfloat16") if chosen \
                else CURRENT_DTYPES[scan.collective]
        if shape is None and (match := SRUN.match(line)):
            shape = _srun_shape(match.group("args"), where)
        elif match := ANNOUNCE.match(line):
            announced = _positive(match.group("size"), where, "size")
        elif match := METHOD.match(line):
            method = _method(match.group("method"), where)
        elif match := BUSBW.match(line):
            pending = (match, number)
        elif (match := TIME.match(line)) and match.group("lib") and pending is None:
            # the current scripts: "time_<library> = T ms" after "output size = N MB"
            time_ms = _positive(match.group("ms"), where, "time")
            gpus = (shape or (None, None))[1]
            if announced is None or scan.collective is None or gpus is None:
                scan.problems.append(f"line {number}: 'time_{match.group('lib')}' without "
                                     + ("an 'output size =' line" if announced is None else
                                        "the launch line naming the script (all_gather.py / reduce_scatter.py)"
                                        if scan.collective is None else "an srun line with -n (the GPU count)"))
            else:
                library = match.group("lib")
                scan.rows.append(ReproRow("", source, scan.collective, LIBRARIES.get(library, library), gpus, None,
                                          _bytes_of(announced, where, "size"), time_ms, scan.dtype or DTYPE))
        elif (match := TIME.match(line)) and pending is not None:
            busbw, busbw_line = pending
            gpus = _gpus(busbw.group("gpus"), f"{source}:{busbw_line}")
            time_ms = _positive(match.group("ms"), where, "time")
            if announced is None or method is None:
                scan.problems.append(f"line {number}: a time before any 'Method =' / 'size =' line")
            else:
                scan.rows.append(ReproRow("", source, COLLECTIVES[busbw.group("coll")], method, gpus, None,
                                          _bytes_of(announced, where, "size"), time_ms))
            pending = None
    nnodes, nranks_srun = shape or (None, None)
    scan.rows = [replace(row, nnodes=nnodes if nranks_srun in (None, row.nranks) else None) for row in scan.rows]
    return scan


def parse_log(text: str, source: str, machine: str) -> tuple[list[ReproRow], list[str]]:
    """Rows of one Slurm log, and problems found (a bus-bw line without its time, ...)."""
    scan = scan_log(enumerate(text.splitlines(), 1), source)
    return [replace(row, machine=machine) for row in scan.rows], scan.problems


CSV_COLUMNS = ("machine", "dir", "file", "collective", "method", "gpus", "buffer_mb", "time_ms")


def parse_csv(numbered: Iterable[tuple[int, str]] | str, source: str) -> list[ReproRow]:
    """Rows of the shared CSV (README of ../shared/data/pccl-reproducer): one per logged call."""
    if isinstance(numbered, str):
        numbered = enumerate(numbered.splitlines(), 1)
    reader = csv.DictReader(line for _, line in numbered)
    try:
        fieldnames = reader.fieldnames or []
        missing = [name for name in CSV_COLUMNS if name not in fieldnames]
        if missing:
            raise BadInput(source, f"missing column(s) {', '.join(missing)}")
        rows = []
        for record in reader:
            where = f"{source}:{reader.line_num}"
            if any(record.get(name) is None for name in CSV_COLUMNS):
                raise BadInput(where, "fewer fields than the header")
            if record["machine"] not in MACHINES:
                raise BadInput(where, f"machine: {record['machine'][:40]!r} is not {' or '.join(MACHINES)}")
            if record["collective"] not in COLLECTIVES:
                raise BadInput(where, f"collective: {record['collective'][:40]!r} is not all-gather or "
                                      "reduce-scatter")
            mib = _positive(record["buffer_mb"], where, "buffer_mb")
            rows.append(ReproRow(record["machine"], f"{record['dir'][:200]}/{record['file'][:200]}",
                                 COLLECTIVES[record["collective"]], _method(record["method"], where),
                                 _gpus(record["gpus"], where), None, _bytes_of(mib, where, "buffer_mb"),
                                 _positive(record["time_ms"], where, "time_ms")))
    except csv.Error as error:
        raise BadInput(f"{source}:{reader.line_num}", f"not CSV: {error}") from None
    return rows


def parse_run_csv(numbered: Iterable[tuple[int, str]], path: Path, machine: str | None) -> list[ReproRow]:
    """Rows of a current script's CSV (``gpu_count,slurm_job_id,output_size,unit,time_<library>``): its
    collective and machine from its folders (data/<collective>/<machine>/), --machine first (the
    published Frontier script passes ``--machine perlmutter``)."""
    source = str(path)
    folders = [part.lower() for part in path.parts[:-1]]
    collective = next((COLLECTIVES[name.replace("_", "-")] for name in reversed(folders)
                       if name in ("all_gather", "reduce_scatter")), None)
    found = machine or next((name for name in reversed(folders) if name in MACHINES), None)
    if collective is None or found is None:
        raise BadInput(source, "a reproducer CSV outside data/<all_gather|reduce_scatter>/<machine>/: cannot tell "
                               + ("the collective" if collective is None else "the machine: pass --machine"))
    reader = csv.reader(line for _, line in numbered)
    rows = []
    try:
        header = next(reader, [])
        library = header[4][len("time_"):] if len(header) == 5 and header[4].startswith("time_") else ""
        for record in reader:
            where = f"{source}:{reader.line_num}"
            if len(record) != 5:
                raise BadInput(where, f"{len(record)} fields, the header has 5")
            gpus = _gpus(record[0], where)
            if record[3] not in UNITS:
                raise BadInput(where, f"unit: {record[3][:20]!r} is not MB or KB")
            size = _positive(record[2], where, "output_size") * UNITS[record[3]]
            if size > INT64_MAX:
                raise BadInput(where, f"output_size: {record[2][:40]} {record[3]} is beyond a 64-bit byte count")
            rows.append(ReproRow(found, f"{source}#{record[1][:40]}", collective, LIBRARIES.get(library, library),
                                 gpus, None, round(size), _positive(record[4], where, f"time_{library}"),
                                 CURRENT_DTYPES[collective]))
    except csv.Error as error:
        raise BadInput(f"{source}:{reader.line_num}", f"not CSV: {error}") from None
    return rows


def _read_rows(path: Path, machine: str | None) -> list[ReproRow]:
    check_input(path)
    first = head(path)
    if RUN_CSV.match(first.split(b"\n", 1)[0].decode("utf-8", errors="replace")):
        rows = parse_run_csv(lines(path), path, machine)
    elif first.lstrip().startswith(b"machine,") or path.suffix == ".csv":
        rows = parse_csv(lines(path), str(path))
    else:
        # through the front end: a log behind srun --label or rank tags reads as a bare one
        scan = scan_log(((number, line) for number, line, _ in numbered(path)), str(path))
        if scan.problems:
            raise BadInput(str(path), scan.problems[0])
        if scan.rows:
            found = machine or ("frontier" if scan.frontier else "perlmutter" if scan.perlmutter else None)
            if found is None:
                raise BadInput(str(path), "cannot tell the machine (no Frontier/Perlmutter srun line): pass --machine")
            rows = [replace(row, machine=found) for row in scan.rows]
        else:
            rows = []
    if not rows:
        raise BadInput(str(path), "no '<Collective> bus bw for N GPUs ...' line followed by 'time = T ms', and no "
                                  "'output size = N MB' followed by 'time_<library> = T ms'"
                       + hint_of(first, (REPRODUCER_LOG, REPRODUCER_CSV)))
    return rows


def _row(item: ReproRow, run_id: str, repeat: int) -> dict:
    shape = MACHINES[item.machine]
    per_node = shape["gpus_per_node"] if item.nnodes is None else max(item.nranks // item.nnodes, 1)
    nnodes = item.nnodes or max(item.nranks // per_node, 1)
    per_node = min(per_node, item.nranks)
    names = impl_of(item.method, item.collective, item.machine)
    itemsize = ITEMSIZES[item.dtype]
    count = item.bytes_total // (itemsize * item.nranks)
    op = op_of(item.collective, "sum")
    m = Measurement(item.collective, item.dtype, op, count, "out_of_place", item.time_ms * 1e3)
    context = {"run_id": run_id, "suite": f"import:pccl-reproducer:{item.machine}", "launch_id": item.source,
               "timestamp": None, "impl": names["impl"], "device": shape["device"], "nranks": item.nranks,
               "nnodes": nnodes, "hosts": "", "library": names["library"], "library_version": "",
               "transport": "", "tool_version": f"pccl-reproducer ({item.method})", "warmup": 5}
    row = make_row(m, context, repeat)
    cell = Cell(collective=item.collective, impl=names["impl"], algorithm=names["algorithm"],
                intra=names["intra"], inter=names["inter"], device=shape["device"], nranks=item.nranks,
                nnodes=nnodes, ranks_per_node=per_node, virtual_nodes=False, dtype=item.dtype, op=op,
                placement="out_of_place", count_per_rank=count, bytes_per_rank=count * itemsize,
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


@importer("pccl-reproducer", whole=True)
def read_reproducer(paths: list[Path], options: ImportOptions) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """The registry's reader: ``options.extra`` may hold ``machine`` and ``dirs`` (--machine, --dir)."""
    return import_reproducer(paths, options.extra.get("machine"), options.extra.get("dirs"))
