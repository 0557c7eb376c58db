"""Python start-up cost of one MPI rank, as a shared filesystem sees it (issue 29).

    .venv/bin/python benchmarks/worker_start.py [--repeats 5] [--tree before=/copy/of/a/checkout]
        [--ranks-per-node 8] [--rate 50000] [--json benchmarks/data/perf/startup.json]

Every rank runs ``python -m bench.rank.worker PLAN.json`` as bench/driver/launchers/ starts it (``command``,
``job_env``, its working directory). Here a 2-rank job of two small all-reduce cells (mpi, pccl-flat
ring) runs under mpiexec as MPMD with rank 0 alone under ``strace -f -y``, counted from exec to its
first cell (its first ``{"event": "start"``) and to its exit. Metadata ops: every call that names a
path (open, stat, access, readlink, execve, mkdir, rename...; failed ones too: a missing file is a
lookup at the metadata server as well) and each getdents64 that returned entries; fstat of an open
file is counted apart (fd). Where: the venv, the project tree, the Python install (stdlib), the run
folder (plan, part), node-local (/proc /sys /dev /etc /usr /lib /run /var, sockets), other; shared =
all but node-local. Wall (no strace, median of --repeats interleaved rounds): rank 0's top-level
``-X importtime`` figures summed (lazy imports too), mpiexec start -> rank 0's first cell, -> the end.

Variants: this tree; each ``--tree NAME=PATH`` (another checkout's bench/collectives/cython_ext with
this venv, e.g. a copy taken before a change); site options for the advice in docs/PERFORMANCE-SCALE.md:
no __pycache__ (read-only, writable), the imported stdlib in a zip, the project in a zip, both, and
PYTHONPYCACHEPREFIX on node-local disk (warmed by one run). The extrapolation multiplies the shared
ops to the first cell by the ranks (no client cache: every rank's lookups reach the metadata server)
or by the nodes (per-node cache: a node's first rank pays them, the others hit the client's cache).
"""

from __future__ import annotations

import argparse
import json
import os
import py_compile
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's bench, also where the script runs from a copy of one
MARKER = '{\\"event\\": \\"start\\"'
SYSCALL = re.compile(r"^\d+\s+(\w+)\((.*)$")
FD_PATH = re.compile(r"^(?:AT_FDCWD|-?\d+)<([^>]*)>")
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
RESULT = re.compile(r"\)\s+=\s+(-?\d+)")
#: calls whose first argument is a directory fd and whose second is the path
AT_CALLS = {"openat", "openat2", "newfstatat", "fstatat64", "statx", "faccessat", "faccessat2", "readlinkat",
            "mkdirat", "unlinkat", "renameat", "renameat2", "utimensat", "fchmodat", "fchownat", "linkat",
            "execveat", "name_to_handle_at"}
#: answered by the kernel alone
NOT_METADATA = {"getcwd"}
NODE_LOCAL = ("/proc", "/sys", "/dev", "/etc", "/usr", "/lib", "/lib64", "/run", "/var", "socket:", "pipe:",
              "anon_inode:", "/memfd:")
CATEGORIES = ("venv", "project", "stdlib", "run folder", "node-local", "other")


@dataclass
class Trace:
    """What rank 0 did, to its first cell (``start``) and over the whole job (``job``)."""

    start: Counter = field(default_factory=Counter)
    job: Counter = field(default_factory=Counter)
    #: (call, path) of the shared ops to the first cell, and the shared files it opened
    start_paths: set = field(default_factory=set)
    opened: set = field(default_factory=set)
    syscalls: Counter = field(default_factory=Counter)
    reached_cell: bool = False

    @staticmethod
    def _phase(counts: Counter) -> dict:
        return {**{name: counts[name] for name in CATEGORIES},
                "shared": sum(counts[name] for name in CATEGORIES if name != "node-local"),
                "total": sum(counts[name] for name in CATEGORIES), "shared_failed": counts["failed"],
                "fd_stats": counts["fd"], "pyc_written": counts["pyc_written"], "compiled": counts["compiled"]}

    def summary(self) -> dict:
        sizes = [os.path.getsize(path) for path in self.opened if os.path.isfile(path)]
        return {"to_first_cell": {**self._phase(self.start), "distinct_shared_paths": len(self.start_paths),
                                  "shared_files_opened": len(sizes), "shared_bytes_opened": sum(sizes)},
                "to_exit": self._phase(self.job), "by_syscall_to_exit": dict(self.syscalls.most_common())}


