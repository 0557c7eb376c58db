"""``algorithm: auto``: table lookups and deriving a table from results."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from bench.judge.tune import derive
from collectives.call import CallSpec
from collectives.impls import get
from collectives.schedules import tuning

TABLE = (
    {"collective": "allgather", "impl": "pccl-flat", "nranks": 4, "nnodes": 1, "bytes_total": 1024, "choice": "rd"},
    {"collective": "allgather", "impl": "pccl-flat", "nranks": 4, "nnodes": 1, "bytes_total": 1 << 20,
     "choice": "ring"},
    {"collective": "allgather", "impl": "pccl-flat", "nranks": 64, "nnodes": 1, "bytes_total": 1 << 40,
     "choice": "bruck"},
    {"collective": "allgather", "impl": "pccl-hier", "nranks": 8, "nnodes": 2, "bytes_total": 1 << 40,
     "choice": "rd/ring"},
)


def test_lookup_takes_nearest_ranks_then_smallest_size_at_least() -> None:
    assert tuning.choose("allgather", "pccl-flat", 4, 1, 8, TABLE) == "rd"
    assert tuning.choose("allgather", "pccl-flat", 4, 1, 1024, TABLE) == "rd"
    assert tuning.choose("allgather", "pccl-flat", 4, 1, 1025, TABLE) == "ring"
    assert tuning.choose("allgather", "pccl-flat", 4, 1, 1 << 30, TABLE) == "ring"  # beyond: the largest
    assert tuning.choose("allgather", "pccl-flat", 5, 1, 8, TABLE) == "rd"  # 5 is nearer 4 than 64
    assert tuning.choose("allgather", "pccl-flat", 48, 1, 8, TABLE) == "bruck"
    with pytest.raises(ValueError, match="no entry"):
        tuning.choose("reduce_scatter", "pccl-flat", 4, 1, 8, TABLE)


def test_shipped_table_covers_every_collective(monkeypatch) -> None:
    monkeypatch.delenv("PCCL_BENCH_TUNING", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent")
    assert tuning.table_path() == tuning.SHIPPED
    for collective in ("allgather", "reduce_scatter", "allreduce"):
        for nranks in (2, 3, 8, 1000):
            call = CallSpec(collective, nranks, 256, algorithm="auto")
            assert get("pccl-flat").unsupported_reason(call) is None
            hier = CallSpec(collective, nranks, 256, intra="auto", inter="auto", nnodes=2)
            assert get("pccl-hier").unsupported_reason(hier) is None


def test_auto_resolves_through_the_environment_table(tmp_path, monkeypatch) -> None:
    path = tmp_path / "t.json"
    tuning.write_table([dict(TABLE[0], choice="bruck")], path, "test")
    monkeypatch.setenv("PCCL_BENCH_TUNING", str(path))
    call = CallSpec("allgather", 4, 2, algorithm="auto")
    assert get("pccl-flat").describe(call).resolved_algorithm == "bruck"


def test_derive_picks_fastest_median_with_margin() -> None:
    base = {"collective": "allgather", "impl": "pccl-flat", "nranks": 4, "nnodes": 2, "bytes_total": 64,
            "status": "ok", "intra": "", "inter": ""}
    frame = pd.DataFrame([
        {**base, "algorithm": "ring", "time_us_p50": 10.0},
        {**base, "algorithm": "rd", "time_us_p50": 5.0},
        {**base, "algorithm": "rd", "time_us_p50": 7.0},  # a second run of rd: the median of its runs counts
        {**base, "algorithm": "ring", "time_us_p50": 1.5},  # one lucky run of three does not make ring the choice
        {**base, "algorithm": "ring", "time_us_p50": 11.0},
        {**base, "algorithm": "bruck", "time_us_p50": 1.0, "status": "wrong"},  # never tuned on
        {**base, "impl": "pccl-hier", "algorithm": "hier", "inter": "rd", "intra": "ring", "time_us_p50": 3.0},
    ])
    entries = derive(frame)
    flat = next(e for e in entries if e["impl"] == "pccl-flat")
    assert flat["choice"] == "rd" and flat["runner_up"] == "ring" and flat["margin"] == pytest.approx(10.0 / 6.0)
    assert flat["time_us_p50"] == pytest.approx(6.0)
    hier = next(e for e in entries if e["impl"] == "pccl-hier")
    assert hier["choice"] == "rd/ring" and hier["runner_up"] is None
    json.dumps(entries)  # the table is plain JSON


def test_derive_keeps_placements_apart_and_auto_reads_its_own() -> None:
    """In place ring wins, out of place rd: two entries, and each placement's lookup gets its own."""
    base = {"collective": "allreduce", "impl": "pccl-flat", "nranks": 4, "nnodes": 1, "bytes_total": 4096,
            "status": "ok", "intra": "", "inter": ""}
    frame = pd.DataFrame([
        {**base, "placement": "out_of_place", "algorithm": "rd", "time_us_p50": 5.0},
        {**base, "placement": "out_of_place", "algorithm": "ring", "time_us_p50": 9.0},
        {**base, "placement": "in_place", "algorithm": "rd", "time_us_p50": 8.0},
        {**base, "placement": "in_place", "algorithm": "ring", "time_us_p50": 4.0},
    ])
    entries = derive(frame)
    by_placement = {e["placement"]: e for e in entries}
    assert len(entries) == 2 and by_placement["out_of_place"]["choice"] == "rd"
    assert by_placement["in_place"]["choice"] == "ring" and by_placement["in_place"]["margin"] == pytest.approx(2.0)
    table = tuple(entries)
    assert tuning.choose("allreduce", "pccl-flat", 4, 1, 4096, table) == "rd"
    assert tuning.choose("allreduce", "pccl-flat", 4, 1, 4096, table, in_place=True) == "ring"
    # a table without placements (the shipped one) holds for both
    assert tuning.choose("allgather", "pccl-flat", 4, 1, 8, TABLE, in_place=True) == "rd"


def test_an_in_place_call_resolves_auto_from_its_own_entry(tmp_path, monkeypatch) -> None:
    path = tmp_path / "t.json"
    tuning.write_table([dict(TABLE[0], placement="out_of_place", choice="bruck"),
                        dict(TABLE[0], placement="in_place", choice="ring")], path, "test")
    monkeypatch.setenv("PCCL_BENCH_TUNING", str(path))
    assert get("pccl-flat").describe(CallSpec("allgather", 4, 2, algorithm="auto")).resolved_algorithm == "bruck"
    in_place = CallSpec("allgather", 4, 2, algorithm="auto", in_place=True)
    assert get("pccl-flat").describe(in_place).resolved_algorithm == "ring"
