"""Prove the gate's statistics on real runs of this machine (docs/GATE-EVALUATION.md).

    .venv/bin/python scripts/evaluate_gate.py [--rounds 12] [--out results/gate-eval]

Runs suites/ci.yaml in rounds of "A, A, B" (A: as committed; B: a real slowdown, MPICH's own
shared-memory collectives switched off through its documented control variable), then gates:

* A/A          A runs against A runs (target: at most 1% of cells flagged, regressed or improved);
* A/B x1.25    the same, with every sample of the current run multiplied by 1.25
               (target: at least 95% of cells regressed);
* A/B real     B runs against A runs; "slowed" cells are those whose
               median ratio over all *other* (quiet) B runs against all (quiet) A runs is at
               least 1.25, and "unaffected" ones within 5%.

Each check is made in three designs of whole runs: "sequential" (a baseline measured before, as
a committed one), "interleaved" (``--pool`` runs per side measured in alternation, pooled) and
"paired" (the same, judged pair by pair with ``gate --paired``); and in two same-job designs on
one run per round of the suite with three arms (``pccl-bench ab``, ``--repeats`` launch pairs,
default 4): "a" and "a2" (identical, timed in turns iteration by iteration in each launch) and
"b" (the MPICH slowdown, in launches of its own alternating with theirs): "same-job" (``gate
--arms``: A/A is a against a2, x1.25 is a against a2 scaled, both judged turn by turn unless
``--no-turn-pairs``; real is a against b, pair by pair) and "same-job+confirm" (cells regressed
in one run are judged again on that run and the next together, as ``pccl-bench ab --confirm 1``
does).

``--load`` adds co-tenant load from this script's own child processes: ``--load-procs`` (default
1, i.e. one core of two) busy-spin for random intervals of 0.3-3 s with pauses of 0.3-3 s, for the
whole collection, so the noisy case is reproducible on any machine. Collect quiet and loaded
figures into two folders and compare the two reports.

The machine is shared: before each run the script can wait (``--quiet-wait S``, default 0) for
a second in which other processes leave the CPUs alone; while a run is measured it records how
much CPU time other processes took (/proc/stat less this script's children) and the
hypervisor's steal time. Figures are given for all comparisons and for "quiet" ones (every run
involved had others below 5%).
``--analyse-only`` re-reads a previous collection (e.g. to try other thresholds).
Figures go to OUT/evaluation.json and OUT/evaluation.md (``--tag T``: evaluation-T.*) and are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.judge.arms import split_arms  # noqa: E402
from bench.judge.gate import SAME_JOB_SMALL_THRESHOLD, GateOptions, GateResult, gate  # noqa: E402
from bench.plan.cells import CELL_KEY  # noqa: E402
from bench.results.runset import RunSet, load_runs  # noqa: E402

#: MPICH control variable (``mpivars``): no device (shared-memory) collectives, so MPI_Allreduce,
#: MPI_Allgather and MPI_Barrier fall back to point-to-point algorithms
SLOWDOWN_ENV = {"MPIR_CVAR_DEVICE_COLLECTIVES": "none"}
SCALE = 1.25
QUIET_SHARE = 0.05


def cpu_ticks() -> tuple[float, float]:
    """(busy, steal) seconds of all CPUs since boot."""
    fields = [float(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq) / hz, steal / hz


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def others_share(seconds: float) -> float:
    """Share of all CPUs that other processes used over ``seconds`` (this script sleeps)."""
    (busy0, _), start = cpu_ticks(), time.monotonic()
    time.sleep(seconds)
    (busy1, _), wall_s = cpu_ticks(), time.monotonic() - start
    return (busy1 - busy0) / (wall_s * (os.cpu_count() or 1))


def wait_for_quiet(limit_s: float) -> None:
    """Wait (at most ``limit_s``) until other processes leave the CPUs alone for a second, as a
    dedicated CI runner would. Runs that still overlap load are marked as not quiet."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and others_share(1.0) > QUIET_SHARE:
        pass


LOAD_CHILD = """
import random, sys, time
rng = random.Random(int(sys.argv[1]))
while True:
    end = time.monotonic() + rng.uniform(0.3, 3.0)
    while time.monotonic() < end:
        pass
    time.sleep(rng.uniform(0.3, 3.0))
"""


