"""What an import says of its buffers (the ``buffers`` column, docs/TABLE.md): nccl-tests rotates by
default, IMB is warm unless its calling sequence has ``-off_cache`` (then cold), OSU is warm; the
buffers other than warm are in the cell key."""

from __future__ import annotations

import pandas as pd
from conftest import DATA

from bench.importers.import_run import import_files
from bench.importers.imported_row import ImportOptions
from bench.plan.cells import cell_key

CORPUS = DATA / "corpus"


def imported(path) -> pd.DataFrame:
    results, _, _ = import_files(None, [path], ImportOptions())
    return results


def test_nccl_tests_rows_rotate_and_say_so_in_their_key():
    rows = imported(CORPUS / "nccl_2.19_all_reduce_tagged.log")
    assert len(rows) and set(rows["buffers"]) == {"rotate"}
    row = rows.iloc[0].to_dict()
    warm = {**row, "buffers": "warm", "virtual_nodes": row["planned_virtual_nodes"],
            "hosts_digest": row["planned_hosts_digest"]}
    assert cell_key({**warm, "buffers": "rotate"}) == row["cell_key"] != cell_key(warm)


def test_imb_is_warm_unless_its_calling_sequence_has_off_cache(tmp_path):
    log = CORPUS / "imb_2021.3_mpi1.txt"
    assert set(imported(log)["buffers"]) == {"warm"}
    cold = tmp_path / "imb_off_cache.txt"
    cold.write_text(log.read_text().replace("# ./IMB-MPI1 -npmin 2", "# ./IMB-MPI1 -off_cache 32 -npmin 2"))
    assert set(imported(cold)["buffers"]) == {"cold"}


def test_osu_is_warm():
    assert set(imported(CORPUS / "osu_7.4_bcast_full.txt")["buffers"]) == {"warm"}
