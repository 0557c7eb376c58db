"""nccl-tests ``-J`` JSON and rccl-tests' ``-X file -Z json`` report as measurements: read whole
(bounded in size and depth), every field checked where it is read (BadInput naming the record)."""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np

from bench.errors import BadInput
from bench.importers.imported_row import ITEMSIZE, ImportOptions, Measurement
from bench.importers.input_files import INT64_MAX
from bench.importers.kinds import op_of, ranks_in_total
from bench.importers.nccl_fields import COLLECTIVES, DTYPES, MAX_RANKS, decode_version, infer_collective, reduction_op

#: <placement>_per_iter summaries checked against times_us (the writer prints both with %lf)
PER_ITER_STATS = ("min_us", "max_us", "p50_us", "p95_us", "p99_us")
#: the JSON writer's strings for a value it did not measure (N/A in the text table)
NOT_MEASURED = ("N/A", "n/a")
#: nccl-tests JSON is read whole (~14 bytes of memory per byte): a real one is KiBs, -I 1 with 1000
#: iterations of 30 sizes ~1 MiB
MAX_JSON_BYTES = 32 * 2**20
#: nccl-tests JSON nests 5 deep (results[i].<placement>_per_iter.times_us)
MAX_JSON_DEPTH = 32
JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _number(token: object) -> float | None:
    """A float from a token or JSON value; None for N/A, "nan" (the JSON writer's NaN) and the like."""
    if isinstance(token, bool):
        return None
    try:
        value = float(token)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return value if value == value else None


def json_depth(text: str) -> int:
    """How deep ``text``'s arrays and objects nest (brackets inside strings do not count), without
    parsing it: json.loads recurses, and a deep document would end in RecursionError."""
    brackets = NOT_BRACKET.sub("", JSON_STRING.sub("", text)).encode("ascii")
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    depth = peak = 0
    for start in range(0, len(codes), 1 << 20):  # int64 steps, 1 Mi brackets at a time: 8 MiB
        chunk = codes[start:start + (1 << 20)]
        levels = np.cumsum(np.where((chunk == ord("[")) | (chunk == ord("{")), 1, -1), dtype=np.int64) + depth
        peak, depth = max(peak, int(levels.max())), int(levels[-1])
    return peak


def load_json(text: str, source: str) -> object:
    if (depth := json_depth(text)) > MAX_JSON_DEPTH:
        raise BadInput(source, f"JSON nested {depth} deep: not nccl-tests output (it nests 5 deep; at most "
                               f"{MAX_JSON_DEPTH} is read)")
    try:
        return json.loads(text)
    except RecursionError:  # the depth check above should have caught it
        raise BadInput(source, "JSON nested too deep") from None
    except ValueError as error:
        raise BadInput(source, f"not JSON (a run killed before the file was closed?): {error}") from None


def _json_int(value: object, where: str, name: str, default: int, minimum: int = 0) -> int:
    """An integer config field (absent or null: ``default``); anything else that is not a whole number
    from ``minimum`` to int64 is a BadInput."""
    if value is None:
        return default
    number = _number(value)
    if number is None or not math.isfinite(number) or number != int(number) or not minimum <= number <= INT64_MAX:
        raise BadInput(where, f"{name}: {str(value)[:40]!r} is not a whole number >= {minimum}")
    return int(number)


def _json_time(value: object, where: str, name: str, allow_zero: bool = False) -> float | None:
    """A time field: None where not measured (null, "N/A"), else a finite time above 0 (NaN, the
    writer's "nan", is a broken measurement: BadInput, as in the text table)."""
    if value is None or (isinstance(value, str) and value.strip() in NOT_MEASURED):
        return None
    number = _number(value)
    if number is None or not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        raise BadInput(where, f"{name}: {str(value)[:40]!r} is not a time (a finite number above 0)")
    return number


