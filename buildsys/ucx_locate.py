"""Where the UCX the binding (cython_ext/ucx, rdma) is built against lives, and whether it is new
enough: $UCX_HOME, ``pkg-config ucx``, the PyPI UCX wheel (``libucx``), in that order.

Each needs include/ucp/api/ucp.h and libucp.so in lib/, lib64/, the multiarch folder (Debian's
lib/x86_64-linux-gnu) or the folder pkg-config names. A UCX older than UCX_FLOOR (Debian 12's
1.13 lacks ucp_transport_entry_t) is passed over, and the reason each was is kept.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

from pccl_backend import UCX_FLOOR


def dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def candidates(env=os.environ) -> list[tuple[Path, Path | None, str]]:
    """(prefix, library folder where known, how found), in the order they are tried."""
    found = []
    if env.get("UCX_HOME"):
        found.append((Path(env["UCX_HOME"]), None, "$UCX_HOME"))
    if shutil.which("pkg-config"):
        asked = [subprocess.run(["pkg-config", f"--variable={name}", "ucx"], capture_output=True, text=True)
                 for name in ("prefix", "libdir")]
        if asked[0].returncode == 0 and asked[0].stdout.strip():
            libdir = asked[1].stdout.strip()
            found.append((Path(asked[0].stdout.strip()), Path(libdir) if libdir else None, "pkg-config ucx"))
    wheel = importlib.util.find_spec("libucx")
    if wheel is not None and wheel.submodule_search_locations:
        found.append((Path(next(iter(wheel.submodule_search_locations))), None, "the libucx wheel"))
    return found


def library_folder(prefix: Path, known: Path | None) -> Path | None:
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    folders = [known] if known else []
    folders += [prefix / "lib", prefix / "lib64"] + ([prefix / "lib" / multiarch] if multiarch else [])
    return next((folder for folder in folders if (folder / "libucp.so").exists()), None)


def header_version(prefix: Path) -> tuple[int, int] | None:
    header = prefix / "include" / "ucp" / "api" / "ucp_version.h"
    if not header.exists():
        return None
    text = header.read_text(errors="replace")
    major, minor = (re.search(rf"#define\s+UCP_API_{part}\s+(\d+)", text) for part in ("MAJOR", "MINOR"))
    return (int(major.group(1)), int(minor.group(1))) if major and minor else None


def find_ucx(tried: list[tuple[Path, Path | None, str]] | None = None) -> tuple[Path | None, Path | None, str]:
    """(UCX prefix, its library folder, how found and which version), or (None, None, why not)."""
    rejected = []
    for prefix, known, how in candidates() if tried is None else tried:
        folder = library_folder(prefix, known)
        version = header_version(prefix)
        if not (prefix / "include/ucp/api/ucp.h").exists() or folder is None:
            rejected.append(f"{how} ({prefix}: no include/ucp/api/ucp.h with libucp.so)")
        elif version is None or version < UCX_FLOOR:
            rejected.append(f"{how} ({prefix}): UCX {dotted(version) if version else 'of unknown version'} is "
                            f"older than the {dotted(UCX_FLOOR)} the binding needs")
        else:
            return prefix, folder, f"{how}, UCX {dotted(version)}"
    return None, None, ("; ".join(rejected) if rejected
                        else "no $UCX_HOME, no pkg-config ucx, no libucx wheel (the rdma extra)")


def runtime_dirs(folder: Path, how: str) -> list[str]:
    """Where the binding finds libucp when it loads. The wheel of an isolated build lives in a
    folder pip deletes: the rdma extra's copy in this environment (an editable install) and the
    one beside the installed package (a wheel install) are named instead."""
    if how.startswith("the libucx wheel"):
        installed = Path(sysconfig.get_path("purelib")) / "libucx" / "lib"
        built_in = [] if "pip-build-env" in str(folder) else [str(folder)]  # pip's deletes its own
        return list(dict.fromkeys([str(installed), *built_in, "$ORIGIN/../libucx/lib"]))
    return [str(folder)]
