"""``pccl-bench import``: nccl-tests / rccl-tests / OSU outputs (tests/data) as pccl-bench tables."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import DATA, describe, run_cli

from bench.cli import main
from bench.errors import BadInput
from bench.importers import tools
from bench.importers.import_run import import_files, write_import
from bench.importers.imported_row import ImportOptions
from bench.plan.hosts import hosts_digest
from bench.results.runset import load_runs
from bench.results.table import COLUMNS, SAMPLE_COLUMNS

NCCL = DATA / "nccl-tests"
OSU = DATA / "osu"


def parsed(kind: str, name: str, **options) -> pd.DataFrame:
    folder = NCCL if kind != "osu" else OSU
    results, _, _ = import_files(kind, [folder / name], ImportOptions(**options))
    return results


def file_columns(name: str) -> pd.DataFrame:
    """size, count, out-of-place time/busbw as printed, for cross-checks."""
    rows = [line.split() for line in (NCCL / name).read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#") and line.split()[0].isdigit()]
    return pd.DataFrame({"size": [int(r[0]) for r in rows], "count": [int(r[1]) for r in rows],
                         "time": [float(r[-8]) for r in rows], "busbw": [float(r[-6]) for r in rows]})


@pytest.mark.parametrize("name, collective, nranks", [("all_gather_perf.txt", "allgather", 8),
                                                      ("reduce_scatter_perf.txt", "reduce_scatter", 8),
                                                      ("all_reduce_perf.txt", "allreduce", 4)])
def test_nccl_tests_sizes_and_bandwidths(name, collective, nranks):
    results = parsed("nccl-tests", name)
    printed = file_columns(name)
    out = results[results.placement.eq("out_of_place")].reset_index(drop=True)
    assert list(results.columns) == COLUMNS
    assert set(results.collective) == {collective} and set(results.nranks) == {nranks}
    assert set(results.impl) == {"xccl"} and set(results.status) == {"ok"}
    assert set(results.library) == {"NCCL"} and set(results.library_version) == {"2.18.3"}
    # nccl-tests' size is the total buffer, its count is per rank
    assert list(out.bytes_total) == list(printed["size"])
    assert list(out.count_per_rank) == list(printed["count"])
    assert list(out.time_us_p50) == list(printed["time"])
    # the same formula, from the time as printed (two decimals) instead of the exact one
    assert ((out.busbw_gbps - printed["busbw"]).abs() <= 0.006 + 0.002 * printed["busbw"]).all()
    assert len(results) == 2 * len(printed)  # out-of-place and in-place
    assert set(results.iters) == {20} and set(results.warmup) == {5}


def test_nccl_tests_hosts_nodes_and_device():
    results = parsed("nccl-tests", "all_gather_perf.txt")
    assert set(results.nnodes) == {2} and set(results.ranks_per_node) == {4}
    assert set(results.hosts) == {"nid001,nid002"} and set(results.device) == {"cuda"}


def test_an_import_with_hosts_has_measured_and_planned_digests_alike(tmp_path, capsys):
    """An import has no plan: hosts_digest and planned_hosts_digest both hold the digest of the hosts
    the file names (docs/TABLE.md), in results.parquet and results.csv (hosts_digest was all empty)."""
    out = tmp_path / "nccl"
    with pytest.raises(SystemExit) as done:
        main(["import", "nccl-tests", str(NCCL / "all_gather_perf.txt"), "--out", str(out)])
    assert done.value.code == 0
    expected = hosts_digest(["nid001", "nid002"])
    for table in (pd.read_parquet(out / "results.parquet"), pd.read_csv(out / "results.csv")):
        assert set(table.hosts_digest) == {expected}
        assert table.hosts_digest.tolist() == table.planned_hosts_digest.tolist()


def test_old_layout_without_root_column_and_half():
    results = parsed("nccl-tests", "old_all_reduce_perf.out")
    assert set(results.dtype) == {"float16"} and set(results.nranks) == {2}
    assert results.bytes_total.iloc[0] == 64 and results.count_per_rank.iloc[0] == 32


def test_rccl_version_and_device():
    results = parsed("rccl-tests", "rccl_all_gather_perf.txt")
    assert set(results.library) == {"RCCL"} and set(results.library_version) == {"2.18.3"}
    assert set(results.device) == {"rocm"} and set(results.nranks) == {8}


def test_wrong_data_is_status_wrong():
    results = parsed("nccl-tests", "all_gather_wrong.txt")
    wrong = results[results.status.eq("wrong")]
    assert len(wrong) == 1 and wrong.bytes_total.iloc[0] == 65536 and wrong.n_wrong.iloc[0] == 1


def test_nccl_tests_json(tmp_path):
    """The -J layout of nccl-tests src/util.cu: config.devices, nccl_version code, results[]."""
    results = parsed("nccl-tests", "all_reduce_perf.json")
    assert len(results) == 6 and set(results.collective) == {"allreduce"}
    # one devices entry per MPI process, each driving nthreads*ngpus = 4 ranks
    assert set(results.nranks) == {8} and set(results.nnodes) == {2} and set(results.hosts) == {"gpu-a07,gpu-a08"}
    assert set(results.library_version) == {"2.21.5"}  # "nccl_version": 22105
    assert set(results.iters) == {20} and set(results.warmup) == {5}  # config.iterations / warmup_iters
    assert sorted(set(results.bytes_total)) == [8, 65536, 16777216]  # size is the whole buffer
    assert sorted(set(results.count_per_rank)) == [2, 16384, 4194304]
    out = results[results.placement.eq("out_of_place")].sort_values("bytes_total")
    assert list(out.time_us_mean) == [16.41, 21.87, 160.3] and list(out.time_us_p50) == [16.41, 21.87, 160.3]
    assert set(results.tool_version) == {"nccl-tests (JSON v1)"}
    # the collective comes from args[0], not from the file name
    renamed = tmp_path / "run.json"
    renamed.write_text((NCCL / "all_reduce_perf.json").read_text())
    assert set(import_files("nccl-tests", [renamed], ImportOptions())[0].collective) == {"allreduce"}


def test_nccl_tests_json_per_iteration():
    """-I 1 adds <placement>_per_iter objects: a real median, tails and min/max over iterations."""
    results = parsed("nccl-tests", "all_gather_perf_iter.json")
    assert set(results.collective) == {"allgather"} and set(results.op) == {"none"}  # as printed (issue 47: was "sum")
    assert set(results.nranks) == {4} and set(results.nnodes) == {1}  # one process, -g 4
    first = results[(results.bytes_total == 4096) & results.placement.eq("out_of_place")].iloc[0]
    assert first.count_per_rank == 256  # all-gather count is per rank: 4096 B / 4 B / 4 ranks
    assert first.time_us_mean == 12.10 and first.time_us_p50 == 12.0  # time vs median of times_us (= p50_us)
    assert (first.time_us_min, first.time_us_max) == (11.8, 12.6)
    # p99 is pccl-bench's (interpolated) percentile of the 5 samples, not the tool's nearest-rank 12.6
    assert first.time_us_p99 == pytest.approx(12.584)
    assert set(results.library_version) == {"2.28.3"} and set(results.iters) == {5}


ITER_A, ITER_B = NCCL / "all_reduce_perf_iter_a.json", NCCL / "all_reduce_perf_iter_b.json"


def test_nccl_tests_json_times_us_become_samples():
    """-I 1 -J: times_us (one per iteration, max over ranks) is the cell's samples table."""
    results, meta, samples = import_files("nccl-tests", [ITER_A], ImportOptions())
    doc = json.loads(ITER_A.read_text())
    assert list(samples.columns) == SAMPLE_COLUMNS and len(results) == 4 and len(samples) == 4 * 25
    assert set(samples.cell_key) == set(results.cell_key) and set(samples.launch_id) == {ITER_A.name}
    assert set(results.nranks) == {2} and set(results.nnodes) == {2} and set(results.iters) == {25}
    for row in results.itertuples():
        mine = samples[samples.cell_key.eq(row.cell_key)].sort_values("iteration")
        record = next(r for r in doc["results"] if r["size"] == row.bytes_total)
        tool = record[f"{row.placement}_per_iter"]
        assert list(mine.iteration) == list(range(25)) and list(mine.time_us) == tool["times_us"]
        for name in ("run_id", "collective", "impl", "nranks", "dtype", "op", "placement", "count_per_rank"):
            assert set(mine[name]) == {getattr(row, name)}
        # the row's order statistics are those of its samples, as for a measured row
        assert row.time_us_p50 == np.median(tool["times_us"]) == tool["p50_us"]  # n = 25: the same median
        assert row.time_us_min == tool["min_us"] and row.time_us_max == tool["max_us"]
        assert row.time_us_p95 == pytest.approx(np.percentile(tool["times_us"], 95))
        assert row.time_us_mean == record[row.placement]["time"]  # the tool's host-timer mean, as printed
    assert meta["imported_from"][0]["cells_with_samples"] == 4 and "for every cell" in meta["note"]