def start_load(procs: int, seed: int) -> list[subprocess.Popen]:
    """Co-tenants: child processes that each take a core for random intervals."""
    return [subprocess.Popen([sys.executable, "-c", LOAD_CHILD, str(seed + index)]) for index in range(procs)]


def stop_load(children: list[subprocess.Popen]) -> None:
    for child in children:
        child.kill()
        child.wait()


def arms_suite(out: Path, repeats: int) -> Path:
    """suites/ci.yaml with the three arms of the same-job designs, ``repeats`` launch pairs."""
    import yaml

    raw = yaml.safe_load((ROOT / "suites" / "ci.yaml").read_text())
    raw["name"] = "ci-ab"
    raw["repeats"] = repeats
    raw["arms"] = [{"name": "a"}, {"name": "a2"}, {"name": "b", "env": dict(SLOWDOWN_ENV)}]
    path = out / "ci-ab.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def sweep(folder: Path, env: dict[str, str], suite: Path = ROOT / "suites" / "ci.yaml") -> dict:
    argv = [sys.executable, "-m", "bench", "run", "sweep", str(suite), "--out", str(folder)]
    argv += [arg for name, value in env.items() for arg in ("--set", f"env.{name}={value}")]
    (busy0, steal0), mine0, start = cpu_ticks(), children_cpu(), time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    (busy1, steal1), mine1, wall_s = cpu_ticks(), children_cpu(), time.monotonic() - start
    if done.returncode not in (0, 3):
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    capacity = wall_s * (os.cpu_count() or 1)
    record = {"wall_s": wall_s, "others_share": max(0.0, (busy1 - busy0) - (mine1 - mine0)) / capacity,
              "steal_share": (steal1 - steal0) / capacity, "exit": done.returncode}
    print(f"  {folder.name}: exit {done.returncode}, {wall_s:.1f} s, others {record['others_share']:.0%}, "
          f"steal {record['steal_share']:.0%}", flush=True)
    return record


def collect(out: Path, rounds: int, quiet_wait_s: float, load_procs: int = 0, same_job_only: bool = False,
            repeats: int = 4) -> None:
    out.mkdir(parents=True, exist_ok=True)
    records = {}
    suite = arms_suite(out, repeats)
    children = start_load(load_procs, seed=15) if load_procs else []
    try:
        for index in range(rounds):
            for name, env, path in ((f"A{2 * index:02d}", {}, ROOT / "suites" / "ci.yaml"),
                                    (f"A{2 * index + 1:02d}", {}, ROOT / "suites" / "ci.yaml"),
                                    (f"B{index:02d}", SLOWDOWN_ENV, ROOT / "suites" / "ci.yaml"),
                                    (f"S{index:02d}", {}, suite)):
                if same_job_only and not name.startswith("S"):
                    continue
                wait_for_quiet(quiet_wait_s)
                records[name] = {**sweep(out / name, env, path), "load_procs": load_procs}
                (out / "runs.json").write_text(json.dumps(records, indent=2) + "\n")
    finally:
        stop_load(children)


def scaled(runs: RunSet, factor: float) -> RunSet:
    return replace(runs, samples=runs.samples.assign(time_us=runs.samples["time_us"] * factor))


def pooled(runs: list[RunSet]) -> RunSet:
    return RunSet(pd.concat([r.results for r in runs], ignore_index=True),
                  pd.concat([r.samples for r in runs], ignore_index=True),
                  [m for r in runs for m in r.metas], [s for r in runs for s in r.sources])


def verdicts(baseline: RunSet, current: RunSet, options: GateOptions, **tags) -> pd.DataFrame:
    result = gate(baseline, current, options)
    return pd.DataFrame([{"key": cell.key, "label": cell.label, "bytes_total": cell.row["bytes_total"],
                          "verdict": cell.verdict, "ratio": cell.estimate.ratio if cell.estimate else np.nan,
                          **tags} for cell in result.cells])


