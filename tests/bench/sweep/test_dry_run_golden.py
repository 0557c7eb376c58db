"""The dry-run job scripts of every site profile, byte for byte: ``run sweep --site S --launcher
sbatch|srun --dry-run`` of a suite on 1 to 256 nodes against the golden files in
tests/data/golden/dry-run/ (one per site and launcher).

A change to what pccl-bench writes for a cluster (an #SBATCH line, a module, an srun option, an
environment variable, the worker's command) shows here as a diff naming the line. The golden files
hold no path of this machine: the run folder, the project's folder, the Python and the stand-in
programs' folder are put back as <out>, <root>, <python> and <bin> before the comparison.
Regenerate them after an intended change (and read the diff):
``.venv/bin/python tests/bench/sweep/test_dry_run_golden.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

if __name__ == "__main__":  # run as a script: the project first, then tests/ for conftest
    sys.path[:1] = [str(Path(__file__).resolve().parents[3]), str(Path(__file__).resolve().parents[2])]
from conftest import DATA, ROOT, describe  # noqa: E402

from bench.plan.site import known_sites  # noqa: E402
from collectives.libraries.mpi_library import loaded_mpi_library  # noqa: E402

GOLDEN = DATA / "golden" / "dry-run"
#: 1 to 256 nodes, doubling: one batch job per node count where they differ by more than 2x
NODES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LAUNCHERS = ("sbatch", "srun")
#: per site: the suite's device and ranks per node (the site's GPUs per node)
DEVICES = {"frontier": ("rocm", 8), "perlmutter": ("cuda", 4), "generic-openmpi-ucx": ("cuda", 4)}
#: a stand-in for each program a dry run may look up (none of them is run)
PROGRAMS = ("srun", "sbatch", "squeue", "scontrol")
#: a run's id: its name, the time it was made, four random hex digits (bench/sweep/options.py)
RUN_ID = re.compile(r"\b(golden-[\w-]+?)-\d{8}-\d{6}-[0-9a-f]{4}\b")


def golden_suite(site: str) -> dict:
    device, per_node = DEVICES[site]
    return {"name": f"golden-{site}", "collectives": ["allreduce"], "implementations": ["mpi", "xccl"],
            "ranks": [nodes * per_node for nodes in NODES], "ranks_per_node": per_node, "device": device,
            "sizes": {"min": "1MiB", "max": "1MiB"}, "timeout_s": 600,
            "slurm": {"account": "PROJ_g" if site == "perlmutter" else "PROJ", "time": "30"}}


def normalised(text: str, paths: dict[str, str]) -> str:
    """``text`` with each path of this machine put back as its name (longest first: the run folder
    may lie inside the project's)."""
    for path, name in sorted(paths.items(), key=lambda item: -len(item[0])):
        text = text.replace(path, name)
    return RUN_ID.sub(r"\1-<made>", text)


def dry_run(site: str, launcher: str, folder: Path) -> str:
    """The dry run's output for ``site`` and ``launcher``, normalised; it must exit 0 and write nothing."""
    folder.mkdir(parents=True, exist_ok=True)
    bin_folder = folder / "bin"
    bin_folder.mkdir(exist_ok=True)
    for program in PROGRAMS:
        stand_in = bin_folder / program
        stand_in.write_text("#!/bin/sh\necho \"$0 is a stand-in: a dry run runs nothing\" >&2\nexit 1\n")
        stand_in.chmod(0o755)
    suite = folder / f"{site}.yaml"
    suite.write_text(yaml.safe_dump(golden_suite(site)))
    out = folder / f"run-{site}-{launcher}"
    # nothing of this shell's environment (an allocation's SLURM_*, the suite's variables set by hand)
    env = {"PATH": f"{bin_folder}:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(folder),
           "PYTHONDONTWRITEBYTECODE": "1", "TERM": "dumb", "COLUMNS": "80", "LANG": "C.UTF-8"}
    result = subprocess.run([sys.executable, "-m", "bench", "run", "sweep", str(suite), "--site", site,
                             "--launcher", launcher, "--dry-run", "--out", str(out)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, describe(result)
    assert not out.exists(), f"the dry run wrote {out}"
    name, version = loaded_mpi_library()
    return normalised(result.stdout, {str(out): "<out>", str(ROOT): "<root>", sys.executable: "<python>",
                                      sys.prefix: "<venv>", str(bin_folder): "<bin>", str(folder): "<tmp>",
                                      f"load {name} {version} (": "load <this MPI> ("})


def golden_file(site: str, launcher: str) -> Path:
    return GOLDEN / f"{site}-{launcher}.txt"


def test_the_golden_files_cover_every_shipped_site():
    assert set(DEVICES) == set(known_sites())
    expected = {golden_file(site, launcher).name for site in DEVICES for launcher in LAUNCHERS}
    assert {path.name for path in GOLDEN.glob("*.txt")} == expected


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("site", sorted(DEVICES))
def test_dry_run_job_scripts_are_the_golden_ones(site, launcher, tmp_path):
    text = dry_run(site, launcher, tmp_path)
    golden = golden_file(site, launcher).read_text()
    if text != golden:
        import difflib

        diff = "".join(difflib.unified_diff(golden.splitlines(True), text.splitlines(True), "golden", "now", n=1))
        pytest.fail(f"{site} --launcher {launcher}: the dry run differs from {golden_file(site, launcher)} "
                    f"(regenerate with `python {Path(__file__).relative_to(ROOT)}` if intended):\n{diff[:6000]}")


if __name__ == "__main__":  # regenerate the golden files
    import tempfile

    GOLDEN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for site in sorted(DEVICES):
            for launcher in LAUNCHERS:
                golden_file(site, launcher).write_text(dry_run(site, launcher, Path(scratch) / site))
                print(f"wrote {golden_file(site, launcher).relative_to(ROOT)}")
