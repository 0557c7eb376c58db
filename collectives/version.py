from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def library_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pccl-bench")
    except PackageNotFoundError:
        return "dev"
