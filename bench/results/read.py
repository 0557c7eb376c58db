"""The one validated reader of result folders: results.parquet, samples.parquet, meta.json.

Every command that reads results (gate, ab, plot, report, tune, model, baseline) comes through
here, so a table that does not keep the contract (bench/results/table.py's ``Row``) is one
``BadInput`` naming the file, the column and the first bad value, before any work: regular files
only (a FIFO would block), columns of the right kinds, key columns filled, counts integral, times
finite, non-negative and below ``MAX_TIME_US``, meta.json bounded in size and depth.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd

from bench.errors import BadInput
from bench.files import regular_file
from bench.plan.cells import CELL_KEY, KEY_DEFAULTS
from bench.results.table import READABLE_SCHEMAS, SAMPLE_COLUMNS, SCHEMA_VERSION, STATUSES, Row

#: no collective call takes 11.6 days; a larger "time" is garbage (and 1e308 overflows the median)
MAX_TIME_US = 1e12
#: meta.json is a few kB; a bigger one, or one nested deeper, is not ours
META_MAX_BYTES = 64 << 20
META_MAX_DEPTH = 64
#: columns every results table has, and must hold for every row
REQUIRED = ("run_id", "cell_key", "collective", "impl", "status", "nranks", "bytes_total")
#: text key columns: never NaN (an empty cell is ""), or pandas' groupby drops the row
TEXT_KEYS = ("run_id", "cell_key", "collective", "impl", "status")
SAMPLE_REQUIRED = ("run_id", "cell_key", "repeat", "launch_id", "iteration", "time_us")
#: samples are converted from Arrow this many rows at a time (bounded memory whatever the file)
SAMPLE_BATCH_ROWS = 1 << 20


def _kinds() -> dict[str, str]:
    """Each Row column's kind (text, integer, number, flag, time) from its annotation."""
    kinds = {}
    for item in fields(Row):
        annotation = str(item.type)
        kinds[item.name] = ("time" if item.name == "timestamp" else "integer" if annotation.startswith("int")
                            else "number" if annotation.startswith("float") else "flag"
                            if annotation.startswith("bool") else "text")
    return kinds


KINDS = _kinds()
#: integer columns that may be zero (the others, rank and node counts, are >= 1)
MAY_BE_ZERO = {"repeat", "warmup", "iters", "n_wrong", "warmup_discarded", "window_missed", "count_per_rank",
                "bytes_per_rank", "bytes_total", "schema_version", "iteration", "buffers_max_count", "nb_test_calls"}


def _parquet(file: Path) -> pd.DataFrame:
    regular_file(file)
    try:
        return pd.read_parquet(file)
    except MemoryError:
        raise BadInput(str(file), "too large to read into memory") from None
    except Exception as error:  # pyarrow raises several types for corrupt files
        raise BadInput(str(file), f"unreadable Parquet table ({type(error).__name__})") from None


def _bad(file: Path, column: str, frame: pd.DataFrame, mask: np.ndarray | pd.Series, what: str) -> None:
    """BadInput for the first row of ``mask`` (if any): the file, the column, the row and its value."""
    mask = np.asarray(mask, dtype=bool)
    if mask.any():
        position = int(np.flatnonzero(mask)[0])
        row, value = frame.index[position], frame[column].iloc[position]
        raise BadInput(str(file), f"column {column}, row {row}: {printable_value(value)} {what}")


def _text_column(file: Path, frame: pd.DataFrame, column: str, required: bool) -> None:
    values = frame[column]
    missing = values.isna().to_numpy()
    if required:
        _bad(file, column, frame, missing, "is empty (a key column)")
    if isinstance(values.dtype, pd.CategoricalDtype):
        categories = pd.Series(values.cat.categories)  # the check is of the distinct values
        if pd.api.types.infer_dtype(categories, skipna=True) not in ("string", "empty"):
            odd = [name for name in categories if not isinstance(name, str)]
            _bad(file, column, frame, values.isin(odd), "is not text")
        return
    if values.dtype == object or pd.api.types.is_string_dtype(values.dtype):
        if pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty"):
            return  # the common case, checked in C: 10 M sample rows in well under a second
        not_text = ~missing & ~values.map(lambda value: isinstance(value, str)).to_numpy()
        _bad(file, column, frame, not_text, "is not text")
    elif not missing.all():
        raise BadInput(str(file), f"column {column} holds {values.dtype} values, not text")


