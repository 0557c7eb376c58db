"""The data flow runs one way: suite -> plan -> run -> results -> judge -> present.

A module imports only modules of its own stage or earlier ones; the library (collectives,
cython_ext) never imports the harness; the drivers (bench/sweep/, bench/cli) sit on top.
docs/ARCHITECTURE.md draws it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: stage of each bench package (modules not listed: bench/errors.py, bench/files.py, the base)
STAGES = {"plan": 1, "run": 2, "lab": 2, "results": 3, "importers": 4, "model": 4, "judge": 5, "present": 6,
          "sweep": 7, "cli": 8, "__main__": 9}


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
            # ``from bench.run import cell`` names a module of bench.run
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
    assert stage("bench.plan.cells") < stage("bench.run.worker") < stage("bench.results.table") \
        < stage("bench.judge.gate") < stage("bench.present.report")
