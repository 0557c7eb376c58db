"""bench.plan.suite (validation, --set overrides) and bench.plan.cells (cells and launches)."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, TINY_SUITE, describe, run_cli

from bench.errors import BadInput
from bench.plan.cells import CELL_KEY, counts_for, expand
from bench.plan.sizes import geometric
from bench.plan.suite import Suite, parse_suite
from bench.plan.suite_files import apply_overrides, default_suites_dir, load_suite, resolve_suite_path
from collectives.dtypes import itemsize

BASE = TINY_SUITE


def suite_of(**changes) -> Suite:
    raw = copy.deepcopy(BASE)
    raw.update(changes)
    return parse_suite(raw, "test.yaml")


def bad_input(raw, path: str = "test.yaml") -> str:
    with pytest.raises(BadInput) as info:
        parse_suite(raw, path)
    return str(info.value)


def cells(suite: Suite):
    return [cell for launch in expand(suite) for cell in launch.cells]


# ---------------------------------------------------------------- validation


def test_minimal_suite_gets_documented_defaults():
    suite = parse_suite(
        {
            "name": "m",
            "collectives": "allgather",
            "implementations": ["mpi"],
            "ranks": 2,
            "sizes": {"min": 8, "max": 8},
        },
        "m.yaml",
    )
    assert suite.collectives == ["allgather"]
    assert [entry.impl for entry in suite.implementations] == ["mpi"]
    assert suite.implementations[0].algorithms == []
    assert suite.ranks == [2]
    assert suite.ranks_per_node is None
    assert suite.device == "host"
    assert suite.dtype == ["float32"] and suite.op == ["sum"] and suite.placement == ["out_of_place"]
    assert suite.sizes.factor == 2 and suite.sizes.semantics == "total"
    assert suite.timing.mode == "sync"
    assert suite.check is True
    assert suite.env == {}


def test_scalars_become_lists_and_sizes_are_parsed():
    suite = suite_of(
        dtype="int32",
        op="max",
        placement="in_place",
        implementations=[{"impl": "pccl-flat", "algorithms": "ring"}],
        sizes={"min": "1KiB", "max": "1MB", "factor": 4, "semantics": "per_rank"},
    )
    assert suite.dtype == ["int32"] and suite.op == ["max"] and suite.placement == ["in_place"]
    assert suite.implementations[0].algorithms == ["ring"]
    assert (suite.sizes.min, suite.sizes.max) == (1024, 10**6)
    assert suite.sizes.semantics == "per_rank"


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        ({"bogus": 1}, ["bogus", "unknown field"]),
        ({"timing": {"iters": 3, "bogus": 1}}, ["timing.bogus", "unknown field"]),
        ({"implementations": ["nccl2"]}, ["implementations.0", "nccl2"]),
        (
            {"implementations": [{"impl": "pccl-flat", "algorithms": ["bruck9"]}]},
            ["implementations.0.algorithms.0", "bruck9"],
        ),
        (
            {"implementations": [{"impl": "mpi", "algorithms": ["ring"]}]},
            ["implementations.0.algorithms.0", "ring"],
        ),
        ({"implementations": []}, ["implementations"]),
        ({"collectives": ["alltoall"]}, ["collectives.0", "alltoall"]),
        ({"collectives": []}, ["collectives"]),
        ({"sizes": {"min": "4 parsecs", "max": 64}}, ["sizes.min", "4 parsecs"]),
        ({"sizes": {"min": "1.5K", "max": "4K"}}, ["sizes.min", "1.5K"]),
        ({"sizes": {"min": 8, "max": "-1"}}, ["sizes.max", "-1"]),
        ({"sizes": {"min": 0, "max": 8}}, ["sizes.min", "0"]),
        ({"sizes": {"min": "1K", "max": 64}}, ["sizes", "min", "1024", "64"]),
        ({"sizes": {"min": 8, "max": 64, "factor": 1}}, ["sizes.factor", "1"]),
        ({"sizes": {"min": 8, "max": 64, "semantics": "osu"}}, ["sizes.semantics", "osu"]),
        ({"sizes": {"max": 64}}, ["sizes.min", "missing"]),
        ({"ranks": [0]}, ["ranks.0", "0"]),
        ({"ranks": [-2]}, ["ranks.0", "-2"]),
        ({"ranks": [2, "two"]}, ["ranks.1", "two"]),
        ({"ranks": []}, ["ranks"]),
        ({"ranks": [2, 3], "ranks_per_node": 2}, ["ranks.1", "3", "ranks_per_node=2"]),
        ({"ranks_per_node": 0}, ["ranks_per_node", "0"]),
        ({"dtype": "bfloat16"}, ["dtype.0", "bfloat16"]),
        ({"op": ["sum", "avg"]}, ["op.1", "avg"]),
        ({"placement": "sideways"}, ["placement.0", "sideways"]),
        ({"device": "tpu"}, ["device", "tpu"]),
        ({"timing": {"iters": 3, "min_iters": 9}}, ["timing.min_iters", "9", "3"]),
        ({"timing": {"iters": 0}}, ["timing.iters", "0"]),
        ({"timing": {"mode": "async"}}, ["timing.mode", "async"]),
        ({"timing": {"warmup": -1}}, ["timing.warmup", "-1"]),
        ({"timeout_s": 0}, ["timeout_s", "0"]),
        ({"env": {"FOO": [1, 2]}}, ["env.FOO"]),
        ({"select": [{"colour": "red"}]}, ["select.0", "colour"]),
        ({"select": [{"bytes_total": "lots"}]}, ["select.0", "lots"]),
        ({"select": [{}]}, ["select.0"]),
    ],
)
def test_bad_suite_names_file_field_and_value(change, needles):
    raw = copy.deepcopy(BASE)
    raw.update(change)
    message = bad_input(raw, "suites/broken.yaml")
    assert message.startswith("suites/broken.yaml"), message
    assert "\n" not in message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"


def test_missing_required_field_is_named():
    raw = copy.deepcopy(BASE)
    del raw["sizes"]
    message = bad_input(raw)
    assert "sizes" in message and "missing" in message


@pytest.mark.parametrize("raw", [["a", "b"], "just text", 42, None])
def test_suite_must_be_a_mapping(raw):
    message = bad_input(raw, "x.yaml")
    assert message.startswith("x.yaml")
    assert type(raw).__name__ in message


def test_suite_is_frozen():
    suite = suite_of()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises its own ValidationError
        suite.name = "other"


# ---------------------------------------------------------------- files


def write(tmp_path: Path, text: str, name: str = "suite.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_load_suite_returns_suite_and_raw(tmp_path):
    path = write(tmp_path, yaml.safe_dump(BASE))
    suite, raw = load_suite(path)
    assert suite.name == "tiny"
    assert raw == BASE


def test_load_suite_applies_overrides(tmp_path):
    path = write(tmp_path, yaml.safe_dump(BASE))
    suite, raw = load_suite(path, ["timing.iters=7", "ranks=[2, 4]", "sizes.semantics=per_rank", "dtype=int64"])
    assert suite.timing.iters == 7
    assert suite.ranks == [2, 4]
    assert suite.sizes.semantics == "per_rank"
    assert suite.dtype == ["int64"]
    assert raw["timing"]["iters"] == 7, "the saved raw suite must include the overrides"


def test_load_suite_missing_file(tmp_path):
    with pytest.raises(BadInput) as info:
        load_suite(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(info.value) and "not found" in str(info.value)


def test_load_suite_directory(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(BadInput) as info:
        load_suite(tmp_path / "dir.yaml")
    assert "dir.yaml" in str(info.value)


def test_load_suite_malformed_yaml_names_line(tmp_path):
    path = write(tmp_path, "name: tiny\ncollectives: [allgather\nranks: 2\n")
    with pytest.raises(BadInput) as info:
        load_suite(path)
    message = str(info.value)
    assert str(path) in message and "malformed YAML" in message
    assert "\n" not in message


def test_load_suite_empty_file(tmp_path):
    with pytest.raises(BadInput) as info:
        load_suite(write(tmp_path, ""))
    assert "mapping" in str(info.value)


def test_apply_overrides_creates_nested_mappings_and_parses_yaml():
    raw = {"name": "x"}
    apply_overrides(
        raw,
        [
            "timing.iters=5",
            "timing.mode=pipelined",
            "check=false",
            "env.FOO=a=b",
            "sizes.min=4KiB",
            "ranks=[1, 2]",
        ],
        "x.yaml",
    )
    assert raw == {
        "name": "x",
        "timing": {"iters": 5, "mode": "pipelined"},
        "check": False,
        "env": {"FOO": "a=b"},
        "sizes": {"min": "4KiB"},
        "ranks": [1, 2],
    }


def test_apply_overrides_last_one_wins():
    assert apply_overrides({}, ["name=a", "name=b"], "x.yaml") == {"name": "b"}


@pytest.mark.parametrize(
    ("item", "needles"),
    [
        ("timing.iters", ["--set", "timing.iters", "key=value"]),
        ("=5", ["--set", "=5"]),
        ("ranks=[2", ["--set", "ranks", "[2"]),
        ("name.x=1", ["--set", "name.x"]),
    ],
)
def test_apply_overrides_rejects(item, needles):
    with pytest.raises(BadInput) as info:
        apply_overrides({"name": "tiny"}, [item], "x.yaml")
    for needle in needles:
        assert needle in str(info.value)


def test_every_shipped_suite_validates():
    paths = sorted((ROOT / "suites").glob("*.yaml"))
    assert paths, "suites/ holds no suite"
    for path in paths:
        suite, _ = load_suite(path)
        assert sum(len(launch.cells) for launch in expand(suite)) > 0, path


def test_every_shipped_suite_validates_through_the_cli():
    paths = sorted((ROOT / "suites").glob("*.yaml"))
    result = run_cli("suites", "validate", *paths)
    assert result.returncode == 0, describe(result)
    assert result.stdout.count(": ok (") == len(paths), describe(result)
    assert "Traceback" not in result.stdout + result.stderr


def test_resolve_suite_path_by_name():
    assert resolve_suite_path("smoke").resolve() == (default_suites_dir() / "smoke.yaml").resolve()
    assert resolve_suite_path("some/where.yaml") == Path("some/where.yaml")
    assert resolve_suite_path("missing.yaml") == Path("missing.yaml")


# ---------------------------------------------------------------- plan


def test_expand_cell_count_is_the_product_of_the_axes():
    suite = suite_of(
        ranks=[2, 4],
        dtype=["float32", "int32"],
        op=["sum", "max"],
        placement=["out_of_place", "in_place"],
        sizes={"min": "64B", "max": "1KiB", "semantics": "per_rank"},
    )
    # per_rank sizes of 4-byte dtypes never collide: 5 sizes -> 5 counts
    expected = 2 * 3 * 2 * 2 * 2 * 2 * 5  # ranks, collectives, impls, dtypes, ops, placements, sizes
    assert len(cells(suite)) == expected


def test_expand_multiple_algorithms_for_one_impl():
    suite = suite_of(
        implementations=[{"impl": "pccl-flat", "algorithms": ["ring", "ring+ring"]}],
        collectives=["allreduce"],
    )
    assert Counter(cell.algorithm for cell in cells(suite)) == {"ring": 4, "ring+ring": 4}


def test_expand_default_algorithms():
    suite = suite_of(implementations=["mpi", "pccl-flat"], collectives=["allgather"])
    assert {(cell.impl, cell.algorithm) for cell in cells(suite)} == {
        ("mpi", "native"),
        ("pccl-flat", "ring"),
    }


@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter", "allreduce"])
@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32"])
def test_bytes_for_total_semantics(collective, nranks, dtype):
    suite = suite_of(
        collectives=[collective],
        ranks=[nranks],
        dtype=dtype,
        implementations=["pccl-flat"],
        sizes={"min": "8B", "max": "64KiB", "semantics": "total"},
    )
    size = itemsize(dtype)
    share = size * (nranks if collective != "allreduce" else 1)  # bytes per element of the total
    requested = geometric(8, 64 * 1024, 2)
    planned = cells(suite)
    for cell in planned:
        assert cell.bytes_per_rank == cell.count_per_rank * size
        if collective == "allreduce":
            assert cell.bytes_total == cell.bytes_per_rank
        else:
            assert cell.bytes_total == nranks * cell.bytes_per_rank
        assert cell.bytes_total % share == 0
        assert cell.count_per_rank >= 1
    # each requested size maps to the largest total it can hold (rounded down), at least one element
    wanted = []
    for nbytes in requested:
        count = max(nbytes // share, 1)
        if count not in wanted:
            wanted.append(count)
    assert [cell.count_per_rank for cell in planned] == wanted
    # never more than the largest requested size, unless one element already is
    assert all(cell.bytes_total <= requested[-1] or cell.count_per_rank == 1 for cell in planned)


@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter", "allreduce"])
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_bytes_for_per_rank_semantics(collective, nranks):
    suite = suite_of(
        collectives=[collective],
        ranks=[nranks],
        dtype="float64",
        implementations=["pccl-flat"],
        sizes={"min": "8B", "max": "1KiB", "semantics": "per_rank"},
    )
    planned = cells(suite)
    assert [cell.bytes_per_rank for cell in planned] == geometric(8, 1024, 2)
    for cell in planned:
        assert cell.count_per_rank == cell.bytes_per_rank // 8
        expected_total = cell.bytes_per_rank * (1 if collective == "allreduce" else nranks)
        assert cell.bytes_total == expected_total


def test_total_sizes_round_down_to_the_ranks_share():
    # 100 B over 3 ranks of float32: 8 elements each, 96 B in all (as nccl-tests)
    assert counts_for("allgather", 3, "float32", [100], "total") == [8]
    assert counts_for("reduce_scatter", 3, "float32", [100], "total") == [8]
    assert counts_for("allreduce", 3, "float32", [100], "total") == [25]
    assert counts_for("allgather", 4, "float32", [8, 16, 17, 31, 32], "total") == [1, 2]


def test_counts_are_deduplicated_in_order():
    # 8 B and 16 B total on 4 float32 ranks both give one element per rank
    suite = suite_of(
        collectives=["allgather"], ranks=[4], implementations=["pccl-flat"], sizes={"min": "8B", "max": "64B"}
    )
    planned = cells(suite)
    assert [cell.count_per_rank for cell in planned] == [1, 2, 4]
    assert len({cell.key for cell in planned}) == len(planned)


def test_tiny_sizes_still_move_one_element():
    assert counts_for("allgather", 8, "float64", [1, 2, 4], "total") == [1]
    assert counts_for("allreduce", 2, "float64", [1], "per_rank") == [1]


def test_virtual_nodes_and_launch_grouping():
    suite = suite_of(ranks=[2, 4, 8], ranks_per_node=2)
    launches = expand(suite)
    assert [launch.nranks for launch in launches] == [2, 4, 8]
    assert [launch.ranks_per_node for launch in launches] == [2, 2, 2]
    assert len({launch.launch_id for launch in launches}) == 3
    for launch in launches:
        assert launch.cells, launch.launch_id
        assert str(launch.nranks) in launch.launch_id
        for cell in launch.cells:
            assert cell.nranks == launch.nranks
            assert cell.ranks_per_node == 2
            assert cell.nnodes == launch.nranks // 2
            assert cell.virtual_nodes == (launch.nranks > 2)
            assert cell.device == launch.device == "host"


def test_without_ranks_per_node_one_node_holds_all_ranks():
    for launch in expand(suite_of(ranks=[1, 3, 4])):
        for cell in launch.cells:
            assert (cell.nnodes, cell.ranks_per_node, cell.virtual_nodes) == (1, launch.nranks, False)


def test_cell_keys_are_unique_and_stable():
    suite = suite_of(
        ranks=[2, 4],
        ranks_per_node=2,
        placement=["out_of_place", "in_place"],
        op=["sum", "min"],
        dtype=["float32", "int64"],
    )
    first, second = cells(suite), cells(suite)
    keys = [cell.key for cell in first]
    assert len(set(keys)) == len(keys)
    assert keys == [cell.key for cell in second]
    for cell in first:
        record = cell.to_dict()
        assert record["cell_key"] == cell.key
        assert set(CELL_KEY) <= set(record)


@pytest.mark.parametrize(
    "change",
    [
        {"ranks": [2, 2]},
        {"collectives": ["allgather", "allgather"]},
        {"implementations": ["mpi", "mpi"]},
        {"dtype": ["float32", "float32"]},
        {"op": ["sum", "sum"]},
    ],
    ids=["ranks", "collectives", "implementations", "dtype", "op"],
)
def test_duplicate_entries_are_refused_or_merged(change):
    try:
        suite = suite_of(**change)
    except BadInput:
        return  # refusing duplicates with a clear message is fine too
    planned = cells(suite)
    assert len({cell.key for cell in planned}) == len(planned)
    launch_ids = [launch.launch_id for launch in expand(suite)]
    assert len(set(launch_ids)) == len(launch_ids)


def test_cell_key_ignores_fields_outside_the_key():
    # the gate matches rows of different runs on CELL_KEY; a new suite name must not change it
    one = cells(suite_of(name="a", description="x"))
    two = cells(suite_of(name="b", description="y", timing={"warmup": 9, "iters": 9, "min_iters": 1}))
    assert [c.key for c in one] == [c.key for c in two]


def test_cell_key_changes_with_each_key_field():
    base = cells(
        suite_of(collectives=["allgather"], implementations=["pccl-flat"], sizes={"min": "64B", "max": "64B"})
    )[0]
    variants = [
        suite_of(collectives=["reduce_scatter"], implementations=["pccl-flat"], sizes={"min": "64B", "max": "64B"}),
        suite_of(collectives=["allgather"], implementations=["mpi"], sizes={"min": "64B", "max": "64B"}),
        suite_of(
            collectives=["allgather"],
            implementations=["pccl-flat"],
            sizes={"min": "64B", "max": "64B"},
            ranks=[4],
        ),
        suite_of(
            collectives=["allgather"],
            implementations=["pccl-flat"],
            sizes={"min": "64B", "max": "64B"},
            dtype="int32",
        ),
        suite_of(
            collectives=["allgather"],
            implementations=["pccl-flat"],
            sizes={"min": "64B", "max": "64B"},
            op="max",
        ),
        suite_of(
            collectives=["allgather"],
            implementations=["pccl-flat"],
            sizes={"min": "64B", "max": "64B"},
            placement="in_place",
        ),
        suite_of(collectives=["allgather"], implementations=["pccl-flat"], sizes={"min": "128B", "max": "128B"}),
        suite_of(
            collectives=["allgather"],
            implementations=["pccl-flat"],
            sizes={"min": "64B", "max": "64B"},
            timing={"mode": "pipelined", "iters": 3, "min_iters": 1},
        ),
    ]
    keys = {base.key} | {cells(suite)[0].key for suite in variants}
    assert len(keys) == 1 + len(variants)


def test_timing_mode_reaches_every_cell():
    suite = suite_of(timing={"mode": "pipelined", "iters": 3, "min_iters": 1})
    assert {cell.timing_mode for cell in cells(suite)} == {"pipelined"}


def test_smoke_suite_plan():
    suite, _ = load_suite(ROOT / "suites" / "smoke.yaml")
    launches = expand(suite)
    assert [launch.nranks for launch in launches] == suite.ranks
    total = sum(len(launch.cells) for launch in launches)
    result = run_cli("suites", "validate", "smoke")
    assert result.returncode == 0, describe(result)
    assert f"{total} cells in {len(launches)} launches" in result.stdout


def test_select_measures_only_the_matching_cells():
    everything = [c for launch in expand(suite_of()) for c in launch.cells]
    assert len({c.collective for c in everything}) > 1 or len({c.bytes_total for c in everything}) > 1
    first = everything[0]
    chosen = suite_of(select=[{"collective": first.collective, "bytes_total": f"{first.bytes_total}B"}])
    kept = [c for launch in expand(chosen) for c in launch.cells]
    assert kept and all(c.collective == first.collective and c.bytes_total == first.bytes_total for c in kept)
    assert {c.impl for c in kept} == {c.impl for c in everything if c.collective == first.collective
                                       and c.bytes_total == first.bytes_total}


def test_select_that_matches_nothing_is_refused(tmp_path):
    raw = {**copy.deepcopy(BASE), "select": [{"bytes_total": "3GiB"}]}
    path = tmp_path / "none.yaml"
    path.write_text(yaml.safe_dump(raw))
    done = run_cli("run", "sweep", path, "--out", tmp_path / "run")
    assert done.returncode == 2, describe(done)
    assert "matches no cell" in done.stderr and "Traceback" not in done.stderr, describe(done)
    assert not (tmp_path / "run").exists()


def test_pipelined_inter_phases_validate_and_bad_ones_name_their_field():
    hier = {"impl": "pccl-hier", "inter": ["ring*4", "rd"], "intra": ["ring"]}
    assert suite_of(implementations=[hier]).implementations[0].inter == ["ring*4", "rd"]
    for change, field, needle in (({"inter": ["ring*1"]}, "implementations.0.inter.0", "2 to 64"),
                                  ({"inter": ["ringg*4"]}, "implementations.0.inter.0", "'ringg'"),
                                  ({"intra": ["ring*4"]}, "implementations.0.intra.0", "inter phase")):
        message = bad_input({**copy.deepcopy(BASE), "implementations": [{**hier, **change}]})
        assert field in message and needle in message, message