def reference_ratios(slow: list[RunSet], fast: list[RunSet]) -> pd.Series:
    """Median ratio per cell key over whole pools (what "slowed" means for the real A/B)."""
    def medians(sets: list[RunSet]) -> pd.Series:
        return pd.concat([s.samples for s in sets], ignore_index=True).groupby(list(CELL_KEY))["time_us"].median()
    return medians(slow) / medians(fast)


def sequential(a_names: list[str], b_names: list[str], pool: int):
    """(check, baseline runs, current runs) as with a committed baseline: the ``pool`` A runs
    measured just before the current run."""
    for index in range(pool, len(a_names)):
        yield "aa", a_names[index - pool:index], [a_names[index]]
    for position, name in enumerate(b_names):
        end = min(max(pool, 2 * (position + 1)), len(a_names))  # rounds are A, A, B
        yield "real", a_names[end - pool:end], [name]


def interleaved(a_names: list[str], b_names: list[str], pool: int):
    """(check, baseline runs, current runs) as with a same-job A/B on a shared runner: the two
    sides measured in alternation within the same minute, ``pool`` runs each."""
    for start in range(len(a_names) - 2 * pool + 1):
        window = a_names[start:start + 2 * pool]
        yield "aa", window[0::2], window[1::2]
    for start in range(len(b_names) - pool + 1):
        yield "real", a_names[2 * start:2 * (start + pool)], b_names[start:start + pool]


def paired(a_names: list[str], b_names: list[str], pool: int):
    """As ``interleaved``, judged pair by pair (``gate --paired``): each B run is paired with the
    A run measured just before it."""
    yield from ((check, base, cur) for check, base, cur in interleaved(a_names, b_names, pool) if check == "aa")
    for start in range(len(b_names) - pool + 1):
        yield "real", [a_names[2 * r + 1] for r in range(start, start + pool)], b_names[start:start + pool]


DESIGNS = {"sequential": sequential, "interleaved": interleaved, "paired": paired}
#: every design in the report: the run-level ones above and the same-job ones (``same_job``)
ALL_DESIGNS = (*DESIGNS, "same-job", "same-job+confirm")


def _reference_pools(runs: dict, a_names: list[str], b_names: list[str], current: list[str],
                     quiet: dict[str, bool]) -> tuple[list[RunSet], list[RunSet]]:
    """The B runs other than ``current`` and all A runs, quiet ones only where there are some."""
    slow = [n for n in b_names if n not in current] or current
    fast = list(a_names)
    slow = [n for n in slow if quiet.get(n)] or slow
    fast = [n for n in fast if quiet.get(n)] or fast
    return [runs[n] for n in slow], [runs[n] for n in fast]


def compare_all(out: Path, pool: int, options: GateOptions, quiet: dict[str, bool]) -> pd.DataFrame:
    names = sorted(path.name for path in out.glob("[AB][0-9]*") if (path / "results.parquet").exists())
    runs = {name: load_runs([out / name]) for name in names}
    a_names = [name for name in names if name.startswith("A")]
    b_names = [name for name in names if name.startswith("B")]
    if not a_names or not b_names:
        return pd.DataFrame()
    frames = []
    for design, pairs in DESIGNS.items():
        design_options = replace(options, paired=design == "paired", pair_strata=False)
        for check, base_names, cur_names in pairs(a_names, b_names, pool):
            base, current = pooled([runs[n] for n in base_names]), pooled([runs[n] for n in cur_names])
            tags = {"design": design, "run": "+".join(cur_names),
                    "quiet": all(quiet.get(n, False) for n in [*base_names, *cur_names])}
            if check == "aa":
                frames.append(verdicts(base, current, design_options, check="aa", **tags))
                frames.append(verdicts(base, scaled(current, SCALE), design_options, check="scaled", **tags))
                continue
            reference = reference_ratios(*_reference_pools(runs, a_names, b_names, cur_names, quiet))
            frame = verdicts(base, current, design_options, check="real", **tags)
            frame["reference"] = [reference.get(key, np.nan) for key in frame["key"]]
            frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def confirmed(first: GateResult, again: GateResult) -> GateResult:
    """``ab --confirm 1`` as it was when these designs were measured (issue 15; ab now measures rounds
    until cells are decided: --launch-arms): first-pass verdicts, except that a cell regressed in the
    first pass takes the verdict of both runs together."""
    later = {cell.key: cell for cell in again.cells}
    cells = [later[cell.key] if cell.verdict == "regressed" and cell.key in later else cell for cell in first.cells]
    return GateResult(cells, first.options, again.baseline_runs, again.current_runs)


