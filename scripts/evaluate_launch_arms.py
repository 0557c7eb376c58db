"""The gate's evaluation for arms in launches of their own (docs/GATE.md, "Arms in launches of their own"):
environment arms and install arms, measured and judged by ``pccl-bench ab``'s own loop
(bench/sweep/ab.py, its defaults), quiet or beside co-tenant processes. Called by
scripts/evaluate_gate.py ``--launch-arms env|install``.

Every round is one ``ab`` of suites/ci-ab.yaml's cells (its 4 launch repeats, the default budget, round
size and confirmation) with three arms, all in launches of their own:

* ``base``  the MPI library as it is
* ``a2``    the same as base: an environment arm (an inert variable of the same length as base's, so
            the environment's size is the same), or the other install (``--install``: another checkout's
            venv at the same commit)
* ``b``     a2 plus a real slowdown of an MPI setting (``MPIR_CVAR_DEVICE_COLLECTIVES=none``: MPICH's
            shared-memory collectives off)

and three questions decided together in the same rounds, each cell's verdict the one it had when it
was decided: A/A (a2 against base), x1.25 (a2's samples x1.25 against base) and real (b against base).
"Slowed" cells of the real check are those whose ratio b/base pooled over the *other* rounds of the
collection is at least 1.25, "unaffected" ones within 5%. The probe normalisation is evaluated by
judging each round's final runs again with and without ``--normalise probe`` (not adaptively).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from rich.console import Console

from bench.judge.gate import GateOptions, GateResult
from bench.plan.cells import CELL_KEY
from bench.results.runset import load_runs
from bench.sweep.ab import Question, judge, measure_until_decided

ROOT = Path(__file__).resolve().parent.parent
SLOWDOWN = {"MPIR_CVAR_DEVICE_COLLECTIVES": "none"}
#: the inert variable of the A/A arms: the same length on both sides
INERT = "PCCL_BENCH_EVAL_ARM"
QUESTIONS = {"aa": Question("base", "a2"), "scaled": Question("base", "a2", 1.25), "real": Question("base", "b")}
SCALE = 1.25


def arms(kind: str, install: str | None) -> list[dict]:
    if kind == "env":
        return [{"name": "base", "env": {INERT: "a"}}, {"name": "a2", "env": {INERT: "b"}},
                {"name": "b", "env": {INERT: "b", **SLOWDOWN}}]
    if not install:
        raise SystemExit("--launch-arms install needs --install PATH (another checkout's venv, same commit)")
    return [{"name": "base", "env": {INERT: "a"}}, {"name": "a2", "env": {INERT: "a"}, "install": install},
            {"name": "b", "env": {INERT: "a", **SLOWDOWN}, "install": install}]


def suite(out: Path, kind: str, install: str | None) -> tuple[Path, dict]:
    raw = yaml.safe_load((ROOT / "suites" / "ci-ab.yaml").read_text())
    raw.update(name=f"eval-{kind}", arms=arms(kind, install))
    path = out / "suite.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path, raw


def _cells(result: GateResult, **tags) -> list[dict]:
    return [{"key": json.dumps([str(part) for part in cell.key]), "label": cell.label,
             "bytes_total": int(cell.row["bytes_total"]), "verdict": cell.verdict,
             "ratio": cell.estimate.ratio if cell.estimate else np.nan,
             "low": cell.estimate.low if cell.estimate else np.nan,
             "high": cell.estimate.high if cell.estimate else np.nan, **tags} for cell in result.cells]


class CpuMeter:
    """Other processes' share of all CPUs since it was made (this process and its finished children
    excluded; running co-tenants of ``--load`` count as others)."""

    def __init__(self) -> None:
        self.start = (self._busy(), self._mine(), time.monotonic())

    @staticmethod
    def _busy() -> float:
        fields = [float(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
        return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _mine() -> float:
        return sum(getattr(resource.getrusage(who), name) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                   for name in ("ru_utime", "ru_stime"))

    def others_share(self) -> float:
        busy, mine, start = self.start
        capacity = (time.monotonic() - start) * (os.cpu_count() or 1)
        return max(0.0, (self._busy() - busy) - (self._mine() - mine)) / capacity


def collect(out: Path, kind: str, rounds: int, install: str | None, budget_s: float) -> None:
    """``rounds`` abs into out/<kind>NN; verdicts and timings to out/rounds.json, out/verdicts.csv."""
    out.mkdir(parents=True, exist_ok=True)
    path, raw = suite(out, kind, install)
    records = json.loads((out / "rounds.json").read_text()) if (out / "rounds.json").exists() else {}
    frames = [pd.read_csv(out / "verdicts.csv")] if (out / "verdicts.csv").exists() else []
    console = Console(quiet=True)
    for index in range(len(records), len(records) + rounds):
        name = f"{kind}{index:02d}"
        options = GateOptions(small_threshold=0.10)
        meter = CpuMeter()
        outcome = measure_until_decided(path, raw, out / name, list(QUESTIONS.values()), options, budget_s, 4, 1,
                                        console)
        others = meter.others_share()
        records[name] = {"seconds": outcome.seconds, "rounds": len(outcome.rounds),
                         "repeats": sum(r.pairs for r in outcome.rounds), "budget_spent": outcome.budget_spent,
                         "others_share": others, "runs": [str(r.run) for r in outcome.rounds],
                         "shift": {check: (lambda s: None if s is None else [s.ratio, s.low, s.high])(
                             outcome.results[q].shift) for check, q in QUESTIONS.items()},
                         "shift_verdict": {check: outcome.results[q].shift_verdict() for check, q in QUESTIONS.items()}}
        for check, question in QUESTIONS.items():
            frames.append(pd.DataFrame(_cells(outcome.results[question], round=name, check=check)))
        pd.concat(frames, ignore_index=True).to_csv(out / "verdicts.csv", index=False)
        (out / "rounds.json").write_text(json.dumps(records, indent=2) + "\n")
        print(f"  {name}: {outcome.summary()}, others {others:.0%}", flush=True)


def _reference(out: Path, records: dict, name: str) -> pd.Series:
    """Per cell key (the gate's, as text): median(b) / median(base) over every other round's runs."""
    others = [Path(run) for other, record in records.items() if other != name for run in record["runs"]]
    if not others:
        return pd.Series(dtype=float)
    samples = load_runs(others).samples
    medians = {arm: samples[samples["arm"].eq(arm)].groupby(list(CELL_KEY[:-1]), observed=True)["time_us"].median()
               for arm in ("base", "b")}
    ratio = (medians["b"] / medians["base"]).dropna()
    return pd.Series(ratio.to_numpy(), index=[json.dumps([str(p) for p in key] + [""]) for key in ratio.index])


def rejudge(out: Path, records: dict, normalise: str) -> pd.DataFrame:
    """Every round's final runs judged again in one pass (not adaptively), raw or relative to the probe."""
    frames = []
    for name, record in records.items():
        runs = load_runs([Path(run) for run in record["runs"]])
        for check, question in QUESTIONS.items():
            result = judge(runs, question, GateOptions(small_threshold=0.10, normalise=normalise))
            frames.append(pd.DataFrame(_cells(result, round=name, check=check)))
    return pd.concat(frames, ignore_index=True)


def pair_spread(records: dict) -> dict:
    """How far the A/A pairs' log ratios (a2 / base, per cell and launch pair) spread, robustly (1.4826
    MAD over a cell's pairs; the median and p90 over cells): raw, each launch's cell time divided by the
    probe measured after that cell (what --normalise probe does), and by its launch's median probe."""
    frames = []
    for record in records.values():
        rows = load_runs([Path(run) for run in record["runs"]]).results
        rows = rows[rows["arm"].isin(["base", "a2"]) & rows["status"].eq("ok")].copy()
        rows["cell"] = rows[list(CELL_KEY[:-1])].astype(str).agg("/".join, axis=1)
        rows["pair"] = rows["run_id"].astype(str) + "/" + rows["repeat"].astype(str)
        rows["launch"] = rows["run_id"].astype(str) + "/" + rows["launch_id"].astype(str)
        rows["launch_probe"] = rows.groupby("launch")["probe_us"].transform("median")
        frames.append(rows)
    rows = pd.concat(frames, ignore_index=True)
    out = {}
    for name, divide in (("raw", None), ("probe", "probe_us"), ("launch_probe", "launch_probe")):
        time_us = rows["time_us_p50"] / (rows[divide] if divide else 1.0)
        table = rows.assign(t=time_us).pivot_table(index=["cell", "pair"], columns="arm", values="t").dropna()
        logs = np.log(table["a2"] / table["base"])
        spread = logs.groupby(level=0).agg(lambda v: 1.4826 * np.median(np.abs(v - np.median(v))))
        out[name] = {"median": round(float(spread.median()), 4), "p90": round(float(spread.quantile(0.9)), 4)}
    return out


def _share(frame: pd.DataFrame, *verdicts: str) -> float | None:
    return round(float(frame.verdict.isin(verdicts).mean()), 4) if len(frame) else None


def figures(frame: pd.DataFrame, references: dict[str, pd.Series]) -> dict:
    aa, scaled, real = (frame[frame.check.eq(check)] for check in ("aa", "scaled", "real"))
    real = real.assign(reference=[references[r].get(k, np.nan) for r, k in zip(real["round"], real["key"],
                                                                                strict=True)])
    slowed = real[real.reference >= SCALE]
    calm = real[(real.reference > 1 / 1.05) & (real.reference < 1.05)]
    return {"aa_cells": len(aa), "aa_flagged": _share(aa, "regressed", "improved"),
            "aa_undecided": _share(aa, "undecided"), "scaled_cells": len(scaled),
            "scaled_regressed": _share(scaled, "regressed"), "scaled_undecided": _share(scaled, "undecided"),
            "real_slowed_cells": len(slowed), "real_slowed_regressed": _share(slowed, "regressed"),
            "real_unaffected_cells": len(calm), "real_unaffected_flagged": _share(calm, "regressed", "improved")}


def evaluate(out: Path) -> dict:
    records = json.loads((out / "rounds.json").read_text())
    frame = pd.read_csv(out / "verdicts.csv")
    references = {name: _reference(out, records, name) for name in records}
    seconds = [record["seconds"] for record in records.values()]
    shifts = {check: sum(record["shift_verdict"][check] == "regressed" for record in records.values())
              for check in QUESTIONS}
    return {
        "rounds": len(records), "others_share_median": float(np.median([r["others_share"] for r in records.values()])),
        "ab_seconds": {"median": float(np.median(seconds)), "max": float(np.max(seconds)), "all": seconds},
        "budget_spent": sum(record["budget_spent"] for record in records.values()),
        "shift_flagged": shifts, "adaptive": figures(frame, references),
        "rejudged": figures(rejudge(out, records, ""), references),
        "rejudged_probe": figures(rejudge(out, records, "probe"), references),
        "aa_pair_spread": pair_spread(records),
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def report(kind: str, load_procs: int, found: dict) -> str:
    columns = (("adaptive", "ab (adaptive, as run)"), ("rejudged", "final runs, one pass"),
               ("rejudged_probe", "final runs, one pass, --normalise probe"))
    rows = [("A/A: flagged (regressed or improved)", "aa_cells", "aa_flagged", "<= 1%"),
            ("A/A: undecided", None, "aa_undecided", ""),
            (f"x{SCALE} on the candidate: regressed", "scaled_cells", "scaled_regressed", ">= 95%"),
            (f"x{SCALE}: undecided", None, "scaled_undecided", ""),
            ("real: slowed cells (>= 1.25x) regressed", "real_slowed_cells", "real_slowed_regressed", ">= 90%"),
            ("real: unaffected cells (within 5%) flagged", "real_unaffected_cells", "real_unaffected_flagged",
             "<= 1%")]
    seconds = found["ab_seconds"]
    shift = found["shift_flagged"]
    lines = [f"{kind} arms, {load_procs} co-tenant processes: {found['rounds']} abs; other processes' median share "
             f"of the CPUs {found['others_share_median']:.0%}; each ab {seconds['median']:.0f} s at the median, "
             f"{seconds['max']:.0f} s at most ({found['budget_spent']} spent the budget); judged across the board: "
             f"x{SCALE} flagged in {shift['scaled']} of {found['rounds']}, real in {shift['real']}, A/A in "
             f"{shift['aa']}", "",
             "| check | " + " | ".join(title for _, title in columns) + " | target |",
             "| --- |" + " ---: |" * len(columns) + " --- |"]
    for title, count, share, target in rows:
        cells = [_pct(found[column][share]) + (f" of {found[column][count]}" if count else "") for column, _ in columns]
        lines.append(f"| {title} | " + " | ".join(cells) + f" | {target} |")
    spread = found["aa_pair_spread"]
    shown = "; ".join(f"{name.replace('_', ' ')} {v['median']:.3f} / {v['p90']:.3f}" for name, v in spread.items())
    lines += ["", f"A/A launch pairs' log ratio, robust sd over a cell's pairs (median / p90 over cells): {shown}"]
    return "\n".join(lines)


def main(args, start_load, stop_load) -> None:
    kind = args.launch_arms
    if not args.analyse_only:
        children = start_load(args.load_procs, seed=26) if args.load else []
        try:
            collect(args.out, kind, args.rounds, args.install, args.budget)
        finally:
            stop_load(children)
    found = evaluate(args.out)
    name = f"evaluation-{args.tag}" if args.tag else "evaluation"
    (args.out / f"{name}.json").write_text(json.dumps(found, indent=2) + "\n")
    text = report(kind, args.load_procs if args.load else 0, found)
    (args.out / f"{name}.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    sys.exit("run scripts/evaluate_gate.py --launch-arms env|install")
