"""The data flow runs one way: suite -> plan -> rank/driver -> results -> judge -> present.

A module imports only modules of its own stage or earlier ones; the library (collectives,
cython_ext) never imports the harness; the rank side (bench/rank/: what runs in the processes a
launcher starts) imports nothing of the driver side (bench/driver/: the process of the user's
command), which may import it; the drivers on top (bench/sweep/, bench/cli) compose the stages.
docs/ARCHITECTURE.md draws it. The stage numbers are here alone (STAGES): the packages' docstrings
name their stage, not its number.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import ROOT

#: stage of each bench package (modules not listed: bench/errors.py, bench/files.py, bench/text.py, the
#: base); the rank side before the driver side: the driver imports the ranks' records and markers
STAGES = {"plan": 1, "rank": 2, "lab": 2, "driver": 3, "results": 4, "importers": 5, "model": 5, "judge": 6,
          "present": 7, "sweep": 8, "cli": 9, "__main__": 10}
#: the two programs of a sweep: the ranks' and the driver's (bench/sweep/ orchestrates the driver's)
RANK_SIDE, DRIVER_SIDE = ("bench.rank",), ("bench.driver", "bench.sweep", "bench.cli")


def stage(module: str) -> int:
    parts = module.split(".")
    if parts[0] in ("collectives", "cython_ext"):
        return -1
    return STAGES.get(parts[1], 0) if len(parts) > 1 else 0


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> list[tuple[int, str]]:
    if path.suffix == ".pyx":  # Cython: not Python syntax; its imports are plain lines
        lines = enumerate(path.read_text().splitlines(), 1)
        return [(n, line.split()[1]) for n, line in lines
                if line.split()[:1] in (["from"], ["import"], ["cimport"]) and line.split()[1].startswith("bench")]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = node.module
            # ``from bench.rank import cell`` names a module of bench.rank
            found += [(node.lineno, f"{base}.{alias.name}" if base.count(".") == 1 and base.startswith("bench.")
                       else base) for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] in ("bench", "collectives", "cython_ext")]


SOURCES = sorted([*ROOT.glob("bench/**/*.py"), *ROOT.glob("collectives/**/*.py"), *ROOT.glob("cython_ext/*.pyx")])


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_import_runs_backwards(path: Path):
    name = module_name(path)
    backwards = [f"line {line}: {target}" for line, target in imported(path) if stage(target) > stage(name)]
    assert not backwards, f"{name} (stage {stage(name)}) imports later stages: {backwards}"


def test_the_library_never_imports_the_harness():
    assert stage("collectives.rdma_probe") == -1
    assert stage("bench.plan.cells") < stage("bench.rank.worker") < stage("bench.driver.job") \
        < stage("bench.results.table") < stage("bench.judge.gate") < stage("bench.present.report")


def test_every_package_has_its_stage_and_no_docstring_numbers_one():
    """A new package of bench/ is given its place here (or is refused); a package's docstring names its
    stage but not its number, so the numbers cannot disagree with STAGES."""
    packages = {path.parent.name for path in ROOT.glob("bench/*/__init__.py")}
    assert packages <= set(STAGES), f"packages without a stage in STAGES: {sorted(packages - set(STAGES))}"
    numbered = {str(path.relative_to(ROOT)): match[0] for path in ROOT.glob("bench/*/__init__.py")
                if (match := re.search(r"\bStage \d+", ast.get_docstring(ast.parse(path.read_text())) or ""))}
    assert not numbered, f"stage numbers in docstrings (tests/project/test_layers.py STAGES has them): {numbered}"


def _rank_side(module: str) -> bool:
    return module.startswith(tuple(f"{side}." for side in RANK_SIDE)) or module in RANK_SIDE


def _driver_side(module: str) -> bool:
    return any(module == side or module.startswith(f"{side}.") for side in DRIVER_SIDE)


def _module_strings(path: Path) -> list[tuple[int, str]]:
    """(line, module) of the dotted names of bench modules that string constants name: ``-m bench.x``
    in a command, a ``from bench.x import`` line of a program text run by another Python."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(node.lineno, name) for name in re.findall(r"(?<![\w.])bench(?:\.\w+)+", node.value)]
    return found


