"""What the lab benchmarks share: a lab of their own for the run, commands on its login host, and
their command line (``--rounds``, ``--json``)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lab import lab as lab_ops  # noqa: E402


def arguments(doc: str, rounds: int, extra: Callable[[argparse.ArgumentParser], None] | None = None
              ) -> argparse.Namespace:
    """``--rounds``, ``--json`` and what ``extra`` adds to the parser."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--json", type=Path, help="also write the per-round figures here")
    if extra:
        extra(parser)
    return parser.parse_args()


def link_slug(name: str) -> str:
    """A link setting's name as a file name: ``50 us + 1 Gbit/s`` -> ``50us-1Gbits``."""
    return name.replace(" ", "").replace("/", "").replace("+", "-")


@contextmanager
def own_lab(name: str, hosts: int) -> Iterator[None]:
    """A fresh lab ``name`` of ``hosts`` hosts for the benchmark, taken down after it."""
    reason = lab_ops.unavailable()
    if reason:
        raise SystemExit(f"no lab here: {reason}")
    lab_ops.down(name)
    # a kill (SIGTERM) unwinds like an exception, so the lab still comes down
    previous = signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    lab_ops.up(name, hosts)
    try:
        yield
    finally:
        lab_ops.down(name)
        signal.signal(signal.SIGTERM, previous)


def on_login(name: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``argv`` on the lab's login host, in the checkout, with the checkout importable."""
    prefix, env = lab_ops.exec_prefix(name, "login", str(ROOT))
    return subprocess.run([*prefix, *argv], env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def sweep_on_login(name: str, suite: Path, hosts: str, folder: Path, args: list[str] = (), env: dict | None = None,
                   timeout: float = 3600) -> Path:
    """``pccl-bench run sweep SUITE --hosts HOSTS ARGS --out FOLDER/run`` on the lab's login host (``env``
    set for it); the run's folder, or the benchmark ends with the sweep's output."""
    out = folder / "run"
    prefix = ["env", *(f"{key}={value}" for key, value in (env or {}).items())] if env else []
    result = on_login(name, [*prefix, sys.executable, "-m", "bench", "run", "sweep", str(suite), "--hosts", hosts,
                             *args, "--out", str(out)], timeout)
    if result.returncode != 0:
        raise SystemExit(f"sweep failed ({result.returncode}): {result.stdout[-1500:]} {result.stderr[-1500:]}")
    return out