def _frame_of(result, **tags) -> pd.DataFrame:
    return pd.DataFrame([{"key": cell.key, "label": cell.label, "bytes_total": cell.row["bytes_total"],
                          "verdict": cell.verdict, "ratio": cell.estimate.ratio if cell.estimate else np.nan,
                          **tags} for cell in result.cells])


def _arm_pair(runs: list[RunSet], base: str, cur: str, factor: float = 1.0) -> tuple[RunSet, RunSet, bool]:
    baseline, current, paired = split_arms(pooled(runs), base, cur)
    return baseline, scaled(current, factor) if factor != 1.0 else current, paired


def first_repeats(runs: RunSet, repeats: int | None) -> RunSet:
    """Only the first ``repeats`` launch repeats of a run (what a run with fewer would have had)."""
    if repeats is None:
        return runs
    return replace(runs, results=runs.results[runs.results["repeat"] < repeats],
                   samples=runs.samples[runs.samples["repeat"] < repeats])


def same_job(out: Path, options: GateOptions, quiet: dict[str, bool], repeats: int | None = None) -> pd.DataFrame:
    """The same-job designs on the S runs (arms a, a2, b)."""
    names = sorted(path.name for path in out.glob("S[0-9]*") if (path / "results.parquet").exists())
    runs = {name: first_repeats(load_runs([out / name]), repeats) for name in names}
    checks = (("aa", "a", "a2", 1.0), ("scaled", "a", "a2", SCALE), ("real", "a", "b", 1.0))
    frames = []
    for position, name in enumerate(names):
        others = [runs[n] for n in names if n != name]
        reference = None
        if others:
            slow, fast = (pd.concat([r.samples[r.samples.arm.eq(arm)] for r in others], ignore_index=True)
                          .assign(arm="").groupby(list(CELL_KEY))["time_us"].median() for arm in ("b", "a"))
            reference = slow / fast
        nxt = names[position + 1] if position + 1 < len(names) else None
        tags = {"run": name, "quiet": quiet.get(name, False)}
        for check, base, cur, factor in checks:
            first_base, first_cur, paired = _arm_pair([runs[name]], base, cur, factor)
            first = gate(first_base, first_cur, replace(options, paired=paired))  # pair_strata as given
            designs = [("same-job", first)]
            if nxt is not None:
                both_base, both_cur, both_paired = _arm_pair([runs[name], runs[nxt]], base, cur, factor)
                again = gate(both_base, both_cur, replace(options, paired=both_paired))
                designs.append(("same-job+confirm", confirmed(first, again)))
            for design, result in designs:
                frame = _frame_of(result, design=design, check=check, **tags)
                if check == "real":
                    frame["reference"] = [np.nan if reference is None else
                                          reference.get(tuple(cell.key[:-1]) + ("",), np.nan) for cell in result.cells]
                frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _share(frame: pd.DataFrame, *names: str) -> float | None:
    return round(float(frame.verdict.isin(names).mean()), 4) if len(frame) else None


def figures_of(frame: pd.DataFrame, options: GateOptions) -> dict:
    if frame.empty:
        frame = pd.DataFrame(columns=["check", "verdict", "bytes_total", "reference"])
    aa, scaled_frame, real = (frame[frame.check == name] for name in ("aa", "scaled", "real"))
    slowed = real[real.reference >= SCALE]
    calm = real[(real.reference > 1 / 1.05) & (real.reference < 1.05)]
    small = scaled_frame.bytes_total < options.small_below_bytes
    return {
        "aa_cells": len(aa), "aa_regressed": _share(aa, "regressed"), "aa_improved": _share(aa, "improved"),
        "aa_flagged": _share(aa, "regressed", "improved"),
        "scaled_cells": len(scaled_frame), "scaled_regressed": _share(scaled_frame, "regressed"),
        "scaled_regressed_small": _share(scaled_frame[small], "regressed"),
        "scaled_regressed_large": _share(scaled_frame[~small], "regressed"),
        "real_slowed_cells": len(slowed), "real_slowed_regressed": _share(slowed, "regressed"),
        "real_unaffected_cells": len(calm), "real_unaffected_flagged": _share(calm, "regressed", "improved"),
    }


