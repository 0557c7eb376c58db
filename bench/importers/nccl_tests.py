"""nccl-tests and rccl-tests: the text table and the ``-J``/``--output_file x.json`` JSON as result rows.

Checked against NVIDIA/nccl-tests src/common.cu and src/util.cu (see docs/PLOTS.md for commits):

* ``size`` is ``max(sendBytes, expectedBytes)`` (all-gather output, reduce-scatter input, all-reduce
  buffer) and ``count`` is ``paramcount`` (per rank: all-gather send count, reduce-scatter receive
  count, all-reduce count): exactly pccl-bench's ``bytes_total`` and ``count_per_rank``.
* ``time`` is the host-timer mean over iterations (cross-rank reduction per ``-a``): it goes into
  ``time_us_mean`` and, unless a per-iteration median exists, ``time_us_p50``.
* ``-I 1`` (per_iter_timing) adds ``i_min i_max i_p99 i_cv%`` after each placement's ``#wrong``
  (CUDA-event times, per iteration the max over ranks): i_min/i_max go into time_us_min/max. The
  JSON adds ``<placement>_per_iter`` objects (util.cu ``writePerIterReport``): ``times_us`` holds one
  time per timed iteration (``config.iterations`` of them; common.cu ``BenchTime``: the CUDA-event
  time of iteration i divided by ``-m`` agg_iters, max over the GPUs of a process, then over
  processes), and min_us/max_us/p50_us/p95_us/p99_us summarise ``times_us[skipped_iterations:]``
  (``-K`` per_iter_skip, JSON version 3) with nearest-rank definitions (p50 = sorted[n/2],
  pXX = sorted[min(n-1, ceil(n*XX/100)-1)]). Those kept times become the cell's per-iteration
  samples, pccl-bench's own definition of a sample (time = max over ranks per iteration).
* The columns of a line are read from the ``#  size  count  type  redop  root  time ...`` header, so
  old layouts (no root, ``error``), ``-I``, the bitwise-check column and ``-S`` timestamps all parse.

rccl-tests prints the same table and writes the same ``-J`` JSON; its own ``-X file -Z json`` report
(a list of flat records with ``inPlace``) is read too.
"""

from __future__ import annotations

import json
import math
import os
import re

from bench.errors import BadInput
from bench.importers import importer
from bench.importers.rows import ITEMSIZE, ImportOptions, Measurement

COLLECTIVES = {"all_gather": "allgather", "allgather": "allgather", "reduce_scatter": "reduce_scatter",
               "reducescatter": "reduce_scatter", "all_reduce": "allreduce", "allreduce": "allreduce"}
DTYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16", "int8": "int8",
          "uint8": "uint8", "int32": "int32", "int": "int32", "uint32": "uint32", "int64": "int64",
          "uint64": "uint64", "float32": "float32", "float64": "float64", "float16": "float16",
          "f8e4m3": "fp8_e4m3", "f8e5m2": "fp8_e5m2", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2",
          "char": "int8"}
RANK_LINE = re.compile(r"#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+")
ITERS = re.compile(r"warmup iters:\s*(\d+)\s+iters:\s*(\d+)")
VERSION = re.compile(r"\b([NR]CCL) version (\d+\.\d+\.\d+)")
LIBRARY_CODE = re.compile(r"nccl-library=(\d+)")
TOOL_VERSION = re.compile(r"#\s*([nr]ccl-tests) version (\S+)")
TEST_NAME = re.compile(r"(?<![a-z])(all_gather|reduce_scatter|all_reduce|alltoall|broadcast|reduce|sendrecv|gather|"
                       r"scatter|hypercube)_perf")
#: the column header line: "#  size  count  type  redop  root  time  algbw  busbw  #wrong ..."
HEADER = re.compile(r"^#\s+size\s+count\s+type\b")
TIME_LABELS = ("time", "cputime")
#: used when a file has no column header (a pasted excerpt): the layout of nccl-tests >= 2.13
DEFAULT_COLUMNS = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                   "time", "algbw", "busbw", "#wrong"]
#: "-S 1" appends "%Y-%m-%d %H:%M:%S" (two tokens) after the in-place block
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s*$")
#: writeBenchMarkLineNullBody prints 32 blanks where the out-of-place block would be
NULL_BODY = 32
#: <placement>_per_iter summaries checked against times_us (the writer prints both with %lf)
PER_ITER_STATS = ("min_us", "max_us", "p50_us", "p95_us", "p99_us")


