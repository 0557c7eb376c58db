"""nccl-tests tables pasted without their headers: the collective from the row shape (with the file
name's hint where two collectives fit), the rank count from busbw/algbw."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.cli import main

HEADER = ("#  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw "
          "#wrong\n")
#: (size, count, algbw, busbw) of an 8-rank all-reduce (busbw = algbw * 2 * 7/8)
ROWS = [(1048576, 262144, 26.14, 45.74), (2097152, 524288, 37.91, 66.34), (134217728, 33554432, 88.28, 154.49)]


def table(redop: str, root: int, ratio: int, factor: float) -> str:
    lines = [f"{size:12d} {count // ratio:13d}     float {redop:>7} {root:7d} 40.00 {algbw:7.2f} {algbw * factor:7.2f}"
             f"      0  40.00 {algbw:7.2f} {algbw * factor:7.2f}      0\n" for size, count, algbw, _ in ROWS]
    return HEADER + "".join(lines)


def run_import(tmp_path, capsys, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SystemExit) as done:
        main(["import", "nccl-tests", str(path), "--out", str(tmp_path / "out")])
    return done.value.code, capsys.readouterr().err, tmp_path / "out"


def test_allreduce_from_shape_and_ranks_from_bandwidth(tmp_path, capsys):
    code, err, out = run_import(tmp_path, capsys, "run.log", table("sum", -1, 1, 2 * 7 / 8))
    assert code == 0, err
    assert "collective=allreduce from the row shape: size/count/sizeof(float) = 1 with redop sum" in err
    assert "nranks=8 from busbw/algbw = 2(n-1)/n" in err
    results = pd.read_parquet(out / "results.parquet")
    assert set(results.collective) == {"allreduce"} and set(results.nranks) == {8}


def test_allgather_or_alltoall_takes_the_file_name(tmp_path, capsys):
    code, err, out = run_import(tmp_path, capsys, "h100_all_gather.txt", table("none", -1, 8, 7 / 8))
    assert code == 0, err
    assert "collective=allgather from the file name" in err and "fits allgather or alltoall" in err
    assert set(pd.read_parquet(out / "results.parquet").nranks) == {8}


def test_allgather_or_alltoall_without_a_hint_names_both(tmp_path, capsys):
    code, err, _ = run_import(tmp_path, capsys, "run.log", table("none", -1, 8, 7 / 8))
    assert code == 2 and "fits allgather or alltoall" in err and len(err.strip().splitlines()) == 1


def test_name_and_table_disagree(tmp_path, capsys):
    code, err, _ = run_import(tmp_path, capsys, "allreduce.txt", table("sum", -1, 8, 7 / 8))
    assert code == 2 and "says allreduce but the rows are reduce_scatter" in err
