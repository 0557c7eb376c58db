"""The gate's evaluation for arms in launches of their own (docs/GATE-EVALUATION.md, "Arms in launches of their own"):
environment arms and install arms, measured and judged by ``pccl-bench ab``'s own loop
(bench/sweep/ab.py, its defaults: 600 s budget, rounds of 4 launch repeats, 1 confirmation), quiet or
beside co-tenant processes. Called by scripts/evaluate_gate.py ``--launch-arms env|install``.

Every round is two ``ab``s of suites/ci-ab.yaml's cells (its 6 launch repeats), two arms each:

* ``aa``: ``base`` against ``a2``, the same: for env arms an inert variable of the same length on
  both (``a``/``b``: the environment's size the same), for install arms the other install
  (``--install``: another checkout's venv at the same commit). Two questions decided in the same
  rounds: A/A, and x1.25 (a2's samples times 1.25, the what-if of a uniformly slower candidate);
  each cell's verdict the one it had when it was decided.
* ``real``: ``base`` against ``cand``, a real slowdown of an MPI setting (``MPIR_CVAR_DEVICE_COLLECTIVES
  =none``: MPICH's shared-memory collectives off): for env arms suites/ci-ab.yaml exactly as committed
  (the README's CI example), for install arms the other install with that setting.

"Slowed" cells of the real check are those whose ratio cand/base pooled over the *other* rounds is at
least 1.25, "unaffected" ones within 5% (``--reference DIR``: with another collection's real runs too, e.g.
the quiet one, for loaded collections of one round; ``--labels FILE``: from an independent collection of
the setting's effect instead, benchmarks/setting_effect.py's JSON: slowed where its median ratio is at least
1.25 in every condition it measured, unaffected where it is within 5% in every one). The
probe normalisation is evaluated by judging every round's
final runs again with and without ``--normalise probe`` (one pass, not adaptively), and by the spread
of the A/A launch pairs raw and divided by the probe.
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
SCALE = 1.25
#: "unaffected": a real cell's ratio within this factor of 1 either way
CALM = 1.05
#: per ab of a round: its questions (check -> question)
QUESTIONS = {"aa": {"aa": Question("base", "a2"), "scaled": Question("base", "a2", SCALE)},
             "real": {"real": Question("base", "cand")}}


def arms(kind: str, ab: str, install: str | None) -> list[dict] | None:
    """The arms of one ab of a round (None: suites/ci-ab.yaml's own)."""
    if kind == "env":
        return [{"name": "base", "env": {INERT: "a"}}, {"name": "a2", "env": {INERT: "b"}}] if ab == "aa" else None
    if not install:
        raise SystemExit("--launch-arms install needs --install PATH (another checkout's venv, same commit)")
    if ab == "aa":
        return [{"name": "base"}, {"name": "a2", "install": install}]
    return [{"name": "base"}, {"name": "cand", "install": install, "env": dict(SLOWDOWN)}]


def suite(out: Path, kind: str, ab: str, install: str | None) -> tuple[Path, dict]:
    raw = yaml.safe_load((ROOT / "suites" / "ci-ab.yaml").read_text())
    chosen = arms(kind, ab, install)
    if chosen is not None:
        raw.update(name=f"eval-{kind}-{ab}", arms=chosen)
    path = out / f"suite-{ab}.yaml"
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
    """``rounds`` rounds of the two abs into out/<kind>NN-<ab>; verdicts and timings to out/rounds.json
    and out/verdicts.csv (a collection can be extended: it goes on from the rounds it has)."""
    out.mkdir(parents=True, exist_ok=True)
    suites = {ab: suite(out, kind, ab, install) for ab in QUESTIONS}
    records = json.loads((out / "rounds.json").read_text()) if (out / "rounds.json").exists() else {}
    frames = [pd.read_csv(out / "verdicts.csv")] if (out / "verdicts.csv").exists() else []
    console = Console(quiet=True)
    for index in range(len(records), len(records) + rounds):
        name = f"{kind}{index:02d}"
        records[name] = {}
        for ab, questions in QUESTIONS.items():
            meter = CpuMeter()
            path, raw = suites[ab]
            outcome = measure_until_decided(raw, str(path), out / f"{name}-{ab}", list(questions.values()),
                                            GateOptions(small_threshold=0.10), budget_s, 4, 1, console)
            others = meter.others_share()
            records[name][ab] = {
                "seconds": outcome.seconds, "rounds": len(outcome.rounds), "budget_spent": outcome.budget_spent,
                "repeats": sum(r.pairs for r in outcome.rounds), "others_share": others,
                "runs": [str(r.run) for r in outcome.rounds],
                "shift": {check: _shift(outcome.results[q]) for check, q in questions.items()},
                "shift_verdict": {check: outcome.results[q].shift_verdict() for check, q in questions.items()}}
            for check, question in questions.items():
                frames.append(pd.DataFrame(_cells(outcome.results[question], round=name, check=check)))
            pd.concat(frames, ignore_index=True).to_csv(out / "verdicts.csv", index=False)
            (out / "rounds.json").write_text(json.dumps(records, indent=2) + "\n")
            print(f"  {name} {ab}: {outcome.summary()}, others {others:.0%}", flush=True)


def _shift(result: GateResult) -> list[float] | None:
    return None if result.shift is None else [result.shift.ratio, result.shift.low, result.shift.high]


def _reference(records: dict, name: str, elsewhere: tuple[Path, ...] = ()) -> pd.Series:
    """Per cell key (the gate's, as text): median(cand) / median(base) over every other round's real runs
    and the real runs of ``--reference``'s collection (``elsewhere``)."""
    others = [Path(run) for other, record in records.items() if other != name for run in record["real"]["runs"]]
    others += list(elsewhere)
    if not others:
        return pd.Series(dtype=float)
    samples = load_runs(others).samples
    medians = {arm: samples[samples["arm"].eq(arm)].groupby(list(CELL_KEY[:-1]), observed=True)["time_us"].median()
               for arm in ("base", "cand")}
    ratio = (medians["cand"] / medians["base"]).dropna()
    return pd.Series(ratio.to_numpy(), index=[json.dumps([str(p) for p in key] + [""]) for key in ratio.index])


def rejudge(records: dict, normalise: str) -> pd.DataFrame:
    """Every round's final runs judged again in one pass (not adaptively), raw or relative to the probe."""
    frames = []
    for name, record in records.items():
        for ab, questions in QUESTIONS.items():
            runs = load_runs([Path(run) for run in record[ab]["runs"]])
            for check, question in questions.items():
                result = judge(runs, question, GateOptions(small_threshold=0.10, normalise=normalise))
                frames.append(pd.DataFrame(_cells(result, round=name, check=check)))
    return pd.concat(frames, ignore_index=True)


def pair_spread(records: dict) -> dict:
    """How far the A/A pairs' log ratios (a2 / base, per cell and launch pair) spread, robustly (1.4826
    MAD over a cell's pairs; the median and p90 over cells): raw, each launch's cell time divided by the
    probe measured after that cell (what --normalise probe does), and by its launch's median probe."""
    frames = []
    for record in records.values():
        rows = load_runs([Path(run) for run in record["aa"]["runs"]]).results
        rows = rows[rows["status"].eq("ok")].copy()
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


def labels_of(path: Path) -> dict[tuple[str, str, int], str]:
    """(collective, impl:algorithm, bytes) -> "slowed" | "unaffected" | "between", from setting_effect.py's JSON."""
    by_cell: dict[tuple[str, str, int], list[dict]] = {}
    for cell in json.loads(path.read_text())["cells"]:
        by_cell.setdefault((cell["collective"], cell["impl"], int(cell["bytes"])), []).append(cell)
    out = {}
    for key, conditions in by_cell.items():
        if all(c["ratio"] >= SCALE for c in conditions):
            out[key] = "slowed"
        elif all(1 / CALM < c["ratio"] < CALM for c in conditions):
            out[key] = "unaffected"
        else:
            out[key] = "between"
    return out


def _labelled_cell(key: str, size: int) -> tuple[str, str, int]:
    """A gate cell key (JSON text: collective, impl, algorithm, ...) as setting_effect.py names its cells."""
    collective, impl, algorithm = json.loads(key)[:3]
    return collective, f"{impl}:{algorithm}", int(size)


def figures(frame: pd.DataFrame, references: dict[str, pd.Series], labels: dict | None = None) -> dict:
    aa, scaled, real = (frame[frame.check.eq(check)] for check in ("aa", "scaled", "real"))
    if labels is None:
        real = real.assign(reference=[references[r].get(k, np.nan) for r, k in zip(real["round"], real["key"],
                                                                                    strict=True)])
        slowed = real[real.reference >= SCALE]
        calm = real[(real.reference > 1 / CALM) & (real.reference < CALM)]
    else:
        label = pd.Series([labels.get(_labelled_cell(key, size)) for key, size in zip(real["key"], real["bytes_total"],
                                                                                       strict=True)], index=real.index)
        slowed, calm = real[label.eq("slowed")], real[label.eq("unaffected")]
    return {"aa_cells": len(aa), "aa_flagged": _share(aa, "regressed", "improved"),
            "aa_undecided": _share(aa, "undecided"), "scaled_cells": len(scaled),
            "scaled_regressed": _share(scaled, "regressed"), "scaled_undecided": _share(scaled, "undecided"),
            "real_slowed_cells": len(slowed), "real_slowed_regressed": _share(slowed, "regressed"),
            "real_unaffected_cells": len(calm), "real_unaffected_flagged": _share(calm, "regressed", "improved")}


def _real_runs(collection: Path | None) -> tuple[Path, ...]:
    if collection is None:
        return ()
    if not (collection / "rounds.json").is_file():
        raise SystemExit(f"--reference {collection}: no rounds.json (not a --launch-arms collection)")
    records = json.loads((collection / "rounds.json").read_text())
    return tuple(Path(run) for record in records.values() if "real" in record for run in record["real"]["runs"])


def _aa_passed(frame: pd.DataFrame, records: dict) -> int:
    """A/A abs that would have exited 0: no cell regressed or undecided, not slower across the board."""
    aa = frame[frame.check.eq("aa")]
    failing = set(aa[aa.verdict.isin(["regressed", "undecided"])]["round"])
    return sum(name not in failing and record["aa"]["shift_verdict"]["aa"] != "regressed"
               for name, record in records.items())


def evaluate(out: Path, reference: Path | None = None, labels_path: Path | None = None) -> dict:
    records = json.loads((out / "rounds.json").read_text())
    records = {name: record for name, record in records.items() if set(record) == set(QUESTIONS)}  # whole rounds
    frame = pd.read_csv(out / "verdicts.csv")
    frame = frame[frame["round"].isin(list(records))]
    labels = labels_of(labels_path) if labels_path else None
    # with independent labels the other rounds' ratios are not needed (reading every real run again)
    elsewhere = () if labels else _real_runs(reference)
    references = {} if labels else {name: _reference(records, name, elsewhere) for name in records}
    abs_ = {ab: [record[ab] for record in records.values()] for ab in QUESTIONS}
    return {
        "rounds": len(records), "reference": None if reference is None else str(reference),
        "labels": None if labels_path is None else str(labels_path),
        "others_share_median": float(np.median([r["others_share"] for runs in abs_.values() for r in runs])),
        "ab_seconds": {ab: {"median": float(np.median([r["seconds"] for r in runs])),
                            "max": float(np.max([r["seconds"] for r in runs])),
                            "budget_spent": sum(r["budget_spent"] for r in runs)} for ab, runs in abs_.items()},
        "shift_flagged": {check: sum(record[ab]["shift_verdict"][check] == "regressed" for record in records.values())
                          for ab, questions in QUESTIONS.items() for check in questions},
        "aa_passed": _aa_passed(frame, records),
        "adaptive": figures(frame, references, labels),
        "rejudged": figures(rejudge(records, ""), references, labels),
        "rejudged_probe": figures(rejudge(records, "probe"), references, labels),
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
    took = "; ".join(f"{ab} {t['median']:.0f} s at the median, {t['max']:.0f} s at most ({t['budget_spent']} spent "
                     f"the budget)" for ab, t in found["ab_seconds"].items())
    shift = found["shift_flagged"]
    lines = [f"{kind} arms, {load_procs} co-tenant processes: {found['rounds']} rounds of two abs; other processes' "
             f"median share of the CPUs {found['others_share_median']:.0%}; each ab: {took}; judged across the "
             f"board: x{SCALE} flagged in {shift['scaled']} of {found['rounds']}, real in {shift['real']}, A/A in "
             f"{shift['aa']}; A/A abs that passed (exit 0) {found['aa_passed']} of {found['rounds']}"
             + (f"; slowed and unaffected cells from {found['labels']}" if found.get("labels") else
                (f"; slowed and unaffected cells also from {found['reference']}" if found.get("reference") else "")),
             "",
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
    found = evaluate(args.out, args.reference, args.labels)
    name = f"evaluation-{args.tag}" if args.tag else "evaluation"
    (args.out / f"{name}.json").write_text(json.dumps(found, indent=2) + "\n")
    text = report(kind, args.load_procs if args.load else 0, found)
    (args.out / f"{name}.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    sys.exit("run scripts/evaluate_gate.py --launch-arms env|install")