def _numeric(file: Path, frame: pd.DataFrame, column: str) -> np.ndarray:
    values = frame[column]
    if values.dtype == bool or not (pd.api.types.is_numeric_dtype(values.dtype) or values.isna().all()):
        converted = pd.to_numeric(values, errors="coerce")
        _bad(file, column, frame, converted.isna() & values.notna(), "is not a number")
        _bad(file, column, frame, values.map(lambda value: isinstance(value, bool)), "is not a number")
        values = converted
    return values.to_numpy(dtype=np.float64, na_value=np.nan)


def _integer_column(file: Path, frame: pd.DataFrame, column: str, required: bool) -> None:
    numbers = _numeric(file, frame, column)
    missing = np.isnan(numbers)
    if required:
        _bad(file, column, frame, missing, "is empty")
    present = ~missing
    with np.errstate(invalid="ignore"):
        _bad(file, column, frame, present & ~np.isfinite(numbers), "is not finite")
        _bad(file, column, frame, present & (np.abs(numbers) >= 2.0**62), "is out of range")
        _bad(file, column, frame, present & (numbers != np.round(numbers)), "is not an integer")
        least = 0 if column in MAY_BE_ZERO else 1
        _bad(file, column, frame, present & (numbers < least), f"is below {least}")


def _number_column(file: Path, frame: pd.DataFrame, column: str) -> None:
    numbers = _numeric(file, frame, column)
    present = ~np.isnan(numbers)
    with np.errstate(invalid="ignore"):
        _bad(file, column, frame, present & ~np.isfinite(numbers), "is not finite")
        _bad(file, column, frame, present & (numbers < 0), "is negative")
        if column.startswith("time_us") or column.endswith("_us"):
            _bad(file, column, frame, present & (numbers > MAX_TIME_US), f"is over {MAX_TIME_US:g} us")


def _flag_column(file: Path, frame: pd.DataFrame, column: str) -> None:
    values = frame[column]
    if values.dtype == bool:
        return
    bad = values.notna() & ~values.map(lambda value: isinstance(value, bool | np.bool_))
    _bad(file, column, frame, bad, "is not true/false")


