"""Files every stage writes: atomically (temp file in the same folder, then rename)."""

from __future__ import annotations

import os
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
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
