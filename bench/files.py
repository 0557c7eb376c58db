"""Files every stage writes: atomically (temp file in the same folder, then rename)."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

#: the folder that holds the bench package (a checkout's root: suites/, results/ beside it)
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
#: where a wheel puts the shipped suites (pyproject.toml, [tool.setuptools.data-files])
SHIPPED = Path(sys.prefix) / "share" / "pccl-bench"


def project_folder(name: str) -> Path:
    """``name`` (``suites``, ``suites/machines``) in the working directory, else in the checkout the
    package runs from, else as a wheel installed it (pip, pipx: ``<prefix>/share/pccl-bench``)."""
    for base in (Path(), PACKAGE_ROOT, SHIPPED):
        if (base / name).is_dir():
            return base / name
    return PACKAGE_ROOT / name


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temp file in the same folder, then rename over ``path``."""
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(handle)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temp, 0o666 & ~umask)  # mkstemp makes 0600; results are as readable as any other file
    try:
        write(Path(temp))
        # beside the temp as mkstemp named it (absolutely): a process that entered another mount
        # namespace (pccl-bench lab exec) keeps a working directory on another mount of the same
        # folder than the absolute name, and a rename across mounts fails (EXDEV)
        os.replace(temp, Path(temp).with_name(path.name))
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


#: the committed baselines of the gate: written only by ``pccl-bench baseline update``
BASELINES = Path("results") / "baselines"
#: the longest file name most file systems take (ext4, xfs, tmpfs)
NAME_MAX = 255
IN_BASELINES = "baselines change only through `pccl-bench baseline update`"


def _first_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (what creating ``path`` would write into)."""
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def _names_fit(path: Path, flag: str) -> None:
    """Every part of ``path`` within NAME_MAX (a longer one makes even a stat fail)."""
    from bench.errors import BadInput

    too_long = next((part for part in path.parts if len(part.encode(errors="surrogateescape")) > NAME_MAX), None)
    if too_long is not None:
        raise BadInput(flag, f"the name {too_long[:40]}... is longer than {NAME_MAX} bytes")


def _creatable(path: Path, flag: str, shown: Path | None = None) -> None:
    """Whether ``path`` can be created: its nearest existing ancestor is a writable folder."""
    from bench.errors import BadInput  # errors is a leaf module; imported here to keep files.py import-free

    base = _first_existing(path.parent)
    if not base.is_dir():
        raise BadInput(flag, f"{shown or path}: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise BadInput(flag, f"{shown or path}: {base} is not writable")


def inside_baselines(path: Path) -> bool:
    """Whether ``path`` is results/baselines/ or inside it: the working directory's, or the checkout's
    the package runs from (a run started from a scratch folder must not write the committed ones)."""
    resolved = path.resolve()
    roots = {BASELINES.resolve(), (PACKAGE_ROOT / BASELINES).resolve()}
    return any(resolved == root or root in resolved.parents for root in roots)


def output_file(path: Path | None, flag: str) -> Path | None:
    """``path`` checked as a file to be written, before any work: not a folder, not under a file,
    no over-long name, in a folder that exists or can be created, not inside results/baselines/."""
    from bench.errors import BadInput

    if path is None:
        return None
    _names_fit(path, flag)
    if path.is_dir():
        raise BadInput(flag, f"{path} is a folder, not a file")
    if os.path.lexists(path) and not path.is_file():
        raise BadInput(flag, f"{path} exists and is not a regular file")
    _creatable(path, flag)
    if inside_baselines(path):
        raise BadInput(flag, f"{path} is inside {BASELINES}/: {IN_BASELINES}")
    return path


def output_folder(path: Path, flag: str, *, baseline_ok: bool = False) -> Path:
    """``path`` checked as a folder to be written into, before any work."""
    from bench.errors import BadInput

    _names_fit(path, flag)
    if os.path.lexists(path) and not path.is_dir():
        raise BadInput(flag, f"{path} is a file, not a folder")
    _creatable(path / "x", flag, shown=path)
    if not baseline_ok and inside_baselines(path):
        raise BadInput(flag, f"{path} is inside {BASELINES}/: {IN_BASELINES}")
    return path


def measured_run(path: Path) -> bool:
    """Whether ``path`` holds a measured run: a results table with a row that no model wrote
    (``status`` other than ``modelled``), or one that cannot be read (never overwrite it)."""
    table = path / "results.parquet"
    if not os.path.lexists(table):
        return False
    try:
        import pyarrow.parquet as pq

        statuses = set(pq.read_table(table, columns=["status"]).column("status").to_pylist())
    except Exception:  # unreadable or without a status column: somebody's data
        return True
    return statuses != {"modelled"} and bool(statuses)


def slug(name: object, fallback: str = "x") -> str:
    """A file-name part made from data (collective or implementation names): letters, digits and
    ``-_.+`` only, no leading dot, at most 80 characters, so it can never leave its folder."""
    text = "".join(char if char.isascii() and (char.isalnum() or char in "-_.+") else "_" for char in str(name))
    text = text.lstrip(".")[:80]
    return text or fallback


def regular_file(path: Path) -> Path:
    """``path`` if it is a regular file (following links); a FIFO, device, folder or loop is a BadInput."""
    from bench.errors import BadInput

    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise BadInput(str(path), f"cannot be read ({error.strerror or type(error).__name__})") from None
    if not stat.S_ISREG(mode):
        what = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a socket"
                if stat.S_ISSOCK(mode) else "a device")
        raise BadInput(str(path), f"is {what}, not a regular file")
    return path