def category(path: str, roots: dict[str, Path]) -> str:
    """Where a path lies: the venv before the project (a .venv inside the checkout is the venv's)."""
    for name in ("venv", "run folder", "project", "stdlib"):
        if path == str(roots[name]) or path.startswith(str(roots[name]) + "/"):
            return name
    return "node-local" if path.startswith(NODE_LOCAL) else "other"


def _operation(name: str, rest: str, cwd: str) -> tuple[str, str, str]:
    """(kind, path, cwd) of one traced call: kind path | fd | readdir."""
    base, strings = FD_PATH.match(rest), STRING.findall(rest)
    if name == "getdents64":
        return "readdir", base.group(1) if base else "", cwd
    if name not in AT_CALLS:
        return "path", os.path.normpath(os.path.join(cwd, strings[0] if strings else "")), cwd
    where = base.group(1) if base else cwd
    cwd = where if rest.startswith("AT_FDCWD<") and base else cwd
    if not strings or strings[0] == "" and "AT_EMPTY_PATH" in rest:
        return "fd", where, cwd
    return "path", os.path.normpath(os.path.join(where, strings[0])), cwd


def parse_trace(lines: list[str], roots: dict[str, Path], cwd: str) -> Trace:
    trace = Trace()
    for line in lines:
        found = SYSCALL.match(line)
        if not found or found.group(1) in NOT_METADATA:
            continue  # exits, signals, "<... resumed>" halves
        name, rest = found.groups()
        if name == "write":
            trace.reached_cell = trace.reached_cell or MARKER in rest
            continue
        kind, path, cwd = _operation(name, rest, cwd)
        result = RESULT.search(rest)
        if kind == "readdir" and result and result.group(1) == "0":
            continue  # the end of a listing: no new entries fetched
        counts = [trace.job] if trace.reached_cell else [trace.job, trace.start]
        where = category(path, roots)
        failed = " = -1 " in rest
        for counted in counts:
            counted["fd" if kind == "fd" else where] += 1
            if kind == "fd":
                continue
            counted["failed"] += failed and where != "node-local"
            counted["pyc_written"] += "O_CREAT" in rest and ".pyc" in path
            # a source is opened only to compile it: its .pyc is missing or stale
            counted["compiled"] += name == "openat" and path.endswith(".py") and not failed
        trace.syscalls[name if kind != "fd" else f"{name} (fd)"] += 1
        if not trace.reached_cell and kind != "fd" and where != "node-local":
            trace.start_paths.add((name, path))
            if name in ("open", "openat") and not failed:
                trace.opened.add(path)
    return trace


@dataclass
class Variant:
    name: str
    tree: Path
    env: dict[str, str] = field(default_factory=dict)
    drop_env: tuple[str, ...] = ()
    #: PYTHONPYCACHEPREFIX made fresh (empty) before every run
    fresh_pycache: bool = False
    cwd: Path | None = None
    #: run once, unmeasured, before the trace (fills a pycache prefix)
    warm: bool = False


def write_plan(folder: Path, nranks: int) -> Path:
    from bench.plan.cells import Cell, LaunchPlan, TimingPlan

    cells = [Cell("allreduce", impl, algorithm, "", "", "host", nranks, 1, nranks, False, "float32", "sum",
                  "out_of_place", 16, 64, 64, "sync") for impl, algorithm in (("mpi", "native"), ("pccl-flat", "ring"))]
    plan = LaunchPlan("startup", f"n{nranks}-startup", nranks, nranks, None, str(folder / "part.jsonl"),
                      TimingPlan(warmup=1, iters=2, min_iters=2, budget_s=0.0), True, cells)
    path = folder / "plan.json"
    plan.write(path)
    return path


