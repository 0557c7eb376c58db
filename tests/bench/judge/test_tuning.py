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
