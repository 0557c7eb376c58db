"""The files the ``pccl-bench model`` commands write: every output checked before the work (writable,
none the same as another or as a file read, none inside a measured run), and written whole."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.cli.model.flags import quoted
from bench.errors import BadInput
from bench.files import atomic_write, measured_run, output_file, output_folder

#: files `model run` writes into its folder (each checked before the work)
RUN_FILES = ("results.parquet", "results.csv", "samples.parquet", "meta.json")
#: files of a run folder that no model command may overwrite when the folder holds a measured run
RUN_FOLDER_FILES = (*RUN_FILES, "samples.csv")


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop: compare the path as given
        return path.absolute()


def _input_files(paths: list[Path]) -> dict[Path, str]:
    """The files a command reads (a run folder's tables and meta), resolved: no output may replace them."""
    files = {}
    for path in paths:
        folder, named = (path, []) if path.is_dir() else (path.parent, [path])
        for item in [*named, *(folder / name for name in RUN_FOLDER_FILES)]:
            files.setdefault(_resolved(item), f"an input of this command ({path})")
    return files


def check_outputs(files: list[tuple[Path | None, str]], inputs: list[Path]) -> None:
    """Every output file writable, none the same as another or as a file read, none inside a measured run
    (its tables and meta), all checked before the work."""
    taken = _input_files(inputs)
    for path, flag in files:
        if path is None:
            continue
        output_file(path, flag)
        if path.name in RUN_FOLDER_FILES and measured_run(path.parent):
            raise BadInput(flag, f"{path} would overwrite a file of the measured run in {path.parent}")
        key = _resolved(path)
        if key in taken:
            raise BadInput(flag, f"{path} is also {taken[key]}")
        taken[key] = f"the file of {flag}"


def plot_file(path: Path | None, flag: str) -> Path | None:
    """A figure path whose suffix matplotlib can write (checked before the work; none: PNG)."""
    if path is None or not path.suffix:
        return path
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    formats = FigureCanvasAgg.get_supported_filetypes()
    if path.suffix[1:].lower() not in formats:
        raise BadInput(flag, f"{path}: {quoted(path.suffix)} is not a figure format ({', '.join(sorted(formats))})")
    return path


def write_csv(table: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda temp: table.to_csv(temp, index=False))


def run_folder(folder: Path) -> Path:
    """The folder of `model run`: writable, and not a measured run (its table is somebody's data)."""
    output_folder(folder, "--out")
    if measured_run(folder):
        raise BadInput("--out", f"{folder} holds a measured run (results.parquet with measured rows): "
                                "`model run` writes a new folder or one it wrote itself")
    for name in RUN_FILES:
        output_file(folder / name, "--out")
    return folder