def job(variant: Variant, plan: Path, nranks: int, first_prefix: list[str], first_flags: list[str],
        folder: Path) -> tuple[list[str], dict[str, str], str]:
    """The mpiexec MPMD argv (rank 0: ``first_prefix`` + the worker with ``first_flags``), env, cwd."""
    from bench.driver.launchers import PACKAGE_HOME, MachineLoad, mpi_flavour, worker_program
    from bench.driver.launchers.mpiexec import Mpiexec, find_mpiexec

    worker = worker_program([str(plan)])
    env = {**os.environ, **Mpiexec.for_flavour(mpi_flavour()).job_env(MachineLoad.here(nranks), {}), **variant.env}
    for name in variant.drop_env:
        env.pop(name, None)
    if variant.fresh_pycache:
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="pycache-", dir=folder)
    cwd = str(variant.cwd or (variant.tree if variant.tree != ROOT else PACKAGE_HOME))
    first = [*first_prefix, worker[0], *first_flags, *worker[1:]]
    argv = [find_mpiexec() or "mpiexec", "-n", "1", *first, ":", "-n", str(nranks - 1), *worker]
    return argv, env, cwd


def traced(variant: Variant, plan: Path, nranks: int, folder: Path) -> dict:
    strace = ["strace", "-f", "-y", "-s", "200", "-e", "trace=%file,getdents64,write", "-o", str(folder / "trace")]
    for prefix in ([[]] if variant.warm else []) + [strace]:  # a warm-up run first where asked for
        argv, env, cwd = job(variant, plan, nranks, prefix, [], folder)
        done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    roots = {"venv": Path(sys.prefix), "project": variant.tree, "stdlib": Path(sys.base_prefix), "run folder": folder}
    trace = parse_trace((folder / "trace").read_text().splitlines(), roots, cwd)
    if done.returncode != 0 or not trace.reached_cell:
        raise SystemExit(f"{variant.name}: the traced job failed or ran no cell ({done.returncode}): "
                         f"{done.stderr[-800:]}")
    return trace.summary()


def import_times(stderr: str) -> tuple[float, list[tuple[str, float]]]:
    """Total ms in top-level imports (``-X importtime``) and the costliest of them."""
    top = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|", 2)
            if cumulative.strip().isdigit() and not name.startswith("  "):
                top.append((name.strip(), int(cumulative) / 1000))
    return sum(ms for _, ms in top), sorted(top, key=lambda item: -item[1])[:8]


def timed(variant: Variant, plan: Path, nranks: int, folder: Path) -> dict:
    """One plain run (mpiexec start -> rank 0's first cell, -> the end) and one -X importtime run."""
    argv, env, cwd = job(variant, plan, nranks, [], [], folder)
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first_cell = None
    for line in process.stdout:
        if first_cell is None and line.startswith('{"event": "start"'):
            first_cell = time.perf_counter() - started
    code = process.wait()
    ended = time.perf_counter() - started
    argv, env, cwd = job(variant, plan, nranks, [], ["-X", "importtime"], folder)
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    if code != 0 or done.returncode != 0 or first_cell is None:
        raise SystemExit(f"{variant.name}: the job failed: {done.stderr[-800:]}")
    total_ms, top = import_times(done.stderr)
    return {"first_cell_s": first_cell, "exit_s": ended, "import_ms": total_ms, "top_imports": top}


def _zip_compiled(archive: zipfile.ZipFile, sources: list[Path], base: Path, scratch: Path) -> None:
    """Each source as ``name.pyc`` beside where its .py would be (zipimport reads those), compiled into
    ``scratch``: nothing is written into the trees themselves."""
    for source in sources:
        arcname = source.relative_to(base).with_suffix(".pyc").as_posix()
        archive.write(py_compile.compile(str(source), cfile=str(scratch / "one.pyc"), dfile=str(source),
                                         doraise=True), arcname)


def build_zips(folder: Path, tree: Path, stdlib_modules: list[str]) -> tuple[Path, Path]:
    """bench + collectives compiled into one zip; the stdlib packages/modules a rank imports in another."""
    lib = Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib_sources = []
    for name in sorted(set(stdlib_modules)):
        if (lib / name / "__init__.py").is_file():
            stdlib_sources += [path for path in (lib / name).rglob("*.py") if "test" not in path.parts]
        elif (lib / f"{name}.py").is_file():
            stdlib_sources.append(lib / f"{name}.py")
    zips = folder / "project.zip", folder / "stdlib.zip"
    project_sources = [path for package in ("bench", "collectives") for path in (tree / package).rglob("*.py")]
    for path, sources, base in zip(zips, (project_sources, stdlib_sources), (tree, lib), strict=True):
        with zipfile.ZipFile(path, "w") as archive:
            _zip_compiled(archive, sources, base, folder)
    return zips