def test_the_rank_side_imports_nothing_of_the_driver_side():
    """What runs in the ranks (bench/rank/) imports no module of the driver's (bench/driver/, bench/sweep/,
    bench/cli/), at any depth (function bodies and TYPE_CHECKING included) nor by name in a string;
    the driver may import the rank side (its records, its markers, the probes it starts)."""
    assert _rank_side("bench.rank.worker") and _driver_side("bench.driver.launchers.srun")
    assert not _rank_side("bench.ranking") and not _driver_side("bench.drivers")
    rank_modules = [path for path in ROOT.glob("bench/rank/**/*.py")]
    assert rank_modules, "no bench/rank/"
    crossing = [f"{path.relative_to(ROOT)} line {line}: {target}" for path in rank_modules
                for line, target in [*imported(path), *_module_strings(path)] if _driver_side(target)]
    assert not crossing, f"the rank side imports the driver side: {crossing}"
    # what a launcher starts is a rank-side program: the worker, the pre-flight's ranks, the host probe
    started = {target for path in ROOT.glob("bench/driver/**/*.py") for _, target in _module_strings(path)
               if _rank_side(target)}
    assert {"bench.rank.worker", "bench.rank.preflight_probe"} <= started
    programs = {target for path in [*ROOT.glob("bench/driver/**/*.py"), *ROOT.glob("bench/sweep/*.py")]
                for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.List)
                for index, item in enumerate(node.elts[:-1])
                if isinstance(item, ast.Constant) and item.value == "-m"
                and isinstance(target := node.elts[index + 1], ast.Constant) and isinstance(target := target.value, str)
                and target.startswith("bench.")}
    assert programs and all(_rank_side(program) for program in programs), \
        f"a launch starts a module of the driver side: {sorted(programs)}"


def _module_imports(path: Path, modules: set[str]) -> set[str]:
    return _imports_of(path.read_text(), module_name(path), modules)


