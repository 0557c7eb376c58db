"""The gate evaluation's independent labels (benchmarks/setting_effect.py -> scripts/evaluate_launch_arms.py
--labels): the median's order-statistic interval, and which cells count as slowed or unaffected."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "benchmarks")]
import evaluate_launch_arms  # noqa: E402
import setting_effect  # noqa: E402


def test_order_interval_is_the_binomial_one() -> None:
    values = np.arange(1.0, 11.0)  # n = 10: the 95% interval of the median is (x(2), x(9)), 97.9% coverage
    assert setting_effect.order_interval(values) == (2.0, 9.0)
    assert setting_effect.order_interval(np.arange(1.0, 37.0)) == (12.0, 25.0)  # n = 36: x(12), x(25)
    low, high = setting_effect.order_interval(np.array([1.0, 2.0, 3.0]))  # too few pairs for 95%
    assert np.isnan(low) and np.isnan(high)


def test_labels_need_every_condition(tmp_path: Path) -> None:
    def cell(impl: str, size: int, condition: str, ratio: float) -> dict:
        return {"collective": "allreduce", "impl": impl, "bytes": size, "condition": condition, "ratio": ratio,
                "low": ratio - 0.1, "high": ratio + 0.1}

    cells = [cell("mpi:native", 8, "quiet", 1.40), cell("mpi:native", 8, "load1", 1.30),  # slowed in both
             cell("mpi:native", 64, "quiet", 1.40), cell("mpi:native", 64, "load1", 1.20),  # not slowed loaded
             cell("pccl-flat:ring", 8, "quiet", 1.02), cell("pccl-flat:ring", 8, "load1", 0.97),  # within 5%
             cell("pccl-flat:ring", 64, "quiet", 1.02), cell("pccl-flat:ring", 64, "load1", 1.06)]
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({"cells": cells}))
    labels = evaluate_launch_arms.labels_of(path)
    assert labels == {("allreduce", "mpi:native", 8): "slowed", ("allreduce", "mpi:native", 64): "between",
                      ("allreduce", "pccl-flat:ring", 8): "unaffected", ("allreduce", "pccl-flat:ring", 64): "between"}
    key = json.dumps(["allreduce", "pccl-flat", "ring", "", "", "host", "2", "2", "1", "float32", "sum"])
    assert evaluate_launch_arms._labelled_cell(key, 8) == ("allreduce", "pccl-flat:ring", 8)
