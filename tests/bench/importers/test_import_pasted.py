"""Logs as people paste them into issues: the table's last line cut though the editor ended the file
with a line break, rows without any header, a table followed by the next test's header, old-format
shapes, another tool's table in nccl-tests' clothes, runs with no rows at all. Each class was seen in
published logs (an evaluation of 31 of them, not kept here); the texts below are written for these
tests in the tools' print formats."""

from __future__ import annotations

import pytest

from bench.errors import BadInput
from bench.importers.import_run import import_files
from bench.importers.imported_row import ImportOptions

NEW_HEADER = (
    "#                                                              out-of-place                       in-place\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw"
    " #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n")


def _row(size: int, count: int, redop: str, root: str, time_us: float, algbw: float, busbw: float) -> str:
    block = f"{time_us:9.2f} {algbw:7.2f} {busbw:7.2f} {0:6d}"
    return f"{size:12d}  {count:12d}  {'float':>8s}  {redop:>6s}  {root:>6s}{block}{block}"


def _allreduce_rows(nranks: int, sizes: tuple[int, ...]) -> list[str]:
    factor = 2 * (nranks - 1) / nranks
    rows = []
    for size in sizes:
        time_us = 5.0 + size / 20_000
        algbw = size / time_us / 1e3
        rows.append(_row(size, size // 4, "sum", "-1", time_us, algbw, algbw * factor))
    return rows


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_cut_last_line_is_left_out_though_a_line_break_follows_it(tmp_path):
    rows = _allreduce_rows(8, (65536, 131072, 262144, 524288))
    cut = rows[-1][:70]
    path = _write(tmp_path, "paste.txt", NEW_HEADER + "\n".join(rows[:-1] + [cut]) + "\n")
    results, meta, _ = import_files(None, [path], ImportOptions())
    assert sorted(set(results.bytes_total)) == [65536, 131072, 262144] and set(results.nranks) == {8}
    said = "; ".join(meta["imported_from"][0]["inferred"])
    assert "line 7 left out: the file's last line, cut inside it" in said
    # a whole last line stays, line break or not
    whole = _write(tmp_path, "whole.txt", NEW_HEADER + "\n".join(rows) + "\n")
    assert sorted(set(import_files(None, [whole], ImportOptions())[0].bytes_total))[-1] == 524288
    # a short row that is not the last is still refused
    middle = _write(tmp_path, "middle.txt", NEW_HEADER + "\n".join([rows[0], cut, *rows[2:]]) + "\n")
    with pytest.raises(BadInput, match=r"middle.txt:5: "):
        import_files(None, [middle], ImportOptions())


def test_rows_without_any_header_are_read_as_nccl_tests_under_auto(tmp_path):
    rows = _allreduce_rows(8, (32768, 65536, 131072, 262144))
    path = _write(tmp_path, "excerpt.txt", "\n".join(rows) + "\n")
    results, meta, _ = import_files(None, [path], ImportOptions())
    assert set(results.collective) == {"allreduce"} and set(results.nranks) == {8}
    assert meta["imported_from"][0]["read_as"] == "nccl-tests"
    # two lines in that shape are not enough to tell a tool
    with pytest.raises(BadInput, match="no importer recognises it"):
        import_files(None, [_write(tmp_path, "two.txt", "\n".join(rows[:2]) + "\n")], ImportOptions())


def test_a_table_before_the_next_tests_header_is_not_that_test(tmp_path):
    """Old all_gather rows (no redop, no root, float errors) on 2 GPUs, the footer, then the next test's
    command and header with no rows: all_gather on 2 ranks, never the next test's broadcast."""
    rows = []
    for size in (65536, 131072, 262144):
        time_us = 10.0 + size / 50_000
        algbw = size / time_us / 1e3
        block = f"{time_us:9.2f} {algbw:7.2f} {algbw / 2:7.2f}  0e+00"
        rows.append(f"{size:12d}  {size // 8:12d}  {'float':>6s}{block}{block}")
    text = "\n".join(rows) + ("\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.2345\n\n"
                              "./broadcast_perf -b 8 -e 128M -f 2 -g 2\n"
                              "# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 "
                              "iters: 20 validation: 1\n")
    results, meta, _ = import_files(None, [_write(tmp_path, "log.txt", text)], ImportOptions())
    assert set(results.collective) == {"allgather"} and set(results.nranks) == {2}
    assert results.bytes_total.tolist()[:2] == [65536, 65536]


def test_old_format_shapes_decide_what_the_new_format_leaves_open(tmp_path):
    # redop and no root at size/count/4 = 1: before nccl-tests 2.13 sendrecv printed no redop column
    old = []
    for size in (1024, 2048, 4096):
        time_us = 20.0
        algbw = size / time_us / 1e3
        block = f"{time_us:9.2f} {algbw:7.2f} {algbw * 1.75:7.2f}  4e-07"
        old.append(f"{size:12d}  {size // 4:12d}  {'float':>6s}  {'sum':>6s}{block}{block}")
    results, _, _ = import_files(None, [_write(tmp_path, "old.txt", "\n".join(old) + "\n")], ImportOptions())
    assert set(results.collective) == {"allreduce"}
    # the new format at ratio 1 fits all-reduce or sendrecv, but busbw above algbw is never sendrecv's
    new = _write(tmp_path, "new.txt", NEW_HEADER + "\n".join(_allreduce_rows(4, (8192, 16384, 32768))) + "\n")
    assert set(import_files(None, [new], ImportOptions())[0].collective) == {"allreduce"}
    # busbw = algbw (a 2-rank all-reduce, or sendrecv): the user says which
    equal = [_row(s, s // 4, "sum", "-1", 20.0, s / 20e3, s / 20e3) for s in (8192, 16384, 32768)]
    with pytest.raises(BadInput, match="fits allreduce or sendrecv: pass --collective"):
        import_files(None, [_write(tmp_path, "equal.txt", NEW_HEADER + "\n".join(equal) + "\n")], ImportOptions())


def test_old_alltoall_with_its_blank_redop(tmp_path):
    header = ("#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw"
              "  error\n")
    rows = [f"{268435456:12d}  {1048576:12d}  {'float':>8s}  {'':>6s}  {520935:7d}  0.52  0.51  0e+00  {519562:7d}"
            "  0.52  0.51  0e+00"]
    results, _, _ = import_files(None, [_write(tmp_path, "alltoall_64.txt", header + "\n".join(rows) + "\n")],
                                 ImportOptions())
    assert set(results.collective) == {"alltoall"} and set(results.nranks) == {64}
    assert sorted(results.time_us_mean) == [519562, 520935]


def test_another_tools_table_in_nccl_tests_shape_is_refused_not_read_in_the_wrong_unit(tmp_path):
    """NCCL 1.x's own tests print 'bytes N type op time(ms) ...': read as nccl-tests, every algbw would be
    1000x what size / time gives."""
    rows = []
    for op in ("sum", "prod", "max", "min"):
        time_ms = 0.064
        algbw = 10_000_000 / (time_ms * 1e-3) / 1e9
        rows.append(f"    {10000000:8d}      {10000000:8d}    {'char':>4s}    {op:>4s}    {time_ms:.3f}  {algbw:6.2f}"
                    f"   0.00    0e+00    {time_ms:.3f}  {algbw:6.2f}   0.00    0e+00")
    half = "     time  algbw  busbw      res"
    header = "    #  bytes             N    type      op" + half + half
    text = header + "\n" + "\n".join(rows) + "\n"
    with pytest.raises(BadInput, match="printed algbw is over 100x what size / time gives"):
        import_files(None, [_write(tmp_path, "nccl1.txt", text)], ImportOptions())


def test_runs_without_a_single_result_line_are_one_line_not_a_traceback(tmp_path):
    header = ("# nThread 1 nGpus 1 minBytes 1310720000 maxBytes 1310720000 step: 1048576(bytes) warmup iters: 5 "
              "iters: 20 validation: 1\n#\n# Using devices\n")
    rank = "#   Rank  0 Pid   1320 on host-a device  0 [0x00] Tesla V100-SXM2-16GB\n"
    text = header + rank + NEW_HEADER + header + rank + NEW_HEADER
    with pytest.raises(BadInput, match=r"none of its 2 runs has result lines"):
        import_files(None, [_write(tmp_path, "headers.txt", text)], ImportOptions())


def test_imbs_uneven_reduce_scatter_sizes_are_said_not_dropped_silently(tmp_path):
    lines = ["#----------------------------------------------------------------",
             "# Benchmarking Reduce_scatter", "# #processes = 8",
             "#----------------------------------------------------------------",
             "       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]"]
    for size, time_us in ((0, 0.16), (4, 2.21), (8, 2.21), (32, 2.43), (64, 2.73)):
        lines.append(f"{size:13d} {1000:12d} {time_us - 0.05:12.2f} {time_us + 0.1:12.2f} {time_us:12.2f}")
    results, meta, _ = import_files("imb", [_write(tmp_path, "imb.txt", "\n".join(lines) + "\n")], ImportOptions())
    assert sorted(set(results.bytes_total)) == [0, 32, 64]
    assert "2 rows left out: 4, 8 B do not split evenly over 8 ranks" in "; ".join(meta["imported_from"][0]["inferred"])