def _imports_of(source: str, name: str, modules: set[str]) -> set[str]:
    """The project modules the module ``name`` (its text ``source``) imports anywhere: at module level
    (``if``/``try`` blocks and TYPE_CHECKING included) and inside functions (an import deferred to call
    time still makes the two modules depend on each other), and the packages in between: importing
    ``a.b.c`` runs ``a/b``'s __init__ first (the top packages, ``bench`` and ``collectives``, the API
    that stands on everything, and the importer's own packages, already running, aside)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.update([full] if full in modules else [node.module] if node.module in modules else [])
    for target in list(found):
        package = target.rpartition(".")[0]
        while "." in package:
            if package in modules and not f"{name}.".startswith(f"{package}."):
                found.add(package)
            package = package.rpartition(".")[0]
    return found - {name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = stack[stack.index(node):]
                    del stack[stack.index(node):]
                    if len(component) > 1:
                        found.append(sorted(component))
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                work.append((target, iter(sorted(graph[target]))))
            elif target in stack:
                low[node] = min(low[node], index[target])
    return found


def test_no_import_circle_outside_a_registry():
    """A registry package and its plug-ins import each other (the package imports them to register,
    they import ``register``); any other circle of imports, at module level or inside a function, is a
    layering mistake."""
    paths = {module_name(path): path for path in [*ROOT.glob("bench/**/*.py"), *ROOT.glob("collectives/**/*.py")]}
    graph = {name: _module_imports(path, set(paths)) for name, path in paths.items()}
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the finder finds
    # a package between: importing a.p.m runs a.p's __init__ (memory <-> transports.xccl's circle ran so),
    # but not the importer's own package's (running already) nor the top package's
    modules = {"collectives.memory", "collectives.memory.backends", "collectives.transports.xccl",
               "collectives.transports.xccl.ops"}
    assert _imports_of("from collectives.transports.xccl.ops import f\nfrom collectives.memory.backends import g",
                       "collectives.memory.context", modules) == {"collectives.transports.xccl.ops",
                                                                  "collectives.transports.xccl",
                                                                  "collectives.memory.backends"}
    circles = []
    for component in _cycles(graph):
        package = min(component, key=len)
        registry = paths[package].name == "__init__.py" and all(
            name == package or name.startswith(f"{package}.") for name in component)
        if not registry:
            circles.append(component)
    assert not circles, f"modules that import each other: {circles}"


#: the library's floors, in the order a call is made of them: what it is (the call, its spec), the
#: vendor libraries as found at run time (which MPI, NCCL/RCCL's communicators), the schedule (rows as
#: data), where buffers live, what runs rows, what runs whole collectives, who composes them; modules
#: at collectives/ itself are the base every floor may use, and the package's own __init__ (the
#: library's API) stands on all of them
LIBRARY_FLOORS = {"spec": 0, "libraries": 1, "schedules": 2, "memory": 3, "executors": 4, "transports": 5,
                  "impls": 6}
LIBRARY_BASE = {"__init__.py", "addresses.py", "call.py", "dtypes.py", "envsettings.py", "registry.py",
                "timing_plan.py", "version.py"}
#: imports against that order, each with why it is not a mistake
LIBRARY_BACK_EDGES = {
    ("collectives.schedules.hier", "collectives.transports"):
        "a phase named after a transport is cut out of the schedule: the hierarchy asks the registry for the names",
    ("collectives.memory.device_context", "collectives.executors.device"):
        "the context hands out its executor (imported when asked)",
    ("collectives.memory.device_context", "collectives.executors.device_ops"):
        "the context chains a call's parts (imported when asked)",
}


def library_floor(module: str) -> int:
    if module == "collectives":
        return max(LIBRARY_FLOORS.values()) + 1
    parts = module.split(".")
    return LIBRARY_FLOORS.get(parts[1], 0) if len(parts) > 2 or (len(parts) == 2 and parts[1] in LIBRARY_FLOORS) else 0


def _library_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every collectives import, ``from collectives import x`` as ``collectives.x``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, f"{node.module}.{alias.name}" if node.module == "collectives" else node.module)
                      for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] == "collectives"]


def test_the_library_reads_as_its_pipeline():
    """collectives/ in folders: spec -> libraries -> schedules -> memory -> executors -> transports -> impls,
    imports (at any depth, function bodies included) only downwards but for the listed edges, each of
    which is still an import (a listed edge nothing takes any more goes from the list)."""
    assert [folder for folder in LIBRARY_FLOORS if (ROOT / "collectives" / folder / "__init__.py").exists()] == list(
        LIBRARY_FLOORS)
    upwards = set()
    taken = set()
    for path in ROOT.glob("collectives/**/*.py"):
        name = module_name(path)
        for line, target in _library_imports(path):
            if library_floor(target) > library_floor(name):
                edges = [(source, to) for source, to in LIBRARY_BACK_EDGES if name == source and target.startswith(to)]
                taken.update(edges)
                if not edges:
                    upwards.add(f"{name} line {line}: {target}")
    assert not upwards, f"library imports against spec -> libraries -> schedules -> memory -> executors -> " \
                        f"transports -> impls: {sorted(upwards)}"
    assert taken == set(LIBRARY_BACK_EDGES), f"listed edges no module takes: {sorted(set(LIBRARY_BACK_EDGES) - taken)}"
    loose = {path.name for path in (ROOT / "collectives").glob("*.py")}
    assert loose == LIBRARY_BASE, f"only the base modules at collectives/'s top, not {sorted(loose - LIBRARY_BASE)}"


def test_one_timing_entry_point():
    """Cells are timed by cython_ext.timing.measure, from bench/rank/cell.py alone; time_op (its
    samples-only wrapper) serves the machine-speed probe; no other module of the harness or the
    library imports the timing loop."""
    users = {}
    for path in [*ROOT.glob("bench/**/*.py"), *ROOT.glob("collectives/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "cython_ext.timing":
                users.setdefault(module_name(path), set()).update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module == "cython_ext" and any(
                    alias.name == "timing" for alias in node.names):
                users.setdefault(module_name(path), set()).add("*")
    assert users == {"bench.rank.cell": {"measure"}, "bench.rank.probe": {"time_op"}}


#: folders of tests/ that hold no tests of one module's folder: inputs, MPI scripts, whole-project checks
TEST_SUPPORT = {"data", "mpi_scripts", "project", "__pycache__"}


def test_the_tests_mirror_the_code():
    """tests/<package>/<folder>/test_*.py tests that folder (tests/bench/rank/ tests bench/rank/): a reader finds
    the tests of a module beside its path, and a test file's name is unique (pytest imports them by name)."""
    tests = ROOT / "tests"
    assert not sorted(tests.glob("test_*.py")), "a test file in tests/ itself: move it under the folder it tests"
    folders = {path.parent.relative_to(tests) for path in tests.rglob("test_*.py")}
    for folder in folders:
        if folder.parts[0] in TEST_SUPPORT:
            continue
        assert (ROOT / folder).is_dir(), f"tests/{folder} mirrors no folder of the code ({folder} does not exist)"
    names = [path.name for path in tests.rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(name for name in names if names.count(name) > 1)


def test_a_test_imports_test_modules_of_its_own_folder_only():
    """pytest puts each test file's folder on sys.path as it collects it, so ``from test_x import`` of
    another folder works only when that folder was collected first: helpers several folders share live in
    tests/ itself (conftest.py, hostile.py, synthetic_runs.py, bad_suites.py)."""
    tests = ROOT / "tests"
    strays = []
    for path in tests.rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("test_"):
                if not (path.parent / f"{node.module}.py").exists():
                    strays.append(f"{path.relative_to(tests)}: from {node.module} import ...")
    assert not strays, strays


def _launcher_switches(source: str) -> list[str]:
    """Comparisons that ask which launcher it is: ``<...launcher...>.kind == ...``, ``.name`` of a
    launcher, or ``options.launcher == "sbatch"``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            if not isinstance(side, ast.Attribute):
                continue
            owner = ast.unparse(side.value)
            if (side.attr in ("kind", "name") and "launcher" in owner.lower()) or side.attr == "launcher":
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_launcher_switch_outside_the_launcher_classes():
    """What differs between launchers is said by their classes (bench/driver/launchers/): argv, hosts,
    installs, how the sweep drives them; nothing else asks which one it is."""
    assert len(_launcher_switches("x = launcher.kind == 'srun'\ny = options.launcher != 'sbatch'")) == 2
    switches = {str(path.relative_to(ROOT)): found for path in ROOT.glob("bench/**/*.py")
                if "launchers" not in path.parts and (found := _launcher_switches(path.read_text()))}
    assert not switches, switches


def test_a_launcher_takes_one_launch_descriptor():
    """``Launcher.argv`` and ``command`` take the job (``Job``: ranks, placement, environment, program,
    timeout, oversubscription) and nothing else, in every launcher class: a new fact about a launch is
    a field of ``Job``, not a parameter repeated by each override."""
    import inspect

    from bench.driver.launchers import LAUNCHERS, Job, Launcher

    classes = {Launcher, *LAUNCHERS.values()}
    classes |= {sub for cls in list(classes) for sub in cls.__subclasses__()}  # hydra's and Open MPI's mpiexec
    loose = {f"{cls.__name__}.{name}{inspect.signature(getattr(cls, name))}" for cls in classes
             for name in ("argv", "command")
             if list(inspect.signature(getattr(cls, name)).parameters) != ["self", "job"]}
    assert not loose, f"launcher methods with arguments beside the job: {sorted(loose)}"
    assert {"nranks", "placement", "env", "program"} <= set(Job.__dataclass_fields__)