def _time_column(file: Path, frame: pd.DataFrame) -> None:
    values = frame["timestamp"]
    if isinstance(values.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_any_dtype(values.dtype):
        return
    numbers = _numeric(file, frame, "timestamp")
    with np.errstate(invalid="ignore"):
        # seconds since 1970 up to the year 9999 (pandas' datetimes end in 2262)
        _bad(file, "timestamp", frame, ~np.isnan(numbers) & ((numbers < 0) | (numbers > 9e9)),
             "is not a time (seconds since 1970)")
    frame["timestamp"] = pd.to_datetime(numbers, unit="s", utc=True)


def _imported(frame: pd.DataFrame) -> bool:
    """Every row imported from another tool's log (suite ``import:<tool>``), whose rank count may be
    unknown (empty): the log did not say it (docs/INPUTS.md)."""
    suites = frame["suite"] if "suite" in frame.columns else pd.Series(dtype=object)
    return len(frame) > 0 and bool(suites.astype(str).str.startswith("import:").all())


def validate_results(frame: pd.DataFrame, file: Path) -> pd.DataFrame:
    """``frame`` if it keeps the results contract, with any later-added column filled empty."""
    duplicated = frame.columns[frame.columns.duplicated()]
    if len(duplicated):
        raise BadInput(str(file), f"column {duplicated[0]!r} appears twice")
    missing = [name for name in REQUIRED if name not in frame.columns]
    if missing:
        raise BadInput(str(file), f"not a results table: no column {', '.join(missing)}")
    versions = set(pd.to_numeric(frame.get("schema_version", pd.Series(dtype=float)), errors="coerce")
                   .dropna().astype(float))
    if versions - {float(version) for version in READABLE_SCHEMAS}:
        raise BadInput(str(file), f"schema version {sorted(versions)} is not {_readable()}")
    frame = frame.copy()
    for name, kind in KINDS.items():
        if name not in frame.columns:
            # written before the column existed: arm/intra/inter are "" (never NaN: they are keys),
            # buffers what those runs measured (KEY_DEFAULTS)
            frame[name] = "" if name in ("arm", "intra", "inter") else KEY_DEFAULTS.get(name)
            continue
        if kind == "text":
            _text_column(file, frame, name, name in TEXT_KEYS)
        elif kind == "integer":
            _integer_column(file, frame, name, name in REQUIRED and not (name == "nranks" and _imported(frame)))
        elif kind == "number":
            _number_column(file, frame, name)
        elif kind == "flag":
            _flag_column(file, frame, name)
        else:
            _time_column(file, frame)
    _bad(file, "status", frame, ~frame["status"].isin(STATUSES), f"is not a status ({', '.join(STATUSES)})")
    ok = frame["status"].eq("ok").to_numpy()
    p50 = pd.to_numeric(frame["time_us_p50"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    _bad(file, "time_us_p50", frame, ok & ~(p50 > 0), "is not a positive time of a cell with status ok")
    for name in ("arm", "intra", "inter"):
        frame[name] = frame[name].fillna("")
    for name, value in KEY_DEFAULTS.items():
        frame[name] = frame[name].fillna(value)
    return frame


def validate_samples(frame: pd.DataFrame, file: Path) -> pd.DataFrame:
    """``frame`` if it keeps the samples contract: keyed rows, positive finite times. Text columns
    come back categorical with "" for empty (10 M rows take tens of MB, not GB)."""
    missing = [name for name in SAMPLE_REQUIRED if name not in frame.columns]
    if missing:
        raise BadInput(str(file), f"not a samples table (no column {', '.join(missing)})")
    if "arm" not in frame.columns:  # written before same-job arms existed
        frame["arm"] = ""
    for name, value in KEY_DEFAULTS.items():  # written before the key column existed
        frame[name] = frame[name].fillna(value) if name in frame.columns else value
    for name in ("cell_key", "launch_id", "run_id"):
        if name in frame.columns:
            _text_column(file, frame, name, required=True)
    times = _numeric(file, frame, "time_us")
    with np.errstate(invalid="ignore"):
        _bad(file, "time_us", frame, ~(times > 0) | (times > MAX_TIME_US),
             f"is not a time in (0, {MAX_TIME_US:g}] us")
    if frame["time_us"].dtype != np.float64:
        frame["time_us"] = times
    for name in ("iteration", "repeat", *(key for key in CELL_KEY if KINDS.get(key) == "integer")):
        if name in frame.columns:
            _integer_column(file, frame, name, required=False)
            if frame[name].dtype.kind == "i" and len(frame) and frame[name].abs().max() < 2**31:
                frame[name] = frame[name].astype(np.int32)  # a sample row in half the memory
    for name in ("run_id", *(key for key in CELL_KEY if KINDS.get(key) == "text")):
        if name in frame.columns:
            _text_column(file, frame, name, required=False)
            frame[name] = _categorical(frame[name])
    return frame


def _categorical(values: pd.Series) -> pd.Series:
    """A text column as a categorical without NaN (empty is "")."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        # Arrow's dictionaries come with int32 codes; from_codes keeps the smallest type that holds them
        values = pd.Series(pd.Categorical.from_codes(values.cat.codes.to_numpy(), values.cat.categories),
                           index=values.index, name=values.name)
    else:
        values = values.astype("category")
    if values.isna().any():
        if "" not in values.cat.categories:
            values = values.cat.add_categories([""])
        values = values.fillna("")
    return values


def concat_samples(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Samples tables pooled, their categorical columns kept categorical (with the union of the
    categories): a plain concat would turn every one into Python strings."""
    frames = [frame for frame in frames if len(frame)]  # empty frames would turn numbers into objects
    if len(frames) <= 1:
        return frames[0].reset_index(drop=True) if frames else pd.DataFrame(columns=SAMPLE_COLUMNS)
    columns = [name for name in frames[0].columns if all(name in frame.columns for frame in frames)]
    aligned = [frame[columns] for frame in frames]  # copy-on-write: only the columns re-categorised are copied
    for name in columns:
        if all(isinstance(frame[name].dtype, pd.CategoricalDtype) for frame in aligned):
            categories = pd.api.types.union_categoricals([frame[name] for frame in aligned]).categories
            for frame in aligned:
                frame[name] = frame[name].cat.set_categories(categories)
    return pd.concat(aligned, ignore_index=True)


def read_results(paths: list[Path]) -> pd.DataFrame:
    """Concatenate results tables from run folders or parquet files, each validated."""
    frames = []
    for path in paths:
        file = path / "results.parquet" if path.is_dir() else path
        if not os.path.lexists(file):
            raise BadInput(str(path), "no results.parquet here")
        frames.append(validate_results(_parquet(file), file))
    if not frames or all(frame.empty for frame in frames):
        raise BadInput(" ".join(map(str, paths)), "the results tables are empty")
    return pd.concat([frame for frame in frames if len(frame)], ignore_index=True)


def read_samples(folder: Path) -> pd.DataFrame:
    """The samples table of a run folder (an empty one when the run has none), validated."""
    file = folder / "samples.parquet"
    if not os.path.lexists(file):
        return pd.DataFrame(columns=SAMPLE_COLUMNS)
    regular_file(file)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pq.read_schema(file)
        text = [item.name for item in schema if pa.types.is_string(item.type) or pa.types.is_large_string(item.type)]
        # Text as dictionaries straight from the file (categoricals, never one Python string per row),
        # a row group at a time, so that the Arrow copy of the whole table never exists beside the frame.
        parquet = pq.ParquetFile(file, read_dictionary=text)
        parts, first = [], 0
        for batch in parquet.iter_batches(batch_size=SAMPLE_BATCH_ROWS):
            part = batch.to_pandas(split_blocks=True, self_destruct=True)
            del batch
            part.index = pd.RangeIndex(first, first + len(part))  # errors name the row of the file
            first += len(part)
            parts.append(part)
            parts[-1] = validate_samples(part, file)  # each part narrowed before the next is read
        if not parts:
            parts = [validate_samples(schema.empty_table().to_pandas(), file)]
        pa.default_memory_pool().release_unused()
    except MemoryError:
        raise BadInput(str(file), "too large to read into memory") from None
    except BadInput:
        raise
    except Exception as error:  # pyarrow raises several types for corrupt files
        raise BadInput(str(file), f"unreadable Parquet table ({type(error).__name__})") from None
    return concat_samples(parts) if len(parts) > 1 else parts[0].reset_index(drop=True)


def _depth(value: object) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack += [(child, depth + 1) for child in item.values()]
        elif isinstance(item, list):
            stack += [(child, depth + 1) for child in item]
    return deepest


def read_meta(folder: Path) -> dict:
    """meta.json of a run folder ({} when there is none): a bounded JSON object of this schema."""
    file = folder / "meta.json"
    if not os.path.lexists(file):
        return {}
    regular_file(file)
    if file.stat().st_size > META_MAX_BYTES:
        raise BadInput(str(file), f"larger than {META_MAX_BYTES >> 20} MiB: not a run's meta.json")
    try:
        meta = json.loads(file.read_bytes())
    except RecursionError:
        raise BadInput(str(file), f"nested deeper than {META_MAX_DEPTH} levels") from None
    except (OSError, ValueError) as error:
        raise BadInput(str(file), f"unreadable meta.json ({type(error).__name__})") from None
    if not isinstance(meta, dict):
        raise BadInput(str(file), f"not a JSON object but {type(meta).__name__}")
    if _depth(meta) > META_MAX_DEPTH:
        raise BadInput(str(file), f"nested deeper than {META_MAX_DEPTH} levels")
    version = meta.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or version not in READABLE_SCHEMAS:
        raise BadInput(str(file), f"schema version {printable_value(version)} is not {_readable()}")
    return meta


def _readable() -> str:
    """The schema versions this reader takes, for a message: ``1 or 2``."""
    return " or ".join(map(str, READABLE_SCHEMAS))


def printable_value(value: object) -> str:
    """A short repr of a value from a file, for a one-line message."""
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 60 else text[:57] + "..."
