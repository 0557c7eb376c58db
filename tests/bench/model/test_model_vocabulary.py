"""The model's implementations are the library's: names from collectives.impls, labels from
bench.results.labels, ``--impl`` text and measured rows round-trip (bench/model/impls.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pytest
from conftest import DATA, ROOT, TINY_SUITE

from bench.cli import main
from bench.errors import BadInput
from bench.importers.pccl_reproducer import import_reproducer
from bench.model.impls import (
    DEFAULT_VARIANTS,
    MODELS,
    UNMODELLED,
    ImplModel,
    modelled,
    parse_variant,
    variant_of_row,
)
from bench.model.machine import LIBRARY_KEYS, load_machine
from bench.model.model_run import ModelSpec, model_row
from bench.plan.cells import expand
from bench.plan.suite import parse_suite
from bench.results.labels import impl_label
from collectives.impls import IMPLEMENTATIONS, get
from collectives.schedules.tuning import AUTO

#: the model's sources, where no implementation may be told apart by comparing its name
MODEL_SOURCES = sorted([*(ROOT / "bench" / "model").glob("*.py"), *(ROOT / "bench" / "cli").glob("model_*.py")])


def test_every_model_is_a_registered_implementation() -> None:
    assert list(MODELS) == ["mpi", "xccl", "pccl-flat", "pccl-hier"]
    for name, model in MODELS.items():
        assert model.name == name and get(name).name == name and model.implementation is IMPLEMENTATIONS[name]
        assert model.library in LIBRARY_KEYS  # priced by a library a machine description may hold
    # every registered implementation is either modelled or listed, with its reason, as not modelled
    assert set(MODELS).isdisjoint(UNMODELLED) and set(MODELS) | set(UNMODELLED) == set(IMPLEMENTATIONS)
    assert all(reason.strip() for reason in UNMODELLED.values())


@pytest.mark.parametrize("name", ["pccl-nowhere", "shm", "mpi"])
def test_a_model_of_no_registered_or_a_taken_name_is_refused(name: str) -> None:
    before = dict(MODELS)
    with pytest.raises(RuntimeError, match=repr(name)):
        modelled(type("Stray", (ImplModel,), {"name": name, "library": "pccl", "syntax": name}))
    assert MODELS == before


def test_default_variants_round_trip() -> None:
    for label in DEFAULT_VARIANTS:
        variant = parse_variant(label)
        assert variant.label == label and parse_variant(variant.label) == variant
    assert {parse_variant(label).impl for label in DEFAULT_VARIANTS} == set(MODELS)


def _suite_rows() -> pd.DataFrame:
    """The cells a sweep of every implementation records (its rows' impl/algorithm/intra/inter)."""
    raw = {**TINY_SUITE, "device": "cuda", "ranks": [4], "ranks_per_node": [2], "implementations": [
        *IMPLEMENTATIONS.keys() - {"pccl-flat", "pccl-hier"},
        {"impl": "pccl-flat", "algorithms": ["ring", "rd", "bruck", "rdfull", "rh", AUTO]},
        {"impl": "pccl-hier", "inter": ["rd", "ring", "mpi", AUTO], "intra": ["ring", "xccl"]}]}
    cells = [cell for launch in expand(parse_suite(raw, "vocabulary.yaml")) for cell in launch.cells]
    return pd.DataFrame([cell.__dict__ for cell in cells])


def _measured_rows() -> pd.DataFrame:
    logs = DATA / "pccl-reproducer"
    imported, _, _ = import_reproducer(sorted(logs.glob("frontier_*.out")))
    return pd.concat([_suite_rows(), imported], ignore_index=True)


def test_measured_rows_round_trip_and_are_labelled_as_everywhere_else() -> None:
    frame = _measured_rows()
    assert set(frame["impl"]) == set(IMPLEMENTATIONS)
    seen = set()
    rows = [*(row for _, row in frame.iterrows()), *frame.itertuples(index=False)]  # Series and tuples alike
    for row in rows:
        variant = variant_of_row(row)
        if row.impl in UNMODELLED or AUTO in (row.algorithm, row.intra, row.inter):
            assert variant is None, row
            continue
        assert variant is not None and variant.impl == row.impl, row
        assert variant.label == impl_label(row), row
        assert parse_variant(variant.label) == variant, row
        seen.add((variant.impl, variant.label))
    assert {impl for impl, _ in seen} == set(MODELS)
    assert ("pccl-hier", "pccl-hier:mpi/xccl") in seen and ("pccl-flat", "pccl-flat:bruck") in seen


def test_modelled_rows_are_labelled_as_everywhere_else() -> None:
    machine, path = load_machine("frontier")
    variants = [parse_variant(label) for label in (*DEFAULT_VARIANTS, "pccl-flat:bruck", "pccl-hier:mpi/xccl")]
    spec = ModelSpec(machine, str(path), ["allgather"], variants, [16], [1 << 20])
    for variant in variants:
        row = model_row(spec, variant, "allgather", 16, (1 << 20) // (16 * 4))
        assert impl_label(row) == variant.label == impl_label(pd.Series(row))
        assert variant_of_row(pd.Series(row)) == variant


@pytest.mark.parametrize("text", [*UNMODELLED, *(f"{name}:ring" for name in UNMODELLED)])
def test_unmodelled_implementations_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(BadInput) as info:
        parse_variant(text)
    message = str(info.value)
    assert message.startswith(f"--impl: {text!r} is not modelled: ") and "\n" not in message
    assert UNMODELLED[text.partition(":")[0]] in message


def test_unmodelled_implementation_on_the_command_line(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["model", "run", "frontier", "-n", "16", "--impl", "shm"])
    stderr = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in stderr
    assert stderr.strip().splitlines() == [f"pccl-bench: error: --impl: 'shm' is not modelled: {UNMODELLED['shm']}; "
                                           "use mpi, xccl, pccl-flat:<algorithm> or pccl-hier:<inter>/<intra>"]


@pytest.mark.parametrize("text", ["bogus", "pccl-flat", "pccl-hier:rd", "mpi:ring", "xccl:native"])
def test_other_text_is_told_the_syntax(text: str) -> None:
    with pytest.raises(BadInput, match="is not mpi, xccl, pccl-flat:<algorithm> or pccl-hier:<inter>/<intra>$"):
        parse_variant(text)


def _is_impl(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "impl") or (isinstance(node, ast.Attribute)
                                                                 and node.attr == "impl")


def _is_names(node: ast.expr) -> bool:
    """A string literal, or a tuple/list/set of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, ast.Tuple | ast.List | ast.Set) and bool(node.elts) and all(map(_is_names, node.elts))


def impl_name_comparisons(source: str) -> list[int]:
    """Lines that compare an ``impl`` (name or attribute) with implementation names written out."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(map(_is_impl, operands)) and any(map(_is_names, operands)):
                lines.append(node.lineno)
    return lines


def test_the_scan_finds_name_comparisons() -> None:
    assert impl_name_comparisons('if variant.impl == "mpi":\n    pass\n') == [1]
    assert impl_name_comparisons('x = impl in ("mpi", "xccl")\ny = "pccl-hier" != row.impl\n') == [1, 2]
    assert impl_name_comparisons("x = variant.model.own_entry and impl in MODELS\n") == []


@pytest.mark.parametrize("path", MODEL_SOURCES, ids=lambda path: path.name)
def test_no_implementation_name_comparisons_in_the_model(path: Path) -> None:
    assert impl_name_comparisons(path.read_text()) == [], f"{path}: ask the variant's model (bench/model/impls.py)"