#: "# Collective test starting: all_gather_perf" (common.cu writeDeviceReport)
STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)", re.MULTILINE)
#: "# nThread 1 nGpus 4 ...": every process drives nThread * nGpus ranks
THREADS_GPUS = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")


def collective_of(text: str, source: str, options: ImportOptions) -> str:
    """--collective, else the test's name in the output or the file name (all_gather_perf ...)."""
    return infer_collective(text, source, options)[0]


def infer_collective(text: str, source: str, options: ImportOptions,
                     text_is: str = "the output") -> tuple[str, str | None]:
    """(collective, what it was read from; None when --collective gave it). ``text_is`` names
    ``text`` in that note (the output, or the JSON's args[0])."""
    if options.collective:
        return options.collective, None
    candidates = []
    if starting := STARTING.search(text):
        candidates.append((starting.group(1), repr(starting.group(0).strip())))
    if found := TEST_NAME.search(text):
        candidates.append((found.group(0), f"{found.group(0)!r} in {text_is}"))
    if found := TEST_NAME.search(source):
        candidates.append((found.group(0), f"the file name {os.path.basename(source)!r}"))
    for program, evidence in candidates:
        if not (found := TEST_NAME.search(program)):
            continue
        name = found.group(1)
        if name not in COLLECTIVES:
            raise BadInput(source, f"{name}_perf is not a collective pccl-bench compares "
                                   "(all_gather, reduce_scatter, all_reduce); pass --collective to override")
        return COLLECTIVES[name], evidence
    raise BadInput(source, "cannot tell which collective this is (no '# Collective test starting: <test>_perf' "
                           "line, no test name in the file name): pass --collective")


def _number(token: object) -> float | None:
    """A float from a token or JSON value; None for N/A, "nan" (the JSON writer's NaN) and the like."""
    if isinstance(token, bool):
        return None
    try:
        value = float(token)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if value == value else None


def header_columns(text: str) -> list[str]:
    """The column labels of the result table (without the timestamp label), else the modern layout."""
    for line in text.splitlines():
        if HEADER.match(line):
            return [label for label in line.lstrip("#").split() if label != "timestamp"]
    return DEFAULT_COLUMNS


def _layout(columns: list[str], source: str) -> tuple[list[str], list[str]]:
    """(preamble labels, one placement block's labels) from the header."""
    starts = [i for i, label in enumerate(columns) if label in TIME_LABELS]
    if not starts:
        raise BadInput(source, f"result header without a time column: {' '.join(columns)}")
    end = starts[1] if len(starts) > 1 else len(columns)
    return columns[:starts[0]], columns[starts[0]:end]


def _block(labels: list[str], tokens: list[str]) -> dict[str, float | None]:
    values = dict(zip(labels, tokens, strict=False))
    time_label = next(label for label in labels if label in TIME_LABELS)
    wrong = next((values[k] for k in ("#wrong", "error", "wrong") if k in values), None)
    return {"time": _number(values.get(time_label)), "wrong": _number(wrong),
            "min": _number(values.get("i_min")), "max": _number(values.get("i_max"))}


