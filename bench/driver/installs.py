"""Other installs of this project as arms of a sweep (an arm's ``install:``): a branch against main in
one run. Each install's own Python runs its own worker; it is asked once, before the first launch,
what it is and whether it reads this install's plans.

An install is given as a venv (``PATH/bin/python``), a checkout with its venv
(``PATH/.venv/bin/python``) or a Python executable. Its worker imports its own ``bench``: the job
starts in the folder that install's ``bench`` lives in (``home``), as this install's jobs start in
``PACKAGE_HOME``. With mpiexec, the launcher beside its Python starts its jobs (the MPI library it
loads); under srun the site's launcher does, so the two must load the same MPI family.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.errors import BadInput
from collectives.version import VERSION_VARIABLE

#: seconds an install may take to say what it is (imports pandas and mpi4py; a cold cache is slow)
PROBE_TIMEOUT_S = 120

#: run by the other install's Python, from a neutral folder: what it is, and whether it reads a plan
PROBE = """
import json, sys
import mpi4py
mpi4py.rc.initialize = False
mpi4py.rc.finalize = False
from mpi4py import MPI
from bench import __version__
from bench.files import PACKAGE_ROOT
from bench.results.table import SCHEMA_VERSION
try:
    from bench.driver.launchers.base import mpi_flavour
    from bench.driver.provenance import git_sha
    worker = "bench.rank.worker"
except ImportError:  # an install from before bench/run/ was split in two (pre-split names)
    from bench.run.launchers.base import mpi_flavour  # pre-split
    from bench.run.provenance import git_sha  # pre-split
    worker = "bench.run.worker"  # pre-split
facts = {"home": str(PACKAGE_ROOT), "version": __version__, "git_sha": git_sha(),
         "schema_version": SCHEMA_VERSION, "flavour": mpi_flavour(),
         "mpi_library": MPI.Get_library_version().splitlines()[0].strip(), "plan": "", "worker": worker}
if len(sys.argv) > 1:
    from bench.plan.cells import LaunchPlan
    try:
        LaunchPlan.read(sys.argv[1])
    except Exception as error:
        facts["plan"] = f"{type(error).__name__}: {error}"
print(json.dumps(facts))
"""


@dataclass(frozen=True)
class Install:
    """What another install is, as it says itself."""

    #: as the suite gave it
    given: str
    python: str
    #: the folder its ``bench`` package is in: its jobs start there
    home: str
    version: str
    git_sha: str
    schema_version: int
    #: mpich | openmpi | other, and the library's own first line
    flavour: str
    mpi_library: str
    #: the module its jobs run (``python -m``): bench.rank.worker, or in an install from before the
    #: driver/rank split its old name (an arm of main against a branch keeps working across it)
    worker: str = "bench.rank.worker"

    @property
    def mpiexec(self) -> str | None:
        """The mpiexec beside its Python (the one its MPI wheel installed), if any."""
        beside = Path(self.python).parent / "mpiexec"
        return str(beside) if beside.exists() else None

    def job_env(self) -> dict[str, str]:
        """What its ranks are told instead of this install's (the version, looked up once)."""
        return {VERSION_VARIABLE: self.version}

    def record(self) -> dict:
        return asdict(self)


def python_of(given: str) -> Path | None:
    """The Python of an install given as a venv, a checkout with a .venv, or a Python executable."""
    path = Path(given).expanduser()
    for candidate in (path / "bin" / "python", path / ".venv" / "bin" / "python", path):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate.absolute()
    return None


def _ask(python: Path, args: list[str], where: str, given: str) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PYTHONHOME", VERSION_VARIABLE)}
    try:
        done = subprocess.run([str(python), "-c", PROBE, *args], capture_output=True, text=True, cwd="/",
                              env=env, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise BadInput(where, f"{given}: its Python did not answer within {PROBE_TIMEOUT_S} s") from None
    except OSError as error:
        raise BadInput(where, f"{given}: cannot run {python}: {error.strerror or error}") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        try:
            facts = json.loads(lines[-1])
        except ValueError:
            facts = None
        if isinstance(facts, dict):
            return facts
    last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
    raise BadInput(where, f"{given}: {python} cannot run pccl-bench ({last})")


def probe_install(given: str, where: str, schema_version: int, plan_path: Path | None = None) -> Install:
    """The install at ``given``; BadInput, naming ``where`` and the value, when there is none, when it
    writes rows of another schema version, or when it cannot read the plan at ``plan_path``."""
    python = python_of(given)
    if python is None:
        raise BadInput(where, f"{given}: no install there (a venv with bin/python, a checkout with "
                              ".venv/bin/python, or a Python executable)")
    facts = _ask(python, [str(plan_path)] if plan_path else [], where, given)
    try:
        install = Install(given, str(python), str(facts["home"]), str(facts["version"]), str(facts["git_sha"]),
                          int(facts["schema_version"]), str(facts["flavour"]), str(facts["mpi_library"]),
                          str(facts.get("worker", "bench.rank.worker")))
    except (KeyError, TypeError, ValueError):
        raise BadInput(where, f"{given}: {python} did not say what it is (not a pccl-bench install?)") from None
    if install.schema_version != schema_version:
        raise BadInput(where, f"{given}: writes result schema version {install.schema_version}; this install "
                              f"reads version {schema_version}")
    if facts.get("plan"):
        raise BadInput(where, f"{given}: cannot read this install's launch plans ({facts['plan'][:300]}); "
                              "compare installs whose plan formats agree")
    return install
