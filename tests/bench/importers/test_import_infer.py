"""``pccl-bench import`` reads collective, rank count and library from the tools' headers, says
what it inferred (one stderr line per file), takes flags as overrides, and names the flag to pass
when the header does not tell."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import DATA

from bench.cli import main

NCCL = DATA / "nccl-tests"
OSU = DATA / "osu"


def run_import(tmp_path: Path, capsys, tool: str, path: Path, *flags: str) -> tuple[int, str, Path]:
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as done:
        main(["import", tool, str(path), "--out", str(out), *flags])
    return done.value.code, capsys.readouterr().err, out


def neutral_copy(tmp_path: Path, source: Path, drop: str | None = None) -> Path:
    """The file under a name that says nothing (``run.log``), optionally without some lines."""
    lines = source.read_text().splitlines(keepends=True)
    if drop:
        lines = [line for line in lines if not re.search(drop, line)]
    path = tmp_path / "run.log"
    path.write_text("".join(lines))
    return path


def test_nccl_tests_header_gives_collective_ranks_and_library(tmp_path, capsys):
    path = neutral_copy(tmp_path, NCCL / "all_gather_perf.txt")
    code, err, out = run_import(tmp_path, capsys, "nccl-tests", path)
    assert code == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "inferred collective=allgather from '# Collective test starting: all_gather_perf'" in lines[0]
    assert "nranks=8 from 8 '#  Rank N ... device' lines" in lines[0]
    assert "library=NCCL 2.18.3 from" in lines[0] and "nccl-library=21803" in lines[0]
    results = pd.read_parquet(out / "results.parquet")
    assert set(results.collective) == {"allgather"} and set(results.nranks) == {8}
    assert set(results.library) == {"NCCL"} and set(results.library_version) == {"2.18.3"}
    meta = json.loads((out / "meta.json").read_text())
    assert any(item.startswith("nranks=8") for item in meta["imported_from"][0]["inferred"])


def test_flags_override_what_the_header_says(tmp_path, capsys):
    path = neutral_copy(tmp_path, NCCL / "all_gather_perf.txt")
    code, err, out = run_import(tmp_path, capsys, "nccl-tests", path, "--nranks", "8", "--library", "NCCL-fork",
                                "--collective", "allgather")
    assert code == 0, err
    assert "nranks=" not in err and "library=" not in err and "collective=" not in err
    results = pd.read_parquet(out / "results.parquet")
    assert set(results.library) == {"NCCL-fork"}


def test_rank_count_from_sizes_when_rank_lines_are_missing(tmp_path, capsys):
    path = neutral_copy(tmp_path, NCCL / "all_gather_perf.txt", drop=r"#\s*Rank\s+\d")
    code, err, out = run_import(tmp_path, capsys, "nccl-tests", path)
    assert code == 0, err
    assert "nranks=8 from size / (count * type size)" in err
    assert set(pd.read_parquet(out / "results.parquet").nranks) == {8}


@pytest.mark.parametrize("source, drop, flag", [
    (NCCL / "all_gather_perf.txt", r"Collective test starting", "--collective"),
    (OSU / "osu_allgather_full.txt", None, "--nranks"),  # OMB never prints a rank count
    (OSU / "osu_allgather_full.txt", r"# OSU", "--collective"),
])
def test_what_the_header_does_not_tell_names_the_flag(tmp_path, capsys, source, drop, flag):
    tool = "osu" if source.parent == OSU else "nccl-tests"
    code, err, _ = run_import(tmp_path, capsys, tool, neutral_copy(tmp_path, source, drop))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "run.log" in err and flag in err and "Traceback" not in err


def test_a_build_without_mpi_is_refused(tmp_path, capsys):
    """nccl-tests without MPI under mpirun: every process prints its own '# Rank 0' and runs alone."""
    text = (NCCL / "all_gather_perf.txt").read_text()
    text = re.sub(r"#  Rank  (\d) Group  0 Pid  (\d+)", lambda m: f"#  Rank  0 Group  0 Pid  {m.group(2)}", text)
    path = tmp_path / "run.log"
    path.write_text(text)
    code, err, _ = run_import(tmp_path, capsys, "nccl-tests", path)
    assert code == 2 and "without MPI" in err and "Rank  0" in err and len(err.strip().splitlines()) == 1


def test_nccl_tests_json_says_where_its_facts_came_from(tmp_path, capsys):
    code, err, _ = run_import(tmp_path, capsys, "nccl-tests", NCCL / "all_reduce_perf.json")
    assert code == 0, err
    assert "collective=allreduce from 'all_reduce_perf' in args[0]" in err
    assert "nranks=8 from 2 config.devices entries" in err and "library=NCCL 2.21.5 from nccl_version" in err


def test_osu_title_gives_collective_library_and_device(tmp_path, capsys):
    path = neutral_copy(tmp_path, OSU / "osu_xccl_allreduce.txt")
    code, err, out = run_import(tmp_path, capsys, "osu", path, "--nranks", "8")
    assert code == 0, err
    title = "'# OSU NCCL-CUDA Allreduce Latency Test v7.4'"
    for item in ("collective=allreduce", "library=NCCL", "device=cuda"):
        assert f"{item} from {title}" in err, err
    results = pd.read_parquet(out / "results.parquet")
    assert set(results.collective) == {"allreduce"} and set(results.device) == {"cuda"}
    assert set(results.impl) == {"osu-nccl"}
