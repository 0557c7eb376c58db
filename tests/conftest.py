"""Shared helpers: find mpiexec, run scripts under MPI, run the CLI as a subprocess.

Multi-rank tests never initialise MPI inside the pytest process: they spawn
``mpiexec -n N python script`` (REFERENCE.md §5), which works with every MPI.
Every subprocess gets this checkout first on PYTHONPATH, so the tests exercise
the tree they live in.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.driver.job import end_job

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
MPI_SCRIPTS = TESTS / "mpi_scripts"
#: inputs the importers read (real tool outputs)
DATA = TESTS / "data"
#: a valid two-rank suite that runs in seconds; tests change one field at a time
TINY_SUITE = {
    "name": "tiny",
    "collectives": ["allgather", "reduce_scatter", "allreduce"],
    "implementations": ["mpi", {"impl": "pccl-flat", "algorithms": ["ring"]}],
    "ranks": [2],
    "sizes": {"min": "8B", "max": "64B"},
    "timing": {"warmup": 1, "iters": 3, "min_iters": 1, "budget_s": 0},
}

@pytest.fixture(scope="module")
def one_lab_at_a_time():
    """The lab tests and the Slurm tests each drive namespace hosts on the lab subnet and time sweeps
    across them; under pytest-xdist (``make test``: two workers, a file per worker) their files would
    run at once on two workers: one waits for the other's file to end."""
    with open(Path(os.environ.get("TMPDIR", "/tmp")) / "pccl-bench-tests-lab.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
        fcntl.flock(lock, fcntl.LOCK_UN)


def sigint_default() -> None:
    """``preexec_fn`` of a sweep a test interrupts: SIGINT as Ctrl-C delivers it, also when the tests
    run in a background job (a shell starts those with SIGINT ignored, and children inherit it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


#: every run of the CLI or of mpiexec is killed after this long unless a test says otherwise
DEFAULT_TIMEOUT_S = 120


def find_mpiexec() -> str | None:
    """mpiexec beside this Python (the venv's MPICH wheel), then $MPIEXEC, then PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    from_env = os.environ.get("MPIEXEC")
    if from_env:
        return from_env
    return shutil.which("mpiexec")


def subprocess_env(nranks: int = 1, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process: this checkout importable, MPI tuned for the core count."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    # The same settings the sweep launcher gives its jobs (oversubscription aids only when ranks
    # outnumber cores; harmful otherwise).
    from bench.driver.launchers import MachineLoad, mpi_flavour
    from bench.driver.launchers.mpiexec import Mpiexec

    env.update(Mpiexec.for_flavour(mpi_flavour()).job_env(MachineLoad.here(nranks), {}))
    # Open MPI refuses root and oversubscription unless told (harmless for MPICH).
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
    env.update(extra or {})
    return env


def _run(argv: list[str], *, timeout: float, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``argv`` in its own process group; on timeout kill the whole group (every MPI rank)."""
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        end_job(process)  # the launcher's own: SIGTERM the group, then SIGKILL what is left
        stdout, stderr = process.communicate()
        pytest.fail(f"timed out after {timeout} s: {' '.join(argv)}\nstdout:\n{stdout}\nstderr:\n{stderr}")
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def run_mpi(
    n: int,
    script_path: str | Path,
    *args: object,
    timeout: float = DEFAULT_TIMEOUT_S,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """``mpiexec -n N python script args...`` from the repository root; skips if there is no mpiexec."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec beside this Python, in $MPIEXEC or on PATH")
    argv = [mpiexec, "-n", str(n), sys.executable, str(script_path), *map(str, args)]
    return _run(argv, timeout=timeout, cwd=ROOT, env=subprocess_env(n, env))


def run_cli(
    *args: object,
    timeout: float = DEFAULT_TIMEOUT_S,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    prefix: list[str] | None = None,
) -> subprocess.CompletedProcess:
    """``python -m bench args...`` from the repository root (or ``cwd``); ``prefix``: what runs it
    elsewhere (``pccl-bench lab exec login --``, ``scripts/local-slurm.sh exec``)."""
    argv = [*(prefix or []), sys.executable, "-m", "bench", *map(str, args)]
    return _run(argv, timeout=timeout, cwd=cwd or ROOT, env=subprocess_env(1, env))


def sweep_table(tmp_path: Path, suite: dict, timeout: float):
    """Run ``suite`` (a mapping) through ``pccl-bench run sweep``; it must exit 0; its results table."""
    import pandas as pd
    import yaml

    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    result = run_cli("run", "sweep", path, "--out", tmp_path / "out", timeout=timeout)
    assert result.returncode == 0, describe(result)
    return pd.read_parquet(tmp_path / "out" / "results.parquet")


def describe(result: subprocess.CompletedProcess) -> str:
    """A failed subprocess, readable in an assertion message."""
    return (
        f"command: {' '.join(map(str, result.args))}\nexit code: {result.returncode}\n"
        f"--- stdout ---\n{result.stdout[-4000:]}\n--- stderr ---\n{result.stderr[-4000:]}"
    )


#: what a test run may leave in the checkout: the interpreter's and the test tools' own caches
CHECKOUT_CACHES = frozenset({".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache"})


def checkout_files(top: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``top`` but the caches, ignored build files included (``git status`` does not see
    cython_ext/_build_info.py): path -> (size, mtime in ns)."""
    files = {}
    for folder, subfolders, names in os.walk(top):
        subfolders[:] = [name for name in subfolders if name not in CHECKOUT_CACHES]
        for name in names:
            path = os.path.join(folder, name)
            try:
                facts = os.lstat(path)
            except FileNotFoundError:
                continue
            files[os.path.relpath(path, top)] = (facts.st_size, facts.st_mtime_ns)
    return files


def checkout_changes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    """What changed between two ``checkout_files``: one line a file, sorted."""
    return sorted([f"added {path}" for path in after.keys() - before.keys()]
                  + [f"removed {path}" for path in before.keys() - after.keys()]
                  + [f"changed {path}" for path in before.keys() & after.keys() if before[path] != after[path]])


def pytest_sessionstart(session: pytest.Session) -> None:
    # Every test writes under its own temporary folder: the run must leave the checkout as it found it.
    if not hasattr(session.config, "workerinput"):  # the xdist controller (or a serial run) only
        session.config.stash[_CHECKOUT_KEY] = checkout_files(ROOT)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_CHECKOUT_KEY, None)
    if before is None or session.config.option.collectonly:
        return
    changes = checkout_changes(before, checkout_files(ROOT))
    if changes:
        shown = "\n  ".join(changes[:20]) + (f"\n  ... and {len(changes) - 20} more" if len(changes) > 20 else "")
        print(f"\nthe test run changed the checkout {ROOT} (tests must write under their own tmp folders):"
              f"\n  {shown}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_CHECKOUT_KEY = pytest.StashKey[dict]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mpi: spawns mpiexec as a subprocess")
    config.addinivalue_line(
        "markers", "slurm: runs sweeps through Slurm (scripts/local-slurm.sh up); skipped where none answers"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The install tests (minutes each) first: pytest-xdist hands out files in this order, so they start
    # at once on different workers instead of running alone at the end.
    items.sort(key=lambda item: "install" not in item.keywords)
    if find_mpiexec() is not None:
        return
    skip = pytest.mark.skip(reason="no mpiexec beside this Python, in $MPIEXEC or on PATH")
    for item in items:
        if "mpi" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


def console_text(tables) -> str:
    """Rich tables as the terminal shows them (200 columns), whitespace folded: for text assertions."""
    import io

    from rich.console import Console

    out = Console(width=200, record=True, file=io.StringIO())
    for table in tables:
        out.print(table)
    return " ".join(out.export_text().split())
