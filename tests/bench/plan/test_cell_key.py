"""The cell key (bench.plan.cells.cell_keys, the one definition): what it hashes, that the planned
placement is in it (schema 2), the schema-1 key old run folders keep, and the planned vs the
unprefixed placement fields of a row."""

from __future__ import annotations

import json
from dataclasses import replace
from hashlib import sha1

from bench.plan.cells import KEY_HEAD, Cell, LaunchPlan, TimingPlan, cell_key, cell_keys, expand, legacy_cell_key
from bench.plan.hosts import HostPlan, hosts_digest, parse_host
from bench.plan.suite import parse_suite

CELL = Cell(collective="allreduce", impl="mpi", algorithm="native", intra="", inter="", device="host", nranks=4,
            nnodes=2, ranks_per_node=2, virtual_nodes=False, dtype="float32", op="sum", placement="out_of_place",
            count_per_rank=16, bytes_per_rank=64, bytes_total=64, timing_mode="sync", repeat=1)


def test_the_key_is_the_hash_of_the_json_list_of_its_fields():
    values = [getattr(CELL, name) for name in KEY_HEAD] + [CELL.count_per_rank, CELL.repeat]
    assert CELL.key == sha1(json.dumps(values).encode()).hexdigest()[:16] == cell_key(vars(CELL))


def test_keys_of_a_group_share_the_head_and_equal_the_cells_own():
    keys = cell_keys(vars(CELL))
    for count, repeat in ((1, 0), (16, 1), (1 << 40, 7)):
        assert keys(count, repeat) == replace(CELL, count_per_rank=count, repeat=repeat).key


def test_the_planned_placement_is_in_the_key():
    other_hosts = replace(CELL, hosts_digest=hosts_digest(["h1", "h2"]))
    virtual = replace(CELL, virtual_nodes=True)
    assert len({CELL.key, other_hosts.key, virtual.key}) == 3
    # schema 1 could not tell them apart: a resumed run mixed cells placed differently
    assert CELL.legacy_key == other_hosts.legacy_key == virtual.legacy_key


def test_the_schema_1_key_is_the_one_old_runs_hold():
    # written by pccl-bench before the placement was in the key (results schema 1)
    assert CELL.legacy_key == "04f74f6b7a448134"
    assert replace(CELL, arm="b").legacy_key == legacy_cell_key({**vars(CELL), "arm": "b"}) == "e26bdc1f19e6e9e0"


def test_a_row_keeps_the_planned_placement_apart_from_the_measured():
    planned = replace(CELL, hosts_digest="0123456789abcdef")
    row = planned.to_dict()
    assert (row["planned_nnodes"], row["planned_ranks_per_node"], row["planned_virtual_nodes"],
            row["planned_hosts_digest"]) == (2, 2, False, "0123456789abcdef")
    assert "hosts_digest" not in row and row["cell_key"] == planned.key
    measured = {**row, "nnodes": 1, "ranks_per_node": 4, "virtual_nodes": True, "hosts_digest": "f" * 16}
    assert Cell.from_dict(measured) == planned, "the cell of a row is the planned one"
    schema_1 = {name: value for name, value in vars(CELL).items() if name != "hosts_digest"}
    assert Cell.from_dict(schema_1) == CELL


def test_a_plan_round_trips_its_cells():
    plan = LaunchPlan("r", "l", 4, 2, None, "/p", TimingPlan(), True, [replace(CELL, hosts_digest="ab" * 8)])
    again = LaunchPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.cells == plan.cells and again.cells[0].key == plan.cells[0].key


SUITE = {"name": "t", "collectives": ["allreduce"], "implementations": ["mpi"], "ranks": [4], "ranks_per_node": 2,
         "sizes": {"min": "64B", "max": "64B"}}


def test_expand_plans_the_named_hosts_digest():
    suite = parse_suite(SUITE, "t")
    alone = expand(suite)[0].cells[0]
    hosts = HostPlan((parse_host("h1"), parse_host("h2")), "hosts")
    named = expand(suite, hosts)[0].cells[0]
    assert alone.hosts_digest == "" and named.hosts_digest == hosts_digest(["h1", "h2"])
    assert alone.key != named.key and alone.legacy_key == named.legacy_key
