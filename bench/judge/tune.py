"""``pccl-bench tune``: derive an ``auto`` tuning table from measured sweeps."""

from __future__ import annotations

import pandas as pd

from bench.errors import BadInput

#: implementations whose schedule ``auto`` chooses, and the column that names the choice
TUNABLE = ("pccl-flat", "pccl-hier")
#: placements kept apart: in place a schedule moves other bytes, and `auto` looks up its own placement
GROUP = ["collective", "impl", "placement", "nranks", "nnodes", "bytes_total"]


def _choice(row) -> str:
    return f"{row.inter}/{row.intra}" if row.impl == "pccl-hier" else row.algorithm


def derive(results: pd.DataFrame) -> list[dict]:
    """The fastest median per (collective, impl, placement, ranks, nodes, size), with its margin over the runner-up."""
    frame = results[(results["status"] == "ok") & results["impl"].isin(TUNABLE)]
    if "mode" in frame:  # ``auto`` picks for blocking calls: a non-blocking cell's time is another measurement
        frame = frame[frame["mode"].fillna("blocking").eq("blocking")]
    frame = frame[~frame["algorithm"].eq("auto") & ~frame["intra"].eq("auto") & ~frame["inter"].eq("auto")]
    if "buffers" in frame:  # warm cells only: a choice's medians of moving buffers are other cells
        frame = frame[frame["buffers"].fillna("warm").eq("warm")]
    if frame.empty:
        raise BadInput("tune", "no ok pccl-flat or pccl-hier cells to tune from")
    frame = frame.assign(choice=[_choice(row) for row in frame.itertuples()],
                         placement=(frame["placement"] if "placement" in frame else pd.Series("out_of_place",
                                    index=frame.index)).fillna("out_of_place"))
    # Several runs of one choice: the median of its medians, so that one lucky run on a
    # noisy machine does not pick it (the best of them did: benchmarks/data/lab/earlier-takes.md, the in-place re-take).
    best = frame.groupby([*GROUP, "choice"], as_index=False)["time_us_p50"].median()
    entries = []
    for key, group in best.groupby(GROUP, sort=True):
        ranked = group.sort_values("time_us_p50")
        winner = ranked.iloc[0]
        runner_up = ranked.iloc[1] if len(ranked) > 1 else None
        entries.append({
            **{name: (int(value) if name not in ("collective", "impl", "placement") else value)
               for name, value in zip(GROUP, key, strict=True)},
            "choice": winner["choice"], "time_us_p50": float(winner["time_us_p50"]),
            "runner_up": None if runner_up is None else runner_up["choice"],
            "margin": None if runner_up is None else float(runner_up["time_us_p50"] / winner["time_us_p50"]),
        })
    return entries
