"""The lab's analysis scripts on synthetic figures: how two measurements of the same cells are compared
(benchmarks/lab_floor.py) and how the lab model takes its per-message cost from the pair probes
(benchmarks/lab_model.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks")]
import lab_floor  # noqa: E402
import lab_model  # noqa: E402

from bench.model.machine import load_machine  # noqa: E402


def _cells(times: dict[tuple[str, int, str], float]) -> pd.Series:
    index = pd.MultiIndex.from_tuples(list(times), names=lab_floor.KEY)
    return pd.Series(list(times.values()), index=index, name="time_us_p50")


TIMES = {("allgather", 16, "mpi"): 100.0, ("allgather", 16, "pccl-flat:ring"): 150.0,
         ("allgather", 4096, "mpi"): 200.0, ("allgather", 4096, "pccl-flat:ring"): 190.0}


def test_the_same_cells_agree_fully() -> None:
    same = lab_floor.compared(_cells(TIMES), _cells(TIMES))
    assert same["median_factor"] == 1.0 and same["same_fastest"] == 1.0 and same["fastest_within_10pct"] == 1.0


def test_a_machine_twice_as_slow_is_leveled_out_but_a_swapped_winner_is_not() -> None:
    slower = lab_floor.compared(_cells(TIMES), _cells({key: 2 * value for key, value in TIMES.items()}))
    assert slower["median_factor"] == 2.0 and slower["ratio_of_medians"] == 0.5
    assert slower["leveled_median_factor"] == 1.0 and slower["same_fastest"] == 1.0
    swapped = dict(TIMES)
    swapped[("allgather", 16, "pccl-flat:ring")] = 95.0  # 16 B: ring now 5% ahead
    swapped[("allgather", 4096, "mpi")] = 150.0  # 4 KiB: mpi now 1.27x ahead
    result = lab_floor.compared(_cells(TIMES), _cells(swapped))
    assert result["same_fastest"] == 0.0
    # each (collective, size) judged both ways: is the other's fastest within 10% of the fastest here?
    # 16 B: ring in the first 150 vs 100 no, mpi in the second 100 vs 95 yes; 4 KiB: mpi in the first
    # 200 vs 190 yes, ring in the second 190 vs 150 no
    assert result["fastest_within_10pct"] == pytest.approx(2 / 4)


def _probes(path: Path, pairs: list[tuple[float, float]]) -> Path:
    rounds = [{"50 us": {"small_us": 80.0, "large_gbps": 0.3, "duplex_gbps": 0.25, "pair_us": one,
                         "two_pairs_us": two}} for one, two in pairs]
    path.write_text(json.dumps({"rounds": rounds}))
    return path


def test_the_lab_model_takes_half_the_second_pairs_cost_per_message(tmp_path: Path) -> None:
    probes = _probes(tmp_path / "links.json", [(100.0, 140.0), (120.0, 130.0), (90.0, 150.0)])
    machine, _ = load_machine(lab_model.lab_machine("50 us", tmp_path, probes=probes))
    assert machine.fabric_message_us == pytest.approx(20.0)  # the median of 20, 5, 30
    assert machine.fabric_gbps == 0.25 and machine.inter.latency_us == 80.0
    assert "two pairs at once minus one" in machine.sources["fabric_message_us"]
    # a second pair that measured faster (noise) is no negative cost; none without the fabric
    faster = _probes(tmp_path / "faster.json", [(150.0, 130.0)])
    assert load_machine(lab_model.lab_machine("50 us", tmp_path, probes=faster))[0].fabric_message_us == 0.0
    bare, _ = load_machine(lab_model.lab_machine("50 us", tmp_path, fabric=False, probes=probes))
    assert bare.fabric_message_us is None and bare.fabric_gbps is None
    # the probe in turns gives its own paired figure per round (the median over blocks): taken before the medians'
    paired = tmp_path / "paired.json"
    paired.write_text(json.dumps({"rounds": [{"50 us": {**json.loads(probes.read_text())["rounds"][0]["50 us"],
                                                        "message_us": value}} for value in (1.0, 3.0, 2.0)]}))
    assert load_machine(lab_model.lab_machine("50 us", tmp_path, probes=paired))[0].fabric_message_us == 2.0
    given, _ = load_machine(lab_model.lab_machine("50 us", tmp_path, probes=probes, message_us=7.0))
    assert given.fabric_message_us == 7.0 and given.sources["fabric_message_us"] == "given (--message-us)"