def parse_data_line(line: str, preamble: list[str], block: list[str], collective: str,
                    where: str) -> list[Measurement]:
    """One result line, its columns named by the header; [] for a line that is not a result."""
    body = TIMESTAMP.sub("", line)
    tokens = body.split()
    head = dict(zip(preamble, tokens, strict=False))
    if len(tokens) < len(preamble) + len(block) or not head.get("size", "").isdigit() \
            or not head.get("count", "").isdigit() or head.get("type") not in DTYPES:
        return []
    dtype, op = DTYPES[head["type"]], head.get("redop", "sum")
    if op == "none" or collective == "allgather":
        op = "sum"  # pccl-bench records all-gathers with the suite's op; nccl-tests says "none"
    rest = tokens[len(preamble):]
    if len(rest) >= 2 * len(block):
        blocks = [("out_of_place", rest[:len(block)]), ("in_place", rest[len(block):2 * len(block)])]
    else:
        # one block: nccl-tests' null out-of-place body leaves 32 blanks before the in-place one;
        # rccl-tests -O prints either placement alone, with nothing to tell which
        spans = [token.span() for token in re.finditer(r"\S+", body)]
        if spans[len(preamble)][0] - spans[len(preamble) - 1][1] < NULL_BODY:
            raise BadInput(where, "only one of out-of-place/in-place on this line (rccl-tests -O?) and the "
                                  "layout does not say which; rerun without -O")
        blocks = [("in_place", rest[:len(block)])]
    found = []
    for placement, values in blocks:
        fields = _block(block, values)
        if fields["time"] is None:
            continue  # a placement the test does not run
        found.append(Measurement(collective, dtype, op, int(head["count"]), placement, fields["time"],
                                 time_us_min=fields["min"], time_us_max=fields["max"],
                                 n_wrong=int(fields["wrong"] or 0)))
    return found


def _rank_count(text: str, source: str) -> tuple[int | None, str]:
    """Ranks from the ``#  Rank  N Group  G Pid P on HOST device D`` lines, and what they said.

    Each rank prints one line; one rank index from several processes means nccl-tests was built
    without MPI, so every process ran a test of its own (no collective over all of them)."""
    pids: dict[int, set[str]] = {}
    for found in re.finditer(r"#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+(\d+)\s+on\s+\S+\s+device", text):
        pids.setdefault(int(found.group(1)), set()).add(found.group(2))
    if not pids:
        return None, ""
    repeated = next((rank for rank, seen in sorted(pids.items()) if len(seen) > 1), None)
    if repeated is not None:
        raise BadInput(source, f"'# Rank {repeated:2d}' is printed by {len(pids[repeated])} processes: nccl-tests "
                               "was built without MPI, so each process ran alone; rebuild with MPI=1 "
                               "(or pass --nranks for what was meant)")
    evidence = f"{len(pids)} '#  Rank N ... device' lines"
    threads_gpus = THREADS_GPUS.search(text)
    if threads_gpus:
        per_process = int(threads_gpus.group(1)) * int(threads_gpus.group(2))
        evidence += f" ({threads_gpus.group(0).lstrip('# ')}: {len(pids) // per_process or 1} processes)"
    return len(pids), evidence


def header_context(text: str, kind: str) -> dict:
    """Ranks, hosts, iterations and versions printed in the header."""
    ranks = {int(rank): host for rank, host in RANK_LINE.findall(text)}
    iters = ITERS.search(text)
    library = VERSION.search(text)
    code = LIBRARY_CODE.search(text)
    tool = TOOL_VERSION.search(text)
    version = library.group(2) if library else (_decode_version(code.group(1)) if code else "")
    return {"nranks": len(ranks) or None, "hosts": sorted(set(ranks.values())),
            "warmup": int(iters.group(1)) if iters else 0, "iters": int(iters.group(2)) if iters else 0,
            "library": library.group(1) if library else ("RCCL" if kind == "rccl-tests" else "NCCL"),
            "library_version": version, "tool_version": f"{tool.group(1)} {tool.group(2)}" if tool else kind}


def _decode_version(code: object) -> str:
    """NCCL_VERSION_CODE 22105 -> 2.21.5 (major*10000 + minor*100 + patch; 1000s before 2.9)."""
    try:
        value = int(str(code))
    except ValueError:
        return str(code)
    if value >= 10000:
        return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
    return f"{value // 1000}.{value // 100 % 10}.{value % 100}" if value >= 1000 else str(value)