def stdlib_imports(folder: Path, plan: Path, nranks: int) -> list[str]:
    """The top-level names of every module rank 0 imports (build_zips keeps the stdlib's)."""
    variant = Variant("probe", ROOT)
    argv, env, cwd = job(variant, plan, nranks, [], ["-X", "importtime"], folder)
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    names = [line.split("|", 2)[2].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    return [name.split(".")[0] for name in names if name and name != "package"]


def variants(trees: dict[str, Path], folder: Path, zips: tuple[Path, Path] | None, node_local: Path | None
             ) -> list[Variant]:
    """This tree as launched, the other trees, and the site options (advice) on this tree."""
    chosen = [Variant("this tree", ROOT), *(Variant(f"tree {name}", path) for name, path in trees.items())]
    if zips is None:
        return chosen
    # an empty pycache; a working directory without the project in it (bench comes from the zip)
    empty, bare = folder / "empty-pycache", folder / "cwd"
    for made in (empty, bare):
        made.mkdir(exist_ok=True)
    project, stdlib = zips
    chosen += [
        Variant("no __pycache__, read-only", ROOT, {"PYTHONPYCACHEPREFIX": str(empty), "PYTHONDONTWRITEBYTECODE": "1"}),
        Variant("no __pycache__, writable", ROOT, drop_env=("PYTHONDONTWRITEBYTECODE",), fresh_pycache=True),
        Variant("stdlib zip", ROOT, {"PYTHONPATH": str(stdlib)}),
        Variant("project zip", ROOT, {"PYTHONPATH": f"{project}:{ROOT}"}, cwd=bare),
        Variant("project + stdlib zips", ROOT, {"PYTHONPATH": f"{stdlib}:{project}:{ROOT}"}, cwd=bare),
    ]
    if node_local is not None:
        chosen.append(Variant("pycache on node-local disk", ROOT, {"PYTHONPYCACHEPREFIX": str(node_local)},
                              drop_env=("PYTHONDONTWRITEBYTECODE",), warm=True))
    return chosen


def extrapolate(per_rank: int, scales: list[int], ranks_per_node: int, rate: float) -> list[dict]:
    rows = []
    for ranks in scales:
        nodes = -(-ranks // ranks_per_node)
        rows.append({"ranks": ranks, "nodes": nodes, "ops_no_cache": per_rank * ranks,
                     "seconds_no_cache": per_rank * ranks / rate, "ops_per_node_cache": per_rank * nodes,
                     "seconds_per_node_cache": per_rank * nodes / rate})
    return rows


#: the ops table: (title, key of the to-first-cell summary); MB and "to exit" follow
OPS_COLUMNS = (("shared", "shared"), ("venv", "venv"), ("project", "project"), ("stdlib", "stdlib"),
               ("rundir", "run folder"), ("other", "other"), ("failed", "shared_failed"),
               ("distinct", "distinct_shared_paths"), ("files", "shared_files_opened"), ("fdstat", "fd_stats"),
               ("compiled", "compiled"), ("pyc w", "pyc_written"), ("local", "node-local"))


def print_tables(results: dict, assumptions: dict) -> None:
    print("rank 0, exec -> its first cell: metadata ops by where they go (strace; shared = all but node-local)")
    print(f"{'variant':28} " + " ".join(title for title, _ in OPS_COLUMNS) + "    MB to exit")
    for name, result in results.items():
        start = result["trace"]["to_first_cell"]
        print(f"{name:28} " + " ".join(f"{start[key]:>{len(title)}}" for title, key in OPS_COLUMNS)
              + f" {start['shared_bytes_opened'] / 1e6:5.1f} {result['trace']['to_exit']['shared']:7}")
    print("\nwall (no strace), median of the rounds: rank 0's imports (-X importtime, top level summed), "
          "mpiexec start -> rank 0's first cell, -> the job's end")
    print(f"{'variant':28} {'import ms':>9} {'first cell s':>12} {'exit s':>7}")
    for name, result in results.items():
        median = result["median"]
        print(f"{name:28} {median['import_ms']:9.1f} {median['first_cell_s']:12.3f} {median['exit_s']:7.3f}")
    print(f"\nextrapolated (shared ops to the first cell x ranks, or x nodes): {assumptions['text']}")
    print(f"{'variant':28} {'ranks':>6} {'nodes':>6} {'ops, no cache':>14} {'s':>6} {'ops, node cache':>15} {'s':>5}")
    for name, result in results.items():
        for row in result["extrapolated"]:
            print(f"{name:28} {row['ranks']:6} {row['nodes']:6} {row['ops_no_cache']:14,} "
                  f"{row['seconds_no_cache']:6.1f} {row['ops_per_node_cache']:15,} "
                  f"{row['seconds_per_node_cache']:5.1f}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the wall-time runs (default 5)")
    parser.add_argument("--ranks", type=int, default=2, help="ranks of the measured job (rank 0 is traced)")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="another checkout's bench/collectives/cython_ext, run with this venv")
    parser.add_argument("--no-site-options", action="store_true", help="measure the trees only")
    parser.add_argument("--ranks-per-node", type=int, default=8)
    parser.add_argument("--rate", type=float, default=50_000, help="metadata server ops/s (default 50000)")
    parser.add_argument("--scale", default="512,2048,8192", help="rank counts to extrapolate to")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    args.trees = {}
    for entry in args.tree:
        name, _, path = entry.partition("=")
        if not name or not (Path(path) / "bench" / "run" / "worker.py").is_file():
            parser.error(f"--tree {entry!r}: expected NAME=PATH of a checkout with bench/rank/worker.py")
        args.trees[name] = Path(path).resolve()
    if args.repeats < 1 or args.ranks < 2 or args.ranks_per_node < 1 or args.rate <= 0:
        parser.error("--repeats >= 1, --ranks >= 2, --ranks-per-node >= 1 and --rate > 0")
    if shutil.which("strace") is None:
        parser.error("strace: not found on PATH (Debian/Ubuntu: apt-get install strace)")
    try:
        args.scales = [int(value) for value in args.scale.split(",")]
    except ValueError:
        parser.error(f"--scale {args.scale!r}: expected rank counts such as 512,2048,8192")
    return args


def measure(args: argparse.Namespace, folder: Path, node_local: Path | None) -> dict:
    """Every variant traced once, then timed in --repeats interleaved rounds."""
    plan = write_plan(folder, args.ranks)
    zips = None if args.no_site_options else build_zips(folder, ROOT, stdlib_imports(folder, plan, args.ranks))
    chosen = variants(args.trees, folder, zips, node_local)
    results = {variant.name: {"trace": traced(variant, plan, args.ranks, folder), "runs": []} for variant in chosen}
    for round_index in range(args.repeats):
        # interleaved, in turn-about order: a slow spell of the machine falls on every variant
        for variant in chosen if round_index % 2 == 0 else chosen[::-1]:
            results[variant.name]["runs"].append(timed(variant, plan, args.ranks, folder))
    for result in results.values():
        runs = result["runs"]
        result["median"] = {key: statistics.median(run[key] for run in runs)
                            for key in ("import_ms", "first_cell_s", "exit_s")}
        result["top_imports_ms"] = runs[-1]["top_imports"]
        result["extrapolated"] = extrapolate(result["trace"]["to_first_cell"]["shared"], args.scales,
                                             args.ranks_per_node, args.rate)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="worker-start-"))
    shm = Path("/dev/shm")
    node_local = Path(tempfile.mkdtemp(prefix="pccl-pycache-", dir=shm)) if shm.is_dir() else None
    try:
        results = measure(args, folder, node_local)
    finally:
        for made in filter(None, (folder, node_local)):
            shutil.rmtree(made, ignore_errors=True)
    text = (f"{args.ranks_per_node} ranks per node, a metadata server answering {args.rate:,.0f} ops/s, every rank "
            "starting at once; no cache: every rank's lookups reach the server; per-node cache: only each node's "
            "first rank's do; venv, project, Python install and run folder on the shared filesystem")
    assumptions = {"ranks_per_node": args.ranks_per_node, "rate_ops_per_s": args.rate, "text": text}
    print_tables(results, assumptions)
    if args.json:
        environment = {key: value for key, value in os.environ.items() if key.startswith("PYTHON")}
        report = {"command": "python benchmarks/worker_start.py " + " ".join(argv or sys.argv[1:]),
                  "python": sys.version.split()[0], "python_environment": environment, "job_ranks": args.ranks,
                  "assumptions": assumptions, "variants": results}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