def test_text_and_json_without_samples_in_one_import():
    results, meta, samples = import_files("nccl-tests", [ITER_A, NCCL / "all_reduce_perf.txt"], ImportOptions())
    assert set(samples.cell_key) == set(results[results.launch_id.eq(ITER_A.name)].cell_key)
    assert [f["cells_with_samples"] for f in meta["imported_from"]] == [4, 0]
    assert f"for 4 of {len(results)} cells" in meta["note"] and "the other cells: no per-iteration" in meta["note"]


def test_per_iter_skip_leaves_the_first_iterations_out(tmp_path):
    """-K 2 (JSON version 3): times_us keeps every iteration, the summary skips the first two."""
    doc = json.loads(ITER_A.read_text())
    doc["config"]["per_iter_skip"] = 2
    for record in doc["results"]:
        for placement in ("out_of_place", "in_place"):
            stats = record[f"{placement}_per_iter"]
            kept = sorted(stats["times_us"][2:])
            stats.update(skipped_iterations=2, min_us=kept[0], max_us=kept[-1], p50_us=kept[len(kept) // 2],
                         p95_us=kept[21], p99_us=kept[22])  # min(n-1, ceil(n*p/100)-1), n = 23
    path = tmp_path / "all_reduce_perf.json"
    path.write_text(json.dumps(doc))
    results, _, samples = import_files("nccl-tests", [path], ImportOptions())
    first = doc["results"][0]["out_of_place_per_iter"]["times_us"]
    mine = samples[samples.cell_key.eq(results.cell_key.iloc[0])]
    assert len(samples) == 4 * 23 and set(results.iters) == {23}
    assert list(mine.time_us) == first[2:] and list(mine.iteration) == list(range(23))


def test_repeated_cells_get_their_own_repeat_and_samples(tmp_path):
    """The same cell twice (-N 2 cycles, or two files): repeat 0 and 1, one cell_key each."""
    doc = json.loads(ITER_A.read_text())
    doc["results"] = doc["results"] * 2
    path = tmp_path / "all_reduce_perf.json"
    path.write_text(json.dumps(doc))
    results, _, samples = import_files("nccl-tests", [path, ITER_B], ImportOptions())
    assert len(results) == 12 and results.cell_key.is_unique and sorted(set(results.repeat)) == [0, 1, 2]
    assert samples.groupby("cell_key").size().eq(25).all() and len(samples) == 12 * 25


def _import(tmp_path: Path, name: str, *files: Path) -> Path:
    out = tmp_path / name
    done = run_cli("import", "nccl-tests", *files, "--out", out, timeout=60)
    assert done.returncode == 0, describe(done)
    return out


def _verdicts(junit: Path) -> dict[str, str]:
    """cell label -> verdict, from the gate's JUnit report."""
    cases = ET.parse(junit).getroot().iter("testcase")
    return {case.get("name"): (case[0].get("message") or case[0].text or "").split()[0] for case in cases}


def test_gate_judges_imported_nccl_tests_runs(tmp_path):
    """Two imported -I 1 JSON runs (25 iterations per cell), the second 1.5x slower at 1 MiB."""
    base, same = _import(tmp_path, "base", ITER_A), _import(tmp_path, "same", ITER_A)
    slow = _import(tmp_path, "slow", ITER_B)
    assert "4 with per-iteration samples" in run_cli("import", "nccl-tests", ITER_B, "--out", tmp_path / "x").stdout

    done = run_cli("gate", base, same, "--junit", tmp_path / "same.xml", timeout=60)
    assert done.returncode == 0, describe(done)
    assert set(_verdicts(tmp_path / "same.xml").values()) == {"unchanged"}

    done = run_cli("gate", base, slow, "--junit", tmp_path / "slow.xml", timeout=60)
    assert done.returncode == 1, describe(done)
    verdicts = _verdicts(tmp_path / "slow.xml")
    # nccl-tests' buffers rotate (its default offset walk): the cells say so
    assert verdicts == {"allreduce xccl 2 ranks / 2 nodes 1 KiB float32 sum rotate buffers": "unchanged",
                        "allreduce xccl 2 ranks / 2 nodes 1 KiB float32 sum in-place rotate buffers": "unchanged",
                        "allreduce xccl 2 ranks / 2 nodes 1 MiB float32 sum rotate buffers": "regressed",
                        "allreduce xccl 2 ranks / 2 nodes 1 MiB float32 sum in-place rotate buffers": "regressed"}, \
        verdicts

    # without -I (or from the text table) there are no samples: insufficient, not judged, exit 1
    # (an unjudged cell is not a pass) unless --allow-insufficient
    text = tmp_path / "all_reduce_perf.json"
    doc = json.loads(ITER_B.read_text())
    for record in doc["results"]:
        del record["out_of_place_per_iter"], record["in_place_per_iter"]
    text.write_text(json.dumps(doc))
    plain = _import(tmp_path, "plain", text)
    done = run_cli("gate", base, plain, "--junit", tmp_path / "plain.xml", timeout=60)
    assert done.returncode == 1 and "0 of 4 cells judged" in done.stdout, describe(done)
    done = run_cli("gate", base, plain, "--allow-insufficient", "--junit", tmp_path / "plain.xml", timeout=60)
    assert done.returncode == 0, describe(done)
    assert set(_verdicts(tmp_path / "plain.xml").values()) == {"insufficient"}


def _bad_times(doc, value):
    doc["results"][1]["out_of_place_per_iter"]["times_us"][3] = value


@pytest.mark.parametrize("edit, message", [
    (lambda doc: doc["results"][1]["out_of_place_per_iter"]["times_us"].pop(),
     "results[1]: out_of_place_per_iter: times_us: 24 values, but config.iterations is 25"),
    (lambda doc: doc["results"][0]["in_place_per_iter"]["times_us"].append(9.9),
     "results[0]: in_place_per_iter: times_us: 26 values, but config.iterations is 25"),
    (lambda doc: _bad_times(doc, "fast"), "results[1]: out_of_place_per_iter: times_us[3]: not a time in "
                                          "microseconds: 'fast'"),
    (lambda doc: _bad_times(doc, None), "times_us[3]: not a time in microseconds: None"),
    (lambda doc: _bad_times(doc, True), "times_us[3]: not a time in microseconds: True"),
    (lambda doc: _bad_times(doc, "nan"), "times_us[3]: not a time in microseconds: 'nan'"),
    (lambda doc: _bad_times(doc, -1.5), "times_us[3]: not a time in microseconds: -1.5"),
    (lambda doc: doc["results"][0]["out_of_place_per_iter"].update(times_us="9.8 9.9"),
     "results[0]: out_of_place_per_iter: times_us: not a list of times: '9.8 9.9'"),
    (lambda doc: doc["results"][0]["out_of_place_per_iter"].update(p50_us=5.0),
     "results[0]: out_of_place_per_iter: p50_us: 5.0 does not summarise times_us"),
])
def test_bad_per_iteration_times_are_one_line(tmp_path, capsys, edit, message):
    doc = json.loads(ITER_A.read_text())
    edit(doc)
    path = tmp_path / "all_reduce_perf.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SystemExit) as done:
        main(["import", "nccl-tests", str(path), "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{path}: {message}" in err if message.startswith("results") else message in err and str(path) in err
    assert not (tmp_path / "x").exists() or not (tmp_path / "x" / "results.parquet").exists()


def _nccl_json(tmp_path: Path, edit) -> Path:
    doc = json.loads((NCCL / "all_reduce_perf.json").read_text())
    edit(doc)
    path = tmp_path / "all_reduce_perf.json"
    path.write_text(json.dumps(doc))
    return path


def test_nccl_tests_json_wrong_cputime_and_missing_placements(tmp_path):
    def edit(doc):
        first, second, third = doc["results"]
        first["out_of_place"]["nwrong"] = 3.0          # jsonDouble of the #wrong count
        second["out_of_place"] = None                   # writeBenchMarkLineNullBody
        third["in_place"]["nwrong"] = None              # -c 0: errors not checked
        third["in_place"]["cpu_time"] = third["in_place"].pop("time")  # -C 1
    results, _, _ = import_files("nccl-tests", [_nccl_json(tmp_path, edit)], ImportOptions())
    assert len(results) == 5 and list(results.status).count("wrong") == 1
    wrong = results[results.status.eq("wrong")].iloc[0]
    assert wrong.bytes_total == 8 and wrong.placement == "out_of_place" and wrong.n_wrong == 3
    assert results[(results.bytes_total == 16777216) & results.placement.eq("in_place")].time_us_mean.item() == 158.9


@pytest.mark.parametrize("edit, message", [
    (lambda doc: doc.pop("results"), "no top-level 'results' list"),
    (lambda doc: doc["results"][1].pop("count"), "results[1]: no 'count' field"),
    (lambda doc: doc["results"][0].update(type="complex"), "results[0]: type: unknown nccl-tests type 'complex'"),
])
def test_nccl_tests_json_bad_layout_is_one_line(tmp_path, capsys, edit, message):
    path = _nccl_json(tmp_path, edit)
    with pytest.raises(SystemExit) as done:
        main(["import", "nccl-tests", str(path), "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert done.value.code == 2 and message in err and str(path) in err and len(err.strip().splitlines()) == 1


def test_nccl_tests_text_per_iteration_and_timestamps():
    """-I 1 puts i_min i_max i_p99 i_cv% after each #wrong; -S 1 appends a date and a time."""
    results = parsed("nccl-tests", "all_reduce_perf_iter.txt")
    assert len(results) == 6 and set(results.nranks) == {2} and set(results.iters) == {50}
    inp = results[results.placement.eq("in_place")].sort_values("bytes_total").iloc[0]
    assert (inp.time_us_mean, inp.time_us_min, inp.time_us_max) == (9.90, 9.66, 10.88)
    assert inp.count_per_rank == 256 and inp.bytes_total == 1024 and set(results.status) == {"ok"}


def _printf(fmt: str, *args: object) -> str:
    """A line as util.cu's printf formats lay it out."""
    return fmt % args  # noqa: UP031  (the C formats, kept verbatim)


def _table(tmp_path: Path, header: str, *lines: str) -> Path:
    path = tmp_path / "all_gather_perf.txt"
    path.write_text("\n".join(["#  Rank  0 Group  0 Pid   1001 on     node01 device  0 [0000:07:00] GPU",
                                "#  Rank  1 Group  0 Pid   1002 on     node01 device  1 [0000:0b:00] GPU",
                                "#", header, *lines]) + "\n")
    return path


def test_nccl_tests_text_column_variants(tmp_path):
    # util.cu writeResultHeader with -c bitwise repeats: a #bitdiff column after each #wrong
    bitwise = _table(tmp_path, _printf(
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %8s  %7s  %6s  %6s  %6s  %8s",
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "#bitdiff",
        "time", "algbw", "busbw", "#wrong", "#bitdiff"),
        "        8192          1024     float    none      -1    11.02    0.74    0.37       0         0"
        "    11.40    0.72    0.36       2         0")
    results, _, _ = import_files("nccl-tests", [bitwise], ImportOptions())
    assert list(results.time_us_mean) == [11.02, 11.40] and list(results.n_wrong) == [0, 2]
    # writeBenchMarkLineNullBody: 32 blanks instead of the out-of-place block -> in-place only
    null_body = _table(tmp_path, _printf(
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s",
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
        "time", "algbw", "busbw", "#wrong"),
        _printf("%12li  %12li  %8s  %6s  %6s", 8192, 1024, "float", "none", "-1") + " " * 32
        + _printf("  %7s  %6s  %6s  %6g", "11.40", "0.72", "0.36", 0))
    results, _, _ = import_files("nccl-tests", [null_body], ImportOptions())
    assert list(results.placement) == ["in_place"] and list(results.time_us_mean) == [11.40]
    # the same block right after the root (rccl-tests -O): which placement is not in the output
    one_block = _table(tmp_path, "#       size         count      type   redop    root     time   algbw   busbw #wrong"
                       "     time   algbw   busbw #wrong",
                       "        8192          1024     float    none      -1    11.40    0.72    0.36      0")
    with pytest.raises(BadInput, match=r"all_gather_perf.txt:5: only one of out-of-place/in-place"):
        import_files("nccl-tests", [one_block], ImportOptions())
    # very old all_gather: "size count type time algbw busbw error" (no redop, no root)
    old = _table(tmp_path, "#       size         count   type     time   algbw   busbw  error     time   algbw   busbw"
                 "  error",
                 "        8192          1024  float    11.02    0.74    0.37  0e+00    11.40    0.72    0.36  0e+00")
    results, _, _ = import_files("nccl-tests", [old], ImportOptions())
    assert list(results.time_us_mean) == [11.02, 11.40] and set(results.count_per_rank) == {1024}
    assert set(results.bytes_total) == {8192} and set(results.nranks) == {2}


def test_rccl_tests_report_json():
    """rccl-tests -X file -Z json: flat records, size in bytes as in the table, no count."""
    results = parsed("rccl-tests", "rccl_all_reduce_report.json")
    assert set(results.nranks) == {16}  # "ranks" (processes) * "gpusPerRank"
    assert set(results.library) == {"RCCL"} and set(results.device) == {"rocm"}
    assert sorted(results.placement.unique()) == ["in_place", "out_of_place"]
    first = results.sort_values(["bytes_total", "placement"]).iloc[0]
    assert first.bytes_total == 1024 and first.count_per_rank == 256 and first.time_us_mean == 22.87


def test_osu_allgather_size_is_per_rank():
    results = parsed("osu", "osu_allgather_full.txt", nranks=4)
    first = results.iloc[0]
    assert first["collective"] == "allgather" and first["dtype"] == "char" and first["bytes_per_rank"] == 1
    assert first.bytes_total == 4  # nccl-tests size = OSU size * n
    assert first.time_us_p50 == 1.92 and first.time_us_min == 1.71 and first.time_us_max == 2.13
    assert first.iters == 1000 and first.impl == "osu-mpi"


def test_osu_allreduce_and_reduce_scatter_sizes_are_the_whole_vector():
    allreduce = parsed("osu", "osu_allreduce.txt", nranks=4, library="MPICH", library_version="4.2.1")
    assert allreduce.bytes_total.iloc[0] == 4 and allreduce.count_per_rank.iloc[0] == 1
    assert set(allreduce.impl) == {"osu-mpich"} and set(allreduce.library_version) == {"4.2.1"}
    scatter = parsed("osu", "osu_reduce_scatter.txt", nranks=4)
    assert scatter.bytes_total.iloc[0] == 16  # 4 and 8 B cannot be split over 4 ranks: skipped
    assert scatter.count_per_rank.iloc[0] == 1 and len(scatter) == 17


@pytest.mark.parametrize("library, impl", [("Cray MPICH", "osu-cray-mpich"), ("Open MPI", "osu-open-mpi"),
                                           ("Intel(R) MPI", "osu-intel-r-mpi"), ("MVAPICH2-GDR", "osu-mvapich2-gdr"),
                                           ("MPICH", "osu-mpich")])
def test_osu_label_is_the_whole_library_name(library, impl):
    """osu-<library> of the whole name (it was the first word: Cray MPICH gave osu-cray, Open MPI osu-open)."""
    assert set(parsed("osu", "osu_allreduce.txt", nranks=4, library=library).impl) == {impl}


def test_osu_xccl_validation():
    results = parsed("osu", "osu_xccl_allreduce.txt", nranks=8)
    assert set(results.library) == {"NCCL"} and set(results.device) == {"cuda"}
    assert list(results.status) == ["ok", "ok", "ok", "wrong"]


def test_osu_reduce_scatter_size_is_the_send_vector():
    """OMB: MPI_Reduce_scatter of Size bytes per rank, recvcounts = Size / type size / nranks each."""
    results = parsed("osu", "osu_reduce_scatter.txt", nranks=2)  # OMB 5: MPI_FLOAT, no Datatype line
    first = results.iloc[0]
    assert first["dtype"] == "float32" and first.bytes_total == 8 and first.count_per_rank == 1
    assert first.bytes_per_rank == 4  # what each rank receives
    assert (results.bytes_total == results.count_per_rank * 4 * 2).all()


def test_osu_datatype_per_table_and_tail_latency():
    """OMB 7 -T char,float: one '# Datatype:' line per table; P50/P95/P99 tail columns."""
    results = parsed("osu", "osu_reduce_scatter_omb7.txt", nranks=4)
    chars, floats = results[results.dtype.eq("char")], results[results.dtype.eq("float32")]
    assert chars.bytes_total.min() == 4 and chars.count_per_rank.min() == 1  # 1 and 2 B: fewer elements than ranks
    assert floats.bytes_total.min() == 16 and floats.count_per_rank.min() == 1  # 16 B = 4 floats = 1 per rank
    assert len(chars) == 11 and len(floats) == 9
    first = chars.iloc[0]
    assert first.time_us_mean == 3.10 and first.time_us_p50 == 3.04
    assert (first.time_us_p95, first.time_us_p99, first.time_us_min, first.time_us_max) == (3.26, 3.48, 2.89, 3.35)


def test_osu_reduce_scatter_uneven_split_is_skipped(tmp_path, capsys):
    results = parsed("osu", "osu_reduce_scatter_omb7.txt", nranks=8)
    assert (results.bytes_total % (8 * results.dtype.map({"char": 1, "float32": 4})) == 0).all()
    with pytest.raises(SystemExit) as done:  # 3 ranks: no power-of-two size splits evenly
        main(["import", "osu", str(OSU / "osu_reduce_scatter.txt"), "--nranks", "3", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "3 equal parts" in err and len(err.strip().splitlines()) == 1


def test_osu_unknown_datatype_is_one_line(tmp_path, capsys):
    path = tmp_path / "osu_allreduce.txt"
    path.write_text((OSU / "osu_allreduce.txt").read_text().replace("MPI_FLOAT", "MPI_C_DOUBLE_COMPLEX"))
    with pytest.raises(SystemExit) as done:
        main(["import", "osu", str(path), "--nranks", "4", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.strip().splitlines()) == 1
    assert str(path) in err and "Datatype" in err and "MPI_C_DOUBLE_COMPLEX" in err


def test_import_cli_writes_a_run_that_plots_and_gates_read(tmp_path, capsys):
    out = tmp_path / "nccl"
    with pytest.raises(SystemExit) as done:
        main(["import", "nccl-tests", str(NCCL / "all_gather_perf.txt"), str(NCCL / "all_reduce_perf.txt"),
              "--out", str(out)])
    assert done.value.code == 0
    runs = load_runs([out])
    assert len(runs.results) == 48 and runs.samples.empty
    assert runs.metas[0]["imported_from"][0]["tool_version"] == "nccl-tests 2.13.8"


@pytest.mark.parametrize("argv, message", [
    (["osu", str(OSU / "osu_allgather_full.txt")], "--nranks"),  # its bytes need the rank count
    (["nccl-tests", str(DATA / "osu" / "osu_allreduce.txt")], "collective"),
    (["nccl-tests", str(NCCL / "nothing.txt")], "cannot read"),
    (["iperf", str(OSU / "osu_allreduce.txt")], "unknown tool"),
])
def test_bad_import_input(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as done:
        main(["import", *argv, "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert done.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_write_import_refuses_to_overwrite(tmp_path):
    results, meta, _ = import_files("osu", [OSU / "osu_allreduce.txt"], ImportOptions(nranks=2))
    write_import(tmp_path, results, meta)
    with pytest.raises(BadInput, match="already holds a run"):
        write_import(tmp_path, results, meta)


def test_plots_md_says_what_the_importers_do(tmp_path):
    """docs/PLOTS.md's import section named three of the five importers, gave all-gather rows op
    `sum`, said bandwidths were recomputed from the time and that OSU always needs --nranks."""
    text = (DATA.parent.parent / "docs" / "PLOTS.md").read_text()
    section = text[text.index("## `pccl-bench import"):]
    section = section.split("\n## ")[0]
    for tool in tools():
        assert f"`{tool}`" in section, tool
    allgather = parsed("nccl-tests", "all_gather_perf.txt")
    assert set(allgather.op) == {"none"} and "op `none`" in section and "op `sum`" not in section
    # the printed bandwidths are kept (a time rounded to two decimals gives others)
    printed = file_columns("all_gather_perf.txt")["busbw"].tolist()
    assert allgather[allgather.placement.eq("out_of_place")].busbw_gbps.tolist() == printed
    assert "recomputed from the time" not in section and "printed figures" in section
    # OSU's rank count from the launcher line, without --nranks
    launched = tmp_path / "osu.txt"
    launched.write_text("mpirun -np 4 ./osu_allreduce\n" + (OSU / "osu_allreduce.txt").read_text())
    assert set(import_files("osu", [launched], ImportOptions())[0].nranks) == {4}
    assert "always" not in section and "`mpirun -np N`" in section
