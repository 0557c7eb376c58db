"""The one writer of a run folder's tables: results.parquet, results.csv, samples.parquet, meta.json.

Sweeps, the model and every importer write through ``RunFolderWriter``: chunks go into temp files
in the folder as they come (an import of millions of cells never holds its table), and ``commit``
renames the four into place, results.parquet last (only then is the folder a run); on any error
nothing half-written stays, and a folder the writer created goes again.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.errors import BadInput

#: the files of a run folder (results.parquet last: it makes the folder a run)
RUN_FILES = ("samples.parquet", "results.csv", "meta.json", "results.parquet")


class RunFolderWriter:
    """The four files of an imported run, written as they come into temp files in ``folder`` and
    renamed into place by ``commit``; on any error (``with`` block left by an exception) the temp
    files go, and so do the folders this writer created: nothing half-written stays."""

    def __init__(self, folder: Path, results_schema: pa.Schema | None = None,
                 samples_schema: pa.Schema | None = None, flag: str = "--out") -> None:
        self.folder = folder
        #: the tables' schemas (None: the first batch's, or at commit the empty frame's)
        self._schemas = {"results.parquet": results_schema, "samples.parquet": samples_schema}
        self._flag = flag
        self._created: list[Path] = []
        self._temps: dict[str, Path] = {}
        self._results: pq.ParquetWriter | None = None
        self._samples: pq.ParquetWriter | None = None
        self._csv = None

    def __enter__(self) -> RunFolderWriter:
        missing = []
        path = self.folder
        while not os.path.lexists(path) and path != path.parent:
            missing.append(path)
            path = path.parent
        try:
            for path in reversed(missing):
                path.mkdir()
                self._created.append(path)
            for name in RUN_FILES:
                handle, temp = tempfile.mkstemp(prefix=f".{name}.", dir=self.folder)
                os.close(handle)
                self._temps[name] = Path(temp)
        except OSError as error:
            self._abort()
            raise BadInput(self._flag, f"cannot write to {self.folder}: {error.strerror or error}") from None
        return self

    def _parquet(self, name: str, schema: pa.Schema) -> pq.ParquetWriter:
        if self._schemas[name] is None:
            self._schemas[name] = schema
        return pq.ParquetWriter(self._temps[name], self._schemas[name])

    def write(self, results: pa.RecordBatch | pa.Table, csv_text: memoryview | bytes,
              samples: pa.RecordBatch | pa.Table | None) -> None:
        """One chunk: result rows, the same rows as results.csv lines, and their samples (if any)."""
        if self._results is None:
            self._results = self._parquet("results.parquet", results.schema)
            self._csv = self._temps["results.csv"].open("wb")
            self._csv.write((",".join(self._schemas["results.parquet"].names) + "\n").encode())
        self._results.write(results)
        self._csv.write(csv_text)
        if samples is not None:
            if self._samples is None:
                self._samples = self._parquet("samples.parquet", samples.schema)
            self._samples.write(samples)

    def write_frames(self, results: pd.DataFrame, samples: pd.DataFrame) -> None:
        """Whole tables held in memory (a sweep's, the model's): results.csv as pandas writes it."""
        self.write(pa.Table.from_pandas(results, preserve_index=False),
                   results.to_csv(index=False, header=False).encode(),
                   pa.Table.from_pandas(samples, preserve_index=False))

    def commit(self, meta: dict) -> None:
        """Close the files, write meta.json, rename all four into place."""
        if self._results is None:  # no rows at all: the tables of the schemas given
            self.write_frames(pd.DataFrame(columns=self._schemas["results.parquet"].names),
                              pd.DataFrame(columns=self._schemas["samples.parquet"].names))
        if self._samples is None:
            self._samples = self._parquet("samples.parquet", self._schemas["samples.parquet"])
        self._close()
        self._temps["meta.json"].write_text(json.dumps(meta, indent=2, default=str) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        for name in RUN_FILES:  # results.parquet last: only then is the folder a run
            temp = self._temps.pop(name)
            os.chmod(temp, 0o666 & ~umask)
            os.replace(temp, temp.with_name(name))  # as mkstemp named it: one mount (files.atomic_write)

    def _close(self) -> None:
        for writer in (self._results, self._samples):
            if writer is not None:
                writer.close()
        if self._csv is not None:
            self._csv.close()
        self._results = self._samples = self._csv = None

    def _abort(self) -> None:
        try:
            self._close()
        except Exception:  # noqa: BLE001  (an error is already on its way; the temp files go anyway)
            pass
        for temp in self._temps.values():
            temp.unlink(missing_ok=True)
        self._temps.clear()
        for path in reversed(self._created):
            try:
                path.rmdir()
            except OSError:
                break  # someone else wrote there meanwhile: theirs now

    def __exit__(self, kind, value, traceback) -> None:
        if self._temps:  # not committed
            self._abort()
