from __future__ import annotations

import os
from functools import lru_cache

#: the driver looks the version up once and hands it to every rank (bench/driver/launchers/base.py job_env):
#: importlib.metadata costs each rank ~250 metadata operations (benchmarks/worker_start.py)
VERSION_VARIABLE = "PCCL_BENCH_VERSION"


@lru_cache(maxsize=1)
def library_version() -> str:
    given = os.environ.get(VERSION_VARIABLE)
    if given:
        return given
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pccl-bench")
    except PackageNotFoundError:
        return "dev"
