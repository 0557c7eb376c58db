"""``MPI_IN_PLACE`` as the MPI standard defines it for each collective, read from the MPI calls made.

A tiny MPI profiling library (built here, preloaded into each rank) wraps MPI_Allgather,
MPI_Reduce_scatter_block and MPI_Allreduce: it records, per call, whether ``sendbuf`` was
``MPI_IN_PLACE``, the receive buffer and the counts, then calls the PMPI_ entry. The standard's in-place
forms (MPI-4.1 §6.7, §6.11.2, §6.9.6): all-gather ``sendbuf = MPI_IN_PLACE``, each rank's input already
at its slot of ``recvbuf``; reduce-scatter-block and all-reduce ``sendbuf = MPI_IN_PLACE``, the input in
``recvbuf``. Each call is also checked bit for bit (the input's place is right only if the result is).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, _run, describe, find_mpiexec, subprocess_env

RECORDER = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>

static void record(const char *name, const void *send, const void *recv, int scount, int rcount) {
    const char *prefix = getenv("MPI_CALL_LOG");
    if (!prefix) return;
    int rank = -1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", prefix, rank);
    FILE *log = fopen(path, "a");
    if (!log) return;
    fprintf(log, "%s %d %d %ju %d %d\n", name, rank, send == MPI_IN_PLACE, (uintmax_t)(uintptr_t)recv,
            scount, rcount);
    fclose(log);
}

int MPI_Allgather(const void *s, int sc, MPI_Datatype st, void *r, int rc, MPI_Datatype rt, MPI_Comm c) {
    record("allgather", s, r, sc, rc);
    return PMPI_Allgather(s, sc, st, r, rc, rt, c);
}

int MPI_Reduce_scatter_block(const void *s, void *r, int rc, MPI_Datatype t, MPI_Op o, MPI_Comm c) {
    record("reduce_scatter", s, r, -1, rc);
    return PMPI_Reduce_scatter_block(s, r, rc, t, o, c);
}

int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op o, MPI_Comm c) {
    record("allreduce", s, r, -1, n);
    return PMPI_Allreduce(s, r, n, t, o, c);
}
"""


def _recorder(folder: Path) -> Path:
    """The profiling library, built against the MPI beside this Python (the venv's MPICH wheel)."""
    venv = Path(sys.executable).parent.parent
    include, lib = venv / "include", venv / "lib"
    if not (include / "mpi.h").exists() or not (lib / "libmpi.so").exists():
        pytest.skip("no mpi.h and libmpi.so beside this Python (the MPICH wheel's) to build the recorder")
    source, library = folder / "recorder.c", folder / "librecorder.so"
    source.write_text(RECORDER)
    built = subprocess.run(["cc", "-shared", "-fPIC", "-O1", f"-I{include}", str(source), "-o", str(library),
                            f"-L{lib}", "-lmpi", f"-Wl,-rpath,{lib}"], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"cannot build the MPI call recorder: {built.stderr.strip()[:300]}")
    return library


def test_mpi_in_place_is_the_standard_s_for_each_collective(tmp_path):
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    library, log = _recorder(tmp_path), tmp_path / "calls"
    # preloaded into the ranks only (env runs python), not into the launcher
    argv = [mpiexec, "-n", "2", "env", f"LD_PRELOAD={library}", sys.executable,
            str(ROOT / "tests" / "mpi_scripts" / "record_in_place.py")]
    result = _run(argv, timeout=120, cwd=ROOT, env=subprocess_env(2, {"MPI_CALL_LOG": str(log)}))
    assert result.returncode == 0, describe(result)
    made = json.loads(result.stdout.strip().splitlines()[-1])
    seen = {}
    for rank in (0, 1):
        for line in Path(f"{log}.{rank}").read_text().splitlines():
            name, at, in_place, recv, send_count, recv_count = line.split()
            seen.setdefault((name, int(at), int(recv)), []).append((in_place == "1", int(send_count),
                                                                   int(recv_count)))
    assert len(made) == 12  # 3 collectives x 2 placements x 2 ranks
    for call in made:
        assert call["wrong"] == 0, call
        records = seen.get((call["collective"], call["rank"], call["recv"]))
        assert records, f"no {call['collective']} call on recvbuf {call['recv']:#x} was recorded: {call}"
        # the harness's own MPI_Allreduce calls (maxima over ranks) use other buffers
        assert all(in_place == call["in_place"] for in_place, _, _ in records), (call, records)
        assert (call["send"] is None) == call["in_place"]
        # the count is per rank (all-gather's block, reduce-scatter's block, all-reduce's vector) in
        # either placement: in place the block's place in recvbuf says where the input is
        assert all(recv_count == 1000 for _, _, recv_count in records), records
        if call["in_place"] and call["collective"] != "allreduce":
            # the whole input (all-gather: the output, own block at its slot) is in recvbuf
            assert call["recv_elements"] == 2 * 1000, call
