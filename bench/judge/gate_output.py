"""The gate's verdicts as a Rich table, Markdown, JUnit XML and github-action-benchmark JSON.

Cell labels, notes (error strings of the table, allow-list reasons) and run names are data: each
output makes them safe for where it goes (bench.text): Rich markup escaped, Markdown without raw
HTML, XML without the characters XML 1.0 forbids.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.table import Table

from bench.files import atomic_write
from bench.judge.gate import VERDICTS, CellVerdict, GateResult
from bench.results.stats import min_pairs
from bench.text import console_text, markdown_text, xml_text

COLOURS = {"regressed": "red", "failed": "red", "missing": "red", "insufficient": "yellow", "undecided": "yellow",
           "new": "cyan", "improved": "green", "unchanged": "white"}
MARKS = {"regressed": "❌", "failed": "❌", "missing": "❌", "insufficient": "⚠️", "undecided": "❔", "new": "🆕",
         "improved": "✅", "unchanged": "✔️"}


def verdict_text(cell: CellVerdict) -> str:
    return f"{cell.verdict} (allowed)" if cell.allowed else cell.verdict


def ratio_text(cell: CellVerdict) -> str:
    return f"{cell.estimate.ratio:.3f}" if cell.estimate else ""


def interval_text(cell: CellVerdict) -> str:
    return f"[{cell.estimate.low:.3f}, {cell.estimate.high:.3f}]" if cell.estimate else ""


def times_text(cell: CellVerdict) -> tuple[str, str]:
    if not cell.estimate:
        return "", ""
    return f"{cell.estimate.baseline_us:.2f}", f"{cell.estimate.current_us:.2f}"


def note_text(cell: CellVerdict) -> str:
    return "; ".join(filter(None, [cell.reason, f"allowed: {cell.allowed}" if cell.allowed else ""]))


def headline(result: GateResult) -> str:
    counts = {name: count for name, count in result.counts().items() if count}
    summary = ", ".join(f"{count} {name}" for name, count in counts.items())
    verdict = "PASS" if result.passed else "FAIL"
    judged = f"{result.judged} of {len(result.cells)} cells judged"
    unjudged = result.unjudged_text()
    machine = result.machine_verdict()
    shift = result.shift_verdict()
    return f"{verdict}: {summary} of {len(result.cells)} cells; {judged}" + (f"; not judged: {unjudged}" if unjudged
                                                                               else "") + \
        (f"; {shift} across the board: {result.shift.text(result.probe_ratio)}" if shift else "") + \
        (f"; machine: {machine}" if machine else "")


def settings_text(result: GateResult) -> str:
    o = result.options
    if o.paired and not o.pair_strata:
        kind = (f"{o.confidence:.0%} signed-rank interval of the Hodges-Lehmann ratio over alternating pairs "
                f"(>= {min_pairs(o.confidence)} pairs)")
    else:
        kind = f"{o.confidence:.0%} bootstrap interval of the median ratio" + (" of pairs" if o.paired else "")
    turned = sum(cell.by_turns for cell in result.cells)
    if turned:
        kind += f"; {turned} cells of arms timed in turns judged turn by turn"
    return (f"threshold {o.threshold:.0%} (below {o.small_below_bytes // 1024} KiB: {o.small_threshold:.0%}), "
            f"{kind}, >= {o.min_samples} samples per side")


def _shown(result: GateResult, show_all: bool) -> list[CellVerdict]:
    if show_all:
        return result.cells
    return [cell for cell in result.cells if cell.verdict != "unchanged" or cell.allowed]


def rich_table(result: GateResult, show_all: bool = False) -> Table:
    """Cells that are not unchanged (all with ``show_all``), worst first."""
    shown = sorted(_shown(result, show_all), key=lambda cell: VERDICTS.index(cell.verdict))
    table = Table(title=f"gate: {console_text(headline(result))}", title_justify="left",
                  caption=console_text(settings_text(result)), caption_justify="left")
    for name in ("cell", "baseline us", "current us", "ratio", "interval", "verdict", "note"):
        table.add_column(name, justify="left" if name in ("cell", "verdict", "note") else "right")
    for cell in shown:
        colour = "yellow" if cell.allowed else COLOURS[cell.verdict]
        table.add_row(console_text(cell.label), *times_text(cell), ratio_text(cell), console_text(interval_text(cell)),
                      f"[{colour}]{console_text(verdict_text(cell))}[/{colour}]", console_text(note_text(cell)))
    return table


def _markdown_rows(cells: list[CellVerdict]) -> list[str]:
    lines = ["| cell | baseline µs | current µs | ratio | interval | verdict | note |",
             "| --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for cell in cells:
        lines.append(f"| {markdown_text(cell.label)} | {' | '.join(times_text(cell))} | {ratio_text(cell)} "
                     f"| {interval_text(cell)} | {MARKS[cell.verdict]} {markdown_text(verdict_text(cell))} "
                     f"| {markdown_text(note_text(cell))} |")
    return lines


def markdown(result: GateResult) -> str:
    """A pull-request comment / CI step summary."""
    counts = result.counts()
    lines = [f"### pccl-bench gate: {headline(result)}", "",
             f"Baseline: {markdown_text(', '.join(result.baseline_runs)) or '-'}  ",
             f"Current: {markdown_text(', '.join(result.current_runs))}  ",
             f"Rule: {settings_text(result)}.", ""]
    if warning := result.common_shift():
        lines += [f"> **Warning:** {warning}.", ""]
    if result.shift is not None:
        lines += [f"Across the board: {markdown_text(result.shift.text(result.probe_ratio))}.", ""]
    lines += ["| verdict | cells |", "| --- | ---: |"]
    lines += [f"| {MARKS[name]} {name} | {count} |" for name, count in counts.items() if count]
    flagged = sorted(_shown(result, False), key=lambda cell: VERDICTS.index(cell.verdict))
    if flagged:
        lines += ["", "#### Cells that are not unchanged", "", *_markdown_rows(flagged)]
    lines += ["", f"<details><summary>All {len(result.cells)} cells</summary>", "",
              *_markdown_rows(result.cells), "", "</details>", ""]
    return "\n".join(lines)


def junit(result: GateResult) -> str:
    """One test case per cell: failures for failing verdicts, skipped for allowed or unjudged ones."""
    unjudged = ("insufficient", "undecided")
    shift_fails = result.shift_verdict() == "regressed"
    failures = sum(cell.fails for cell in result.cells) + shift_fails
    skipped = sum(1 for cell in result.cells if not cell.fails and (cell.allowed or cell.verdict in unjudged))
    suite = ET.Element("testsuite", name="pccl-bench gate", tests=str(len(result.cells) + (result.shift is not None)),
                       failures=str(failures), errors="0", skipped=str(skipped))
    if result.shift is not None:
        case = ET.SubElement(suite, "testcase", classname="gate", name="across the board", time="0")
        text = xml_text(result.shift.text(result.probe_ratio))
        if shift_fails:
            ET.SubElement(case, "failure", message=text, type="regressed").text = xml_text(settings_text(result))
        else:
            ET.SubElement(case, "system-out").text = text
    for cell in result.cells:
        # ElementTree escapes, but writes characters XML 1.0 forbids as they are: drop those first
        case = ET.SubElement(suite, "testcase", classname=xml_text(f"gate.{cell.row['collective']}.{cell.row['impl']}"),
                             name=xml_text(cell.label), time="0")
        message = xml_text(f"{verdict_text(cell)} {ratio_text(cell)} {interval_text(cell)} {note_text(cell)}".strip())
        if cell.fails:
            ET.SubElement(case, "failure", message=message, type=cell.verdict).text = xml_text(settings_text(result))
        elif cell.allowed or cell.verdict in unjudged:
            ET.SubElement(case, "skipped", message=message)
        else:
            ET.SubElement(case, "system-out").text = message
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def benchmark_json(result: GateResult) -> str:
    """github-action-benchmark ``customSmallerIsBetter``: the current median per judged cell."""
    entries = []
    for cell in result.cells:
        if not cell.estimate:
            continue
        e = cell.estimate
        entries.append({
            "name": cell.label, "unit": "us", "value": round(e.current_us, 4),
            "range": f"±{e.current_us * (e.high - e.low) / 2:.4f}",
            "extra": f"baseline {e.baseline_us:.4f} us; ratio {e.ratio:.3f} [{e.low:.3f}, {e.high:.3f}]; "
                     f"{verdict_text(cell)}; {e.n_current} samples in {e.launches_current} launches",
        })
    return json.dumps(entries, indent=2, ensure_ascii=False) + "\n"


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)  # output_file checked that it can be created
    atomic_write(path, lambda temp: temp.write_text(text, encoding="utf-8"))