def parse_json(text: str, source: str, options: ImportOptions, kind: str) -> tuple[list[Measurement], dict]:
    """nccl-tests -J (util.cu: {"version", "args", "nccl_version", "config": {..., "devices"},
    "results": [...]}), or rccl-tests' -X/-Z json report (a list of flat records)."""
    data = load_json(text, source)
    if isinstance(data, list):
        return _rccl_report(data, source, options, kind)
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise BadInput(source, "not nccl-tests -J JSON: no top-level 'results' list")
    args = data.get("args") if isinstance(data.get("args"), list) else []
    program = os.path.basename(str(args[0]))[:200] if args else ""
    collective, collective_from = infer_collective(program, source, options, "args[0]")
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    devices = [d for d in config.get("devices") or [] if isinstance(d, dict)]
    # one "devices" entry per process (its first rank's line); each process drives nthreads*ngpus ranks
    per_process = (_json_int(config.get("nthreads"), f"{source}: config", "nthreads", 1, minimum=1)
                   * _json_int(config.get("ngpus"), f"{source}: config", "ngpus", 1, minimum=1))
    iterations = config.get("iterations")
    iterations = None if iterations is None else _json_int(iterations, f"{source}: config", "iterations", 0)
    skip = _json_int(config.get("per_iter_skip"), f"{source}: config", "per_iter_skip", 0)
    warmup = _json_int(config.get("warmup_iters"), f"{source}: config", "warmup_iters", 0)
    measurements, sizes = [], []
    for index, record in enumerate(data["results"]):
        where = f"{source}: results[{index}]"
        found, size = _json_record(record, collective, where, iterations, skip)
        measurements += found
        if found:
            sizes.append((where, size, found[0]))
    if not measurements:
        raise BadInput(source, "no results in this nccl-tests JSON")
    code = data.get("nccl_version")
    code = code if isinstance(code, int | str) and not isinstance(code, bool) else None
    inferred = [f"collective={collective} from {collective_from}"] if collective_from else []
    counted = len(devices) * per_process
    if counted > MAX_RANKS:
        raise BadInput(f"{source}: config", f"{len(devices)} devices x {per_process} ranks each: more ranks than "
                                            f"any machine runs ({MAX_RANKS})")
    if devices and not options.nranks:
        inferred.append(f"nranks={counted} from {len(devices)} config.devices entries "
                        f"x nthreads*ngpus {per_process}")
    nranks = options.nranks or counted or None
    if nranks:
        for where, size, m in sizes:
            _check_size(size, m, nranks, where)
    if not options.library:
        inferred.append(f"library={'RCCL' if kind == 'rccl-tests' else 'NCCL'}"
                        + (f" {decode_version(code)} from nccl_version {code}" if code is not None else
                           f" from the tool ({kind})"))
    context = {"inferred": inferred, "nranks": counted or None,
               "hosts": sorted({str(d["hostname"])[:255] for d in devices if d.get("hostname")}),
               "warmup": warmup, "iters": iterations or 0,
               "library": "RCCL" if kind == "rccl-tests" else "NCCL",
               "library_version": decode_version(code) if code is not None else "",
               "tool_version": f"{kind} (JSON v{str(data.get('version', '?'))[:20]})"}
    return measurements, context


def _check_size(size: int, m: Measurement, nranks: int, where: str) -> None:
    ranks = ranks_in_total(m.collective, nranks)
    expected = m.count_per_rank * ITEMSIZE[m.dtype] * ranks
    if size != expected:
        raise BadInput(where, f"size {size} is not count {m.count_per_rank} x {ITEMSIZE[m.dtype]} B"
                              + (f" x {ranks} ranks" if ranks > 1 else "") + f" = {expected}: a corrupt record, "
                              "or a wrong --nranks/--collective")


