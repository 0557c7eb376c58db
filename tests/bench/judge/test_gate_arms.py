"""Same-job comparison: suite arms, ``gate --arms`` and ``pccl-bench ab`` (issue 15, item 3).

Synthetic runs check the pairing and the verdicts deterministically; one real 2-arm run at 2
ranks checks the structure (arms interleaved cell by cell in one launch, an env arm in launches
of its own) and that every cell gets a verdict, never how fast anything was."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
import yaml
from conftest import describe, run_cli
from synthetic_runs import cell, make_run

from bench.errors import BadInput
from bench.judge.arms import split_arms
from bench.judge.gate import GateOptions, gate
from bench.plan.cells import expand
from bench.plan.suite import parse_suite
from bench.results.runset import load_runs

SUITE = {
    "name": "arms", "collectives": ["allreduce"], "implementations": ["mpi"], "ranks": [2],
    "sizes": {"min": "8B", "max": "4KiB", "factor": 8}, "repeats": 2,
    "timing": {"warmup": 2, "iters": 60, "min_iters": 25, "budget_s": 0.02, "target_ci": 0.02, "max_warmup": 20},
    "timeout_s": 120,
    "arms": [{"name": "base"}, {"name": "cand"}, {"name": "nodev", "env": {"MPIR_CVAR_DEVICE_COLLECTIVES": "none"}},
             {"name": "flat", "impl": "pccl-flat", "algorithm": "ring"}],
}


def test_arms_take_turns_in_a_launch_and_env_arms_get_their_own():
    launches = expand(parse_suite(SUITE, "test"))
    # launches of their own alternate ABBA: the second repeat in the reverse order
    assert [launch.launch_id for launch in launches] == [
        "n2-rpn2-host-r0-base+cand+flat", "n2-rpn2-host-r0-nodev", "n2-rpn2-host-r1-nodev",
        "n2-rpn2-host-r1-base+cand+flat"]
    shared = launches[0]
    assert [c.arm for c in shared.cells[:3]] == ["base", "cand", "flat"]  # cell by cell, in turns
    assert shared.cells[0].count_per_rank == shared.cells[1].count_per_rank == shared.cells[2].count_per_rank
    assert shared.cells[2].impl == "pccl-flat" and shared.cells[2].algorithm == "ring"
    assert launches[1].env == launches[2].env == {"MPIR_CVAR_DEVICE_COLLECTIVES": "none"} and shared.env == {}
    assert len({c.key for launch in launches for c in launch.cells}) == 4 * 4 * 2


def test_cells_without_arms_keep_their_keys():
    plain = cell()
    assert plain.key == replace(plain, arm="").key != replace(plain, arm="base").key


def test_suite_rejects_one_arm_and_duplicates():
    for arms in ([{"name": "a"}], [{"name": "a"}, {"name": "a"}]):
        with pytest.raises(BadInput):
            parse_suite({**SUITE, "arms": arms}, "test")


def _arm_run(tmp_path, factor: dict[str, float], state=(1.0,) * 6, seed=0):
    """Two arms x six repeats (the fewest pairs that bound a ratio at 95%); ``state``: the machine's
    speed in each repeat (both arms alike)."""
    cells = {}
    for arm, scale in factor.items():
        for size in (64, 4096, 1 << 20):
            cells[replace(cell(bytes_total=size), arm=arm)] = (10.0 + size / 1000) * scale
    folders = []
    for repeat, speed in enumerate(state):
        folder = make_run(tmp_path / f"r{repeat}", {c: m * speed for c, m in cells.items()}, "ab", seed=seed + repeat,
                          launches=1, stamp=1.8e9 + repeat)
        frame = pd.read_parquet(folder / "results.parquet").assign(repeat=repeat)
        frame.to_parquet(folder / "results.parquet")
        samples = pd.read_parquet(folder / "samples.parquet").assign(repeat=repeat)
        samples.to_parquet(folder / "samples.parquet")
        folders.append(folder)
    return load_runs(folders)


def test_split_arms_pairs_repeats_and_judges(tmp_path):
    runs = _arm_run(tmp_path / "same", {"base": 1.0, "cand": 1.0})
    base, cur, paired = split_arms(runs, "base", "cand")
    assert paired and base.run_order() == [f"ab/r{repeat}" for repeat in range(6)]
    result = gate(base, cur, GateOptions(paired=paired))
    assert {c.verdict for c in result.cells} == {"unchanged"} and result.judged == 3
    slow = _arm_run(tmp_path / "slow", {"base": 1.0, "cand": 1.3})
    result = gate(*split_arms(slow, "base", "cand")[:2], GateOptions(paired=True))
    assert {c.verdict for c in result.cells} == {"regressed"}
    with pytest.raises(BadInput, match="no arm 'other'"):
        split_arms(runs, "base", "other")


def test_machine_drift_between_repeats_cancels_in_pairs(tmp_path):
    """The machine is 2x slower in some repeats; the arms are measured together, so the candidate's
    1.3x shows up pair by pair and A/A stays unchanged."""
    drift = (1.0, 2.0, 1.0, 2.0, 1.5, 1.0)
    same = _arm_run(tmp_path / "aa", {"base": 1.0, "cand": 1.0}, drift)
    assert {c.verdict for c in gate(*split_arms(same, "base", "cand")[:2], GateOptions(paired=True)).cells} == {
        "unchanged"}
    slow = _arm_run(tmp_path / "ab", {"base": 1.0, "cand": 1.3}, drift)
    assert {c.verdict for c in gate(*split_arms(slow, "base", "cand")[:2], GateOptions(paired=True)).cells} == {
        "regressed"}


def test_an_arm_of_another_implementation_takes_its_defaults():
    suite = parse_suite({**SUITE, "repeats": 1, "arms": [{"name": "mpi"}, {"name": "hier", "impl": "pccl-hier",
                                                                          "intra": "auto"},
                                                         {"name": "flat", "impl": "pccl-flat"}]}, "test")
    cells = {cell.arm: cell for cell in expand(suite)[0].cells if cell.bytes_total == 8}
    assert (cells["mpi"].impl, cells["mpi"].algorithm) == ("mpi", "native")
    assert (cells["hier"].algorithm, cells["hier"].intra, cells["hier"].inter) == ("hier", "auto", "rd")
    assert (cells["flat"].algorithm, cells["flat"].intra, cells["flat"].inter) == ("ring", "", "")


@pytest.mark.mpi
def test_real_two_arm_run_at_two_ranks(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({**SUITE, "arms": SUITE["arms"][:2] + SUITE["arms"][2:3]}))
    done = run_cli("ab", suite, "--out", tmp_path / "ab", "--arms", "base", "cand", "--confirm", "0",
                   "--budget", "1", "--junit", tmp_path / "ab.xml")
    assert done.returncode in (0, 1), describe(done)
    assert "cand against base:" in done.stdout and "of 4 cells judged" in done.stdout, describe(done)
    assert "measured in 1 round, 2 launch repeats" in done.stdout, describe(done)  # the budget: no second round
    results = pd.read_parquet(tmp_path / "ab" / "run-1" / "results.parquet")
    assert sorted(results.arm.unique()) == ["base", "cand", "nodev"] and set(results.status) == {"ok"}
    shared = results[results.launch_id == "n2-rpn2-host-r0-base+cand"].sort_values("timestamp", kind="stable")
    assert list(shared.arm[:4]) == ["base", "cand", "base", "cand"]  # the same cell, side by side
    assert set(shared.turns) == {"iteration"}  # timed in turns, iteration by iteration
    assert results[results.arm.eq("nodev")].turns.isna().all()  # an env arm runs in launches of its own
    env = run_cli("gate", "--arms", "base", "nodev", tmp_path / "ab" / "run-1", "--markdown", tmp_path / "env.md")
    # two launch pairs of an env arm cannot bound a ratio at 95%: not judged, not passed
    assert env.returncode == 1 and "0 of 4 cells judged" in env.stdout, describe(env)
    text = (tmp_path / "env.md").read_text()
    assert "below 64 KiB: 10%" in text and "2 pairs cannot bound it at 95% (&gt;= 6 needed)" in text
    turned = run_cli("gate", "--arms", "base", "cand", tmp_path / "ab" / "run-1", "--markdown", tmp_path / "turns.md")
    assert "4 cells of arms timed in turns" in (tmp_path / "turns.md").read_text(), describe(turned)
    meta = __import__("json").loads((tmp_path / "ab" / "run-1" / "meta.json").read_text())
    assert meta["launches"]["n2-rpn2-host-r0-nodev"]["env"]["MPIR_CVAR_DEVICE_COLLECTIVES"] == "none"


@pytest.mark.mpi
def test_three_arms_of_a_launch_are_timed_in_turns_together(tmp_path):
    raw = {**SUITE, "repeats": 1, "arms": [SUITE["arms"][0], SUITE["arms"][1], SUITE["arms"][3]],
           "sizes": {"min": "64B", "max": "128B"}}
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(raw))
    done = run_cli("run", "sweep", suite, "--out", tmp_path / "run")
    assert done.returncode == 0, describe(done)
    results = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(results.status) == {"ok"} and set(results.turns) == {"iteration"}, results[["arm", "turns"]]
    for _, one_cell in results.groupby("bytes_total"):
        assert sorted(one_cell.arm) == ["base", "cand", "flat"]
        assert one_cell.iters.nunique() == 1  # every arm timed in every turn
    judged = run_cli("gate", "--arms", "base", "flat", tmp_path / "run", "--markdown", tmp_path / "gate.md")
    assert "2 cells of arms timed in turns" in (tmp_path / "gate.md").read_text(), describe(judged)


@pytest.mark.mpi
def test_cell_turns_time_arms_one_after_the_other(tmp_path):
    raw = {**SUITE, "repeats": 1, "arms": SUITE["arms"][:2], "sizes": {"min": "64B", "max": "64B"},
           "timing": {**SUITE["timing"], "turns": "cell"}}
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(raw))
    done = run_cli("run", "sweep", suite, "--out", tmp_path / "run")
    assert done.returncode == 0, describe(done)
    results = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert sorted(results.arm) == ["base", "cand"] and results.turns.isna().all()
    assert (results.iters >= 25).all()


def test_fixed_pairs_give_a_stratified_interval():
    import numpy as np

    from bench.results.stats import paired_ratio

    rng = np.random.default_rng(3)
    pairs = [([rng.lognormal(np.log(10 * k), 0.02, 60)], [rng.lognormal(np.log(10 * k / r), 0.02, 60)])
             for k, r in ((1.0, 1.2), (3.0, 1.3))]
    drawn, fixed = paired_ratio(pairs), paired_ratio(pairs, strata=True)
    assert drawn is None  # two pairs drawn from a population of pairs: no 95% interval
    assert 1.22 < fixed.low < fixed.high < 1.28  # both pairs in every resample


def _turns_run(tmp_path, cand_scale: float, turns: str | None = "iteration", seed: int = 5):
    """base and cand timed in turns, 2 repeats x 120 turns, while a co-tenant makes the machine
    1x or 4x slow in stretches of 1-20 turns (both arms alike, as in a real turn)."""
    import numpy as np

    from bench.results.table import build_tables, write_run

    rng = np.random.default_rng(seed)
    rows = []
    for size in (64, 4096, 1 << 20):
        for repeat in range(2):
            state = np.repeat(rng.choice([1.0, 4.0], 40), rng.integers(1, 21, 40))[:120]
            noise = lambda: np.exp(rng.normal(0.0, 0.02, 120))  # noqa: E731
            median_us = 10.0 + size / 1000
            for arm, scale in (("base", 1.0), ("cand", cand_scale)):
                samples = list(median_us * scale * state * noise())
                rows.append({**replace(cell(bytes_total=size), arm=arm, repeat=repeat).to_dict(),
                             "launch_id": f"n2-r{repeat}-base+cand", "samples_us": samples, "status": "ok",
                             "n_wrong": 0, "error": "", "iters": 120, "timestamp": 1.8e9 + repeat, "turns": turns,
                             "library": "MPICH", "library_version": "5.0.2"})
    identity = {"run_id": "ab", "suite": "synthetic", "tool_version": "test", "git_sha": "", "schema_version": 1}
    folder = tmp_path / "ab"
    folder.mkdir(parents=True)
    write_run(folder, *build_tables(rows, identity), {"schema_version": 1, "run_id": "ab", "suite": "synthetic",
                                                      "machine": {"hostname": "test", "cores": 2}, "env": {}})
    return load_runs([folder])


def test_arms_timed_in_turns_are_judged_turn_by_turn(tmp_path):
    """A co-tenant switching the machine between 1x and 4x within the launch: compared by their
    medians some cells get no verdict; turn by turn the 1.3x candidate is caught and A/A holds."""
    for scale, verdict in ((1.0, "unchanged"), (1.3, "regressed")):
        base, cur, paired = split_arms(_turns_run(tmp_path / str(scale), scale), "base", "cand")
        turned = gate(base, cur, GateOptions(paired=paired))
        assert {c.verdict for c in turned.cells} == {verdict}, [(c.label, c.estimate) for c in turned.cells]
        assert all("turn by turn" in c.reason for c in turned.cells)
        assert all(abs(c.estimate.ratio / scale - 1) < 0.03 for c in turned.cells)
    by_median = gate(base, cur, GateOptions(paired=paired, turn_pairs=False, pair_strata=True))
    assert "unchanged" in {c.verdict for c in by_median.cells}  # the load hides it from some medians


def test_turn_pairs_need_the_same_launches(tmp_path):
    """Cells not timed in turns (turns: cell, or an env arm in launches of its own) are judged by
    their launches, never matched turn by turn."""
    base, cur, paired = split_arms(_turns_run(tmp_path, 1.3, turns=None), "base", "cand")
    assert not any("turn by turn" in c.reason for c in gate(base, cur, GateOptions(paired=paired)).cells)