def parse_text(text: str, source: str, options: ImportOptions, kind: str) -> tuple[list[Measurement], dict]:
    collective, collective_from = infer_collective(text, source, options)
    preamble, block = _layout(header_columns(text), source)
    measurements, implied = [], set()
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#") or not line.strip():
            continue
        found = parse_data_line(line, preamble, block, collective, f"{source}:{number}")
        if found and collective != "allreduce":
            size, count = int(line.split()[0]), found[0].count_per_rank
            if count:  # size = count * itemsize * nranks: the rank count when the header lacks rank lines
                implied.add(size // (count * ITEMSIZE[found[0].dtype]))
        measurements += found
    if not measurements:
        raise BadInput(source, f"no {kind} result lines (size count type redop ... time algbw busbw #wrong)")
    context = header_context(text, kind)
    inferred = [f"collective={collective} from {collective_from}"] if collective_from else []
    if not options.nranks:
        counted, evidence = _rank_count(text, source)
        if counted:
            context["nranks"] = counted
            inferred.append(f"nranks={counted} from {evidence}")
        elif len(implied) == 1:
            context["nranks"] = implied.pop()
            inferred.append(f"nranks={context['nranks']} from size / (count * type size) of the result lines")
        else:
            raise BadInput(source, "cannot tell how many ranks ran (no '#  Rank N ... device' lines"
                                   + (", and all-reduce sizes do not tell" if collective == "allreduce" else "")
                                   + "): pass --nranks")
    if not options.library:
        inferred.append(f"library={_library_text(context)} from {_library_evidence(text, kind)}")
    context["inferred"] = inferred
    return measurements, context


def _library_text(context: dict) -> str:
    return f"{context['library']} {context['library_version']}".strip()


def _library_evidence(text: str, kind: str) -> str:
    """The header line the library (and its version) came from, else the tool's name."""
    for pattern in (VERSION, LIBRARY_CODE):
        found = pattern.search(text)
        if found:
            line = text[text.rfind("\n", 0, found.start()) + 1:].split("\n", 1)[0].strip()
            return repr(line)
    return f"the tool ({kind})"


def parse_json(text: str, source: str, options: ImportOptions, kind: str) -> tuple[list[Measurement], dict]:
    """nccl-tests -J (util.cu: {"version", "args", "nccl_version", "config": {..., "devices"},
    "results": [...]}), or rccl-tests' -X/-Z json report (a list of flat records)."""
    try:
        data = json.loads(text)
    except ValueError as error:
        raise BadInput(source, f"not JSON (a run killed before the file was closed?): {error}") from None
    if isinstance(data, list):
        return _rccl_report(data, source, options, kind)
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise BadInput(source, "not nccl-tests -J JSON: no top-level 'results' list")
    args = data.get("args") if isinstance(data.get("args"), list) else []
    program = os.path.basename(str(args[0])) if args else ""
    collective, collective_from = infer_collective(program, source, options, "args[0]")
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    devices = [d for d in config.get("devices") or [] if isinstance(d, dict)]
    # one "devices" entry per process (its first rank's line); each process drives nthreads*ngpus ranks
    per_process = _int(config.get("nthreads"), 1) * _int(config.get("ngpus"), 1)
    iterations = _number(config.get("iterations"))
    measurements = []
    for index, record in enumerate(data["results"]):
        measurements += _json_record(record, collective, f"{source}: results[{index}]",
                                     int(iterations) if iterations is not None else None,
                                     _int(config.get("per_iter_skip"), 0))
    if not measurements:
        raise BadInput(source, "no results in this nccl-tests JSON")
    code = data.get("nccl_version")
    inferred = [f"collective={collective} from {collective_from}"] if collective_from else []
    if devices and not options.nranks:
        inferred.append(f"nranks={len(devices) * per_process} from {len(devices)} config.devices entries "
                        f"x nthreads*ngpus {per_process}")
    if not options.library:
        inferred.append(f"library={'RCCL' if kind == 'rccl-tests' else 'NCCL'}"
                        + (f" {_decode_version(code)} from nccl_version {code}" if code is not None else
                           f" from the tool ({kind})"))
    context = {"inferred": inferred, "nranks": len(devices) * per_process or None,
               "hosts": sorted({str(d["hostname"]) for d in devices if d.get("hostname")}),
               "warmup": _int(config.get("warmup_iters"), 0), "iters": _int(config.get("iterations"), 0),
               "library": "RCCL" if kind == "rccl-tests" else "NCCL",
               "library_version": _decode_version(code) if code is not None else "",
               "tool_version": f"{kind} (JSON v{data.get('version', '?')})"}
    return measurements, context


def _int(value: object, default: int) -> int:
    number = _number(value)
    return int(number) if number is not None else default


def _json_record(record: object, collective: str, where: str, iterations: int | None = None,
                 per_iter_skip: int = 0) -> list[Measurement]:
    if not isinstance(record, dict):
        raise BadInput(where, f"not an object: {str(record)[:80]}")
    for key in ("size", "count", "type"):
        if key not in record:
            raise BadInput(where, f"no '{key}' field")
    count = _number(record["count"])
    if str(record["type"]) not in DTYPES:
        raise BadInput(where, f"type: unknown nccl-tests type {record['type']!r}")
    if count is None or count < 0 or count != int(count):
        raise BadInput(where, f"count: not an element count: {record['count']!r}")
    dtype, op = DTYPES[str(record["type"])], str(record.get("redop") or "sum")
    op = "sum" if op == "none" or collective == "allgather" else op
    found = []
    for placement in ("out_of_place", "in_place"):
        block = record.get(placement)  # null where a placement was not run
        if not isinstance(block, dict):
            continue
        time_us = _number(block.get("time", block.get("cpu_time")))  # "cpu_time" with -C 1
        if time_us is None:
            continue
        stats = record.get(f"{placement}_per_iter")
        stats = stats if isinstance(stats, dict) else {}
        expected, field = iterations, "config.iterations"
        if expected is None and _number(record.get("actual_iterations")) is not None:
            expected, field = int(_number(record["actual_iterations"]) or 0), "actual_iterations"
        samples = per_iter_samples(stats, f"{where}: {placement}_per_iter", expected, per_iter_skip, field)
        found.append(Measurement(collective, dtype, op, int(count), placement, time_us,
                                 time_us_min=_number(stats.get("min_us")), time_us_max=_number(stats.get("max_us")),
                                 time_us_p50=_number(stats.get("p50_us")), time_us_p95=_number(stats.get("p95_us")),
                                 time_us_p99=_number(stats.get("p99_us")),
                                 n_wrong=int(_number(block.get("nwrong")) or 0), samples_us=samples))
    return found


def _nearest_rank(ordered: list[float], percentile: int) -> float:
    """util.cu ``percentileIndex``: sorted[min(n - 1, ceil(n * p / 100) - 1)]."""
    n = len(ordered)
    return ordered[min(n - 1, (n * percentile + 99) // 100 - 1)]


def per_iter_samples(stats: dict, where: str, iterations: int | None, per_iter_skip: int,
                     iterations_field: str = "config.iterations") -> list[float] | None:
    """The per-iteration times of one ``<placement>_per_iter`` object (None without ``times_us``).

    ``times_us`` has one entry per timed iteration (``config.iterations``); the first
    ``skipped_iterations`` (``-K``) are left out of the tool's summary and of the samples. A list of
    another length, a value that is not a time, or a summary that does not describe the kept times
    is a corrupt or foreign file: BadInput naming the field and the value.
    """
    if "times_us" not in stats:
        return None
    times = stats["times_us"]
    if not isinstance(times, list):
        raise BadInput(where, f"times_us: not a list of times: {str(times)[:80]!r}")
    values = []
    for position, value in enumerate(times):
        number = None if isinstance(value, bool) or not isinstance(value, int | float) else float(value)
        if number is None or not math.isfinite(number) or number < 0:
            raise BadInput(where, f"times_us[{position}]: not a time in microseconds: {value!r}")
        values.append(number)
    skip = _int(stats.get("skipped_iterations"), per_iter_skip)
    if skip < 0:
        raise BadInput(where, f"skipped_iterations: not an iteration count: {stats.get('skipped_iterations')!r}")
    if iterations is None or len(values) == iterations:
        kept = values[skip:]
    elif skip and len(values) == iterations - skip:
        kept = values  # the skipped iterations already left out
    else:
        raise BadInput(where, f"times_us: {len(values)} values, but {iterations_field} is {iterations}"
                              + (f" (skipped_iterations {skip})" if skip else ""))
    if not kept:
        return None
    ordered = sorted(kept)
    ours = {"min_us": ordered[0], "max_us": ordered[-1], "p50_us": ordered[len(ordered) // 2],
            "p95_us": _nearest_rank(ordered, 95), "p99_us": _nearest_rank(ordered, 99)}
    for name in PER_ITER_STATS:
        told = _number(stats.get(name))
        if told is not None and abs(told - ours[name]) > 1e-3 + 1e-6 * abs(told):
            raise BadInput(where, f"{name}: {stats[name]!r} does not summarise times_us"
                                  + (f"[{skip}:]" if skip and len(values) == iterations else "")
                                  + f" (nearest-rank value {ours[name]:g}); a corrupt or edited file?")
    return kept


def _rccl_report(records: list, source: str, options: ImportOptions, kind: str) -> tuple[list[Measurement], dict]:
    """rccl-tests Reporter (-X file -Z json): {"numCycle", "name": "AllReduce", MPI: "nodes", "ranks"
    (processes), "ranksPerNode", "gpusPerRank" / else "gpus", "size" (bytes, as the table's size),
    "type", "redop", "inPlace", "time", "algBw", "busBw", "wrong"}: no count, so it is derived."""
    measurements, nranks_seen = [], set()
    for index, record in enumerate(records):
        where = f"{source}: [{index}]"
        if not isinstance(record, dict) or "inPlace" not in record or "size" not in record:
            raise BadInput(where, "not an rccl-tests report record (name, size, type, inPlace, time, ...)")
        nranks = _int(record.get("ranks"), 1) * _int(record.get("gpusPerRank"), 0) or _int(record.get("gpus"), 0)
        collective = options.collective or COLLECTIVES.get(str(record.get("name", "")).lower())
        if not collective:
            raise BadInput(where, f"name: {record.get('name')!r} is not all_gather, reduce_scatter or all_reduce")
        if str(record.get("type")) not in DTYPES:
            raise BadInput(where, f"type: unknown type {record.get('type')!r}")
        size, time_us = _number(record.get("size")), _number(record.get("time"))
        if size is None or time_us is None or not nranks:
            raise BadInput(where, "size, time and ranks/gpus must be numbers")
        dtype = DTYPES[str(record["type"])]
        count = int(size) // ITEMSIZE[dtype] // (1 if collective == "allreduce" else nranks)
        op = "sum" if collective == "allgather" or record.get("redop") in (None, "none") else str(record["redop"])
        placement = "in_place" if _int(record["inPlace"], 0) else "out_of_place"
        measurements.append(Measurement(collective, dtype, op, count, placement, time_us,
                                        n_wrong=int(_number(record.get("wrong")) or 0)))
        nranks_seen.add(nranks)
    if not measurements:
        raise BadInput(source, "an empty rccl-tests report")
    return measurements, {"nranks": nranks_seen.pop() if len(nranks_seen) == 1 else None, "hosts": [],
                          "warmup": 0, "iters": 0, "library": "RCCL" if kind == "rccl-tests" else "NCCL",
                          "library_version": "", "tool_version": f"{kind} (report JSON)"}


@importer("nccl-tests")
def nccl_tests(text: str, source: str, options: ImportOptions) -> tuple[list[Measurement], dict]:
    return _parse(text, source, options, "nccl-tests")


@importer("rccl-tests")
def rccl_tests(text: str, source: str, options: ImportOptions) -> tuple[list[Measurement], dict]:
    return _parse(text, source, options, "rccl-tests")


def _parse(text: str, source: str, options: ImportOptions, kind: str) -> tuple[list[Measurement], dict]:
    measurements, context = (parse_json if text.lstrip().startswith(("{", "[")) else parse_text)(
        text, source, options, kind)
    context["device"] = "rocm" if context["library"] == "RCCL" else "cuda"
    context.update(impl="xccl", transport=context["library"].lower())
    for measurement in measurements:
        measurement.iters = context.get("iters", 0)
    return measurements, context