def _json_record(record: object, collective: str, where: str, iterations: int | None = None,
                 per_iter_skip: int = 0) -> tuple[list[Measurement], int]:
    if not isinstance(record, dict):
        raise BadInput(where, f"not an object: {str(record)[:80]}")
    for key in ("size", "count", "type"):
        if key not in record:
            raise BadInput(where, f"no '{key}' field")
    if str(record["type"]) not in DTYPES:
        raise BadInput(where, f"type: unknown nccl-tests type {str(record['type'])[:40]!r}")
    count = _number(record["count"])
    if count is None or not math.isfinite(count) or count < 0 or count != int(count) or count > INT64_MAX:
        raise BadInput(where, f"count: not an element count: {str(record['count'])[:40]!r}")
    count = int(count)
    size = _json_int(record["size"], where, "size", 0)
    dtype = DTYPES[str(record["type"])]
    op = reduction_op(str(record.get("redop") or "sum"), collective, f"{where}: redop")
    actual = record.get("actual_iterations")
    found = []
    for placement in ("out_of_place", "in_place"):
        block = record.get(placement)  # null where a placement was not run
        if not isinstance(block, dict):
            continue
        name = "time" if "time" in block else "cpu_time"  # "cpu_time" with -C 1
        time_value = _json_time(block.get(name), f"{where}: {placement}", name, allow_zero=count == 0)
        if time_value is None:
            continue
        stats = record.get(f"{placement}_per_iter")
        stats = stats if isinstance(stats, dict) else {}
        expected, field_name = iterations, "config.iterations"
        if expected is None and actual is not None:
            expected, field_name = _json_int(actual, where, "actual_iterations", 0), "actual_iterations"
        per_iter = f"{where}: {placement}_per_iter"
        samples = per_iter_samples(stats, per_iter, expected, per_iter_skip, field_name)
        summary = {name: _json_time(stats.get(name), per_iter, name) for name in PER_ITER_STATS}
        wrong = block.get("nwrong")
        wrong = 0 if wrong is None or (isinstance(wrong, str) and wrong.strip() in NOT_MEASURED) else \
            _json_int(wrong, f"{where}: {placement}", "nwrong", 0)
        found.append(Measurement(collective, dtype, op, count, placement, time_value,
                                 time_us_min=summary["min_us"], time_us_max=summary["max_us"],
                                 time_us_p50=summary["p50_us"], time_us_p95=summary["p95_us"],
                                 time_us_p99=summary["p99_us"], n_wrong=wrong, samples_us=samples))
    return found, size


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
            shown = repr(value[:40] if isinstance(value, str) else value) \
                if isinstance(value, str | int | float | bool | None) else f"a {type(value).__name__}"
            raise BadInput(where, f"times_us[{position}]: not a time in microseconds: {shown}")
        values.append(number)
    skip = stats.get("skipped_iterations")
    skip = per_iter_skip if skip is None else _json_int(skip, where, "skipped_iterations", 0)
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
            raise BadInput(where, f"{name}: {str(stats[name])[:40]} does not summarise times_us"
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
        if record.get("gpusPerRank") is not None:
            nranks = (_json_int(record.get("ranks"), where, "ranks", 1, minimum=1)
                      * _json_int(record.get("gpusPerRank"), where, "gpusPerRank", 1, minimum=1))
        else:
            nranks = _json_int(record.get("gpus"), where, "gpus", 0, minimum=1) if "gpus" in record else 0
        if not 1 <= nranks <= MAX_RANKS:
            raise BadInput(where, "ranks x gpusPerRank (or gpus) must give a rank count")
        collective = options.collective or COLLECTIVES.get(str(record.get("name", "")).lower())
        if not collective:
            raise BadInput(where, f"name: {str(record.get('name'))[:40]!r} is not an rccl-tests collective "
                                  "(AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, SendRecv ...)")
        if str(record.get("type")) not in DTYPES:
            raise BadInput(where, f"type: unknown type {str(record.get('type'))[:40]!r}")
        size = _json_int(record.get("size"), where, "size", 0)
        dtype = DTYPES[str(record["type"])]
        ranks = ranks_in_total(collective, nranks)
        if size % (ITEMSIZE[dtype] * ranks):
            raise BadInput(where, f"size {size} is not a whole count of {ITEMSIZE[dtype]} B elements"
                                  + (f" on each of {ranks} ranks" if ranks > 1 else ""))
        count = size // ITEMSIZE[dtype] // ranks
        time_value = _json_time(record.get("time"), where, "time", allow_zero=count == 0)
        if time_value is None:
            raise BadInput(where, "time: not measured")
        op = op_of(collective, "sum") if record.get("redop") in (None, "none") else \
            reduction_op(str(record["redop"]), collective, f"{where}: redop")
        placement = "in_place" if _json_int(record["inPlace"], where, "inPlace", 0) else "out_of_place"
        wrong = record.get("wrong")
        wrong = 0 if wrong is None or (isinstance(wrong, str) and wrong.strip() in NOT_MEASURED) else \
            _json_int(wrong, where, "wrong", 0)
        measurements.append(Measurement(collective, dtype, op, count, placement, time_value, n_wrong=wrong))
        nranks_seen.add(nranks)
    if not measurements:
        raise BadInput(source, "an empty rccl-tests report")
    return measurements, {"nranks": nranks_seen.pop() if len(nranks_seen) == 1 else None, "hosts": [],
                          "warmup": 0, "iters": 0, "library": "RCCL" if kind == "rccl-tests" else "NCCL",
                          "library_version": "", "tool_version": f"{kind} (report JSON)"}