def evaluate(out: Path, pool: int, options: GateOptions, same_job_only: bool = False,
             repeats: int | None = None, tag: str = "", same_job_small: float = SAME_JOB_SMALL_THRESHOLD) -> dict:
    records = json.loads((out / "runs.json").read_text()) if (out / "runs.json").exists() else {}
    quiet = {name: r["others_share"] < QUIET_SHARE and r["steal_share"] < QUIET_SHARE for name, r in records.items()}
    run_level = pd.DataFrame() if same_job_only else compare_all(out, pool, options, quiet)
    same = same_job(out, replace(options, small_threshold=same_job_small), quiet, repeats)
    frame = pd.concat([run_level, same], ignore_index=True)
    suffix = f"-{tag}" if tag else ""
    frame[frame.verdict.isin(["regressed", "improved"]) & frame.check.eq("aa")].to_csv(out / f"aa_flagged{suffix}.csv")
    frame.to_csv(out / f"verdicts{suffix}.csv")
    loads = {r.get("load_procs", 0) for r in records.values()}
    return {
        "runs": len(records), "quiet_runs": sum(quiet.values()), "pool": pool, "slowdown_env": SLOWDOWN_ENV,
        "load_procs": max(loads) if loads else 0,
        "others_share_median": float(np.median([r["others_share"] for r in records.values()])) if records else None,
        "options": {"threshold": options.threshold, "small_threshold": options.small_threshold,
                    "same_job_small_threshold": same_job_small,
                    "small_below_bytes": options.small_below_bytes, "confidence": options.confidence,
                    "min_samples": options.min_samples},
        **{f"{design}_{subset}": figures_of(frame[frame.design.eq(design) & (frame.quiet | (subset == "all"))],
                                            options)
           for design in ALL_DESIGNS for subset in ("all", "quiet")},
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _thresholds(options: dict) -> str:
    small = f"below {options['small_below_bytes'] // 1024} KiB"
    text = f"{options['threshold']:.0%} ({small} {options['small_threshold']:.0%})"
    if "same_job_small_threshold" in options:
        text += f", same-job {small} {options['same_job_small_threshold']:.0%}"
    return text


def report(figures: dict, subsets: tuple[str, ...] = ("all",)) -> str:
    columns = [f"{design}_{subset}" for design in ALL_DESIGNS for subset in subsets]
    rows = [("A/A: flagged (regressed or improved)", "aa_cells", "aa_flagged", "<= 1%"),
            ("A/A: regressed", "aa_cells", "aa_regressed", ""),
            (f"A/B samples x{SCALE}: regressed", "scaled_cells", "scaled_regressed", ">= 95%"),
            ("  below the small-message limit", None, "scaled_regressed_small", ""),
            ("  at or above it", None, "scaled_regressed_large", ""),
            ("A/B real: slowed cells (>= 1.25x) regressed", "real_slowed_cells", "real_slowed_regressed", ">= 90%"),
            ("A/B real: unaffected cells (within 5%) flagged", "real_unaffected_cells", "real_unaffected_flagged",
             "<= 1%"),
            ]
    share = figures.get("others_share_median")
    lines = [f"{figures['runs']} runs, {figures['quiet_runs']} quiet; {figures['pool']} runs per side; co-tenant load "
             f"processes {figures.get('load_procs', 0)}; other processes' median share of the CPUs "
             f"{'-' if share is None else f'{share:.0%}'}; thresholds {_thresholds(figures['options'])}",
             "", "| check | " + " | ".join(c.replace("_", ", ") for c in columns) + " | target |",
             "| --- |" + " ---: |" * len(columns) + " --- |"]
    for title, count, share, target in rows:
        cells = [f"{_pct(figures[c][share])}" + (f" of {figures[c][count]}" if count else "") for c in columns]
        lines.append(f"| {title} | " + " | ".join(cells) + f" | {target} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12, help="rounds of A, A, B runs (default 12)")
    parser.add_argument("--pool", type=int, default=3, help="A runs pooled into each baseline (default 3)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gate-eval")
    parser.add_argument("--analyse-only", action="store_true", help="re-read the runs in --out")
    parser.add_argument("--quiet-wait", type=float, default=0.0,
                        help="seconds to wait at most before each run for other processes to go quiet "
                             "(default 0: runs back to back, close in time)")
    parser.add_argument("--load", action="store_true", help="add co-tenant load from child processes while measuring")
    parser.add_argument("--load-procs", type=int, default=1, help="co-tenant processes with --load (default 1)")
    parser.add_argument("--quiet-columns", action="store_true", help="also report the 'quiet' subsets")
    parser.add_argument("--same-job-only", action="store_true",
                        help="collect (and analyse) only the same-job runs (S: arms a, a2, b), not the A, A, B runs")
    parser.add_argument("--repeats", type=int, default=4,
                        help="launch repeats of the same-job runs, i.e. pairs per arm pair (default 4)")
    parser.add_argument("--use-repeats", type=int, default=None,
                        help="analyse only the first N launch repeats of each same-job run")
    parser.add_argument("--pair-strata", action="store_true",
                        help="same-job designs: keep every launch pair in every resample (GateOptions.pair_strata)")
    parser.add_argument("--no-turn-pairs", action="store_true",
                        help="same-job designs: judge arms timed in turns by their launches' medians, not turn by turn")
    parser.add_argument("--tag", default="",
                        help="write OUT/evaluation-TAG.{json,md}, verdicts-TAG.csv (re-analyses side by side)")
    parser.add_argument("--threshold", type=float, default=GateOptions.threshold)
    parser.add_argument("--small-threshold", type=float, default=GateOptions.small_threshold,
                        help="run-level designs (gate's default)")
    parser.add_argument("--same-job-small-threshold", type=float, default=SAME_JOB_SMALL_THRESHOLD,
                        help="same-job designs (gate --arms' and ab's default)")
    parser.add_argument("--launch-arms", choices=("env", "install"), default=None,
                        help="evaluate ab's loop for arms in launches of their own instead (scripts/"
                             "evaluate_launch_arms.py): environment arms, or install arms against --install")
    parser.add_argument("--install", default=None, help="--launch-arms install: another install of this commit")
    parser.add_argument("--budget", type=float, default=600.0, help="--launch-arms: ab's budget (its default)")
    parser.add_argument("--reference", type=Path, default=None,
                        help="--launch-arms: which real cells are slowed (or unaffected) is read from this "
                             "collection's rounds too (e.g. the quiet one of the same arm kind)")
    parser.add_argument("--labels", type=Path, default=None,
                        help="--launch-arms: which real cells are slowed or unaffected, from an independent "
                             "collection of their own (benchmarks/setting_effect.py --json) instead")
    args = parser.parse_args()
    # a collection killed by SIGTERM still stops its co-tenants (the finally around the load)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.launch_arms:
        import evaluate_launch_arms

        evaluate_launch_arms.main(args, start_load, stop_load)
        return
    if not args.analyse_only:
        collect(args.out, args.rounds, args.quiet_wait, args.load_procs if args.load else 0, args.same_job_only,
                args.repeats)
    options = GateOptions(threshold=args.threshold, small_threshold=args.small_threshold,
                          pair_strata=args.pair_strata, turn_pairs=not args.no_turn_pairs)
    figures = evaluate(args.out, args.pool, options, args.same_job_only, args.use_repeats, args.tag,
                       args.same_job_small_threshold)
    name = f"evaluation-{args.tag}" if args.tag else "evaluation"
    (args.out / f"{name}.json").write_text(json.dumps(figures, indent=2) + "\n")
    subsets = ("all", "quiet") if args.quiet_columns else ("all",)
    (args.out / f"{name}.md").write_text(report(figures, subsets) + "\n")
    print(report(figures, subsets))


if __name__ == "__main__":
    main()
