#!/usr/bin/env bash
# GPU device check (docs/GPU.md "Checking it"): on a machine with an NVIDIA GPU, install pccl-bench in
# a fresh venv the way `make` does, then, most important first and each step under a time limit:
#   1. install (offline from a wheelhouse where the machine has no PyPI), `pccl-bench env`, the MPI link
#   2. bit-exactness on the GPU (tests/project/test_gpu_hardware.py: every implementation on CuPy buffers)
#   3. the pre-flight of a GPU suite (tiny sizes: its verdicts are in the meta.json)
#   4. timings: suites/gpu-smoke.yaml (1 rank NCCL; 2 and 4 ranks through MPI), xccl in place and out of
#      place, rdma (UCX, cuda_ipc) at 1, 2, 4 ranks, 4 ranks as 2 virtual nodes of 2, nccl-tests' own
#      all_reduce_perf where a built one is given (NCCL_TESTS_BIN), then the GPU tests that need no GPU
# Everything lands in ONE archive, $OUT/device-check.tar.gz, plus $OUT/device-check.log (the device tool
# returns at most 8 files). The whole run stays inside BUDGET_S (default 480 s): a step gets at most what
# is left, a step with under 20 s left is skipped and said so; the archive is written whatever happens.
#
#   bash scripts/device-check.sh                      # on the GPU machine
#   bash scripts/device-check.sh --fetch-wheels .whl  # here (PyPI reachable): wheels for an offline GPU machine
#
# Settings (environment): PYTHON (python3), VENV (/tmp/pccl-gpu-venv), OUT (/tmp/pccl-device-check/out),
# BUDGET_S (480), WHEELHOUSE (a folder of wheels: install offline from it; default .whl when it exists),
# GPU_EXTRA (auto: reuse a CuPy that $PYTHON already imports -- a .pth file puts its site-packages after the
# venv's own -- else install the [gpu-cuda13] extra; yes: always install it; no: never), NCCL_TESTS_BIN (an
# all_reduce_perf built against the NCCL that CuPy loads: run beside xccl and imported).
# Exit code: 0 when every step that ran succeeded; else the first failure's (124: a step ran out of time).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 2
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-/tmp/pccl-gpu-venv}"
WORK=/tmp/pccl-device-check
OUT="${OUT:-$WORK/out}"
BUDGET_S="${BUDGET_S:-480}"
GPU_EXTRA="${GPU_EXTRA:-auto}"
NCCL_TESTS_BIN="${NCCL_TESTS_BIN:-}"
#: what the GPU machine's image lacks (it has CuPy 14 for CUDA 13, NCCL, numpy, pandas, ...; Python 3.12)
WHEEL_NAMES=(mpich mpi4py pydantic pydantic-core annotated-types typing-inspection libucx-cu13)
RESERVE_S=20   # kept back for the summary and the archive
RUNS=(preflight smoke xccl-placement rdma smoke-rpn2 nccl-tests-import)   # the run folders, as the steps name them

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    dest="${2:-.whl}"
    mkdir -p "$dest"
    "$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version "${WHEEL_PYTHON:-3.12}" \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d "$dest" "${WHEEL_NAMES[@]}" || exit $?
    # The UCX wheel is 43 MB, and the device takes 64 MiB of tree and wheels in all: drop what neither
    # the build nor a run loads (static libraries, perftest, the third copy of each shared library).
    exec "$PYTHON" - "$dest" <<'EOF'
import pathlib, re, sys, zipfile
unused = re.compile(r"(\.a$|perftest|\.so\.\d+\.\d+\.\d+$)")
for wheel in pathlib.Path(sys.argv[1]).glob("libucx*.whl"):
    slim = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            if not unused.search(item.filename):
                target.writestr(item, source.read(item.filename))
    before = wheel.stat().st_size
    slim.replace(wheel)
    print(f"{wheel.name}: {before / 2**20:.1f} -> {wheel.stat().st_size / 2**20:.1f} MiB")
EOF
fi

for run in steps "${RUNS[@]}"; do rm -rf "${WORK:?}/$run"; done
rm -rf "$OUT"
mkdir -p "$OUT" "$WORK/steps"
LOG="$OUT/device-check.log"
: >"$LOG"
status=0
started=$SECONDS

say() { echo "[device-check +$((SECONDS - started))s] $*" | tee -a "$LOG"; }
left() { echo $((BUDGET_S - RESERVE_S - (SECONDS - started))); }

# step NAME LIMIT_S COMMAND...: run under min(LIMIT_S, what is left), output to steps/NAME.txt and its
# tail to the log; skipped (exit 125 for the caller, the status untouched) when under 20 s is left.
step() {
    local name=$1 limit=$2 remaining
    shift 2
    remaining=$(left)
    if ((remaining < 20)); then
        say "$name: skipped, ${remaining} s of the ${BUDGET_S} s budget left"
        return 125
    fi
    ((limit > remaining)) && limit=$remaining
    say "$name (limit ${limit} s): $*"
    timeout --kill-after=5 "$limit" "$@" >"$WORK/steps/$name.txt" 2>&1
    local code=$?
    tail -n 25 "$WORK/steps/$name.txt" >>"$LOG"
    say "$name: exit $code$([[ $code -eq 124 ]] && echo ' (its time limit)')"
    if [[ $code -ne 0 && $status -eq 0 ]]; then status=$code; fi
    return $code
}

summarise() {
    "$PY" - "$@" <<'EOF'
import sys
import pandas as pd
columns = ["collective", "impl", "intra", "transport", "placement", "nranks", "bytes_total", "time_us_p50",
           "busbw_gbps", "n_wrong"]
for path in sys.argv[1:]:
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError) as error:
        print(f"{path}: {error}")
        continue
    print(f"== {path}: {len(table)} cells")
    print(table.groupby(["nranks", "impl", "intra", "transport", "status"], dropna=False).size().to_string())
    print(table.loc[table["status"] != "ok", ["nranks", "impl", "intra", "status", "error"]].drop_duplicates(
        ["nranks", "impl", "intra", "status"]).to_string(max_colwidth=160))
    print(table.loc[table["status"] == "ok", [c for c in columns if c in table]].to_string())
EOF
}

# Whatever happened: the tables, the meta records and every step's output in one archive.
pack() {
    local runs=()
    for run in "${RUNS[@]}"; do
        [[ -d "$WORK/$run" ]] && runs+=("$run")
    done
    if [[ -x "${PY:-}" && ${#runs[@]} -gt 0 ]]; then
        local tables=()
        for run in "${runs[@]}"; do [[ -f "$WORK/$run/results.csv" ]] && tables+=("$WORK/$run/results.csv"); done
        ((${#tables[@]})) && summarise "${tables[@]}" >"$WORK/steps/summary.txt" 2>&1
    fi
    local members=(steps)
    for run in "${runs[@]}"; do
        for file in results.csv meta.json; do [[ -f "$WORK/$run/$file" ]] && members+=("$run/$file"); done
    done
    tar -czf "$OUT/device-check.tar.gz" -C "$WORK" "${members[@]}" 2>>"$LOG"
    say "done in $((SECONDS - started)) s, exit $status; $OUT/device-check.tar.gz ($(du -k "$OUT/device-check.tar.gz" | cut -f1) KiB)"
    [[ -f "$WORK/steps/summary.txt" ]] && head -n 80 "$WORK/steps/summary.txt" | tee -a "$LOG"
}
trap pack EXIT

# Build and run in a copy of the tree: an editable install writes the extensions, their C and
# cython_ext/_build_info.py beside the sources, and the checkout's own build must stay as it is.
TREE="$WORK/tree"
rm -rf "$TREE" && mkdir -p "$TREE"
tar -C "$ROOT" --exclude=./.git --exclude=./.venv --exclude=./.whl --exclude=./build --exclude='*.so' \
    --exclude='./cython_ext/*.c' --exclude=./cython_ext/_build_info.py --exclude='./results/*' -cf - . \
    | tar -C "$TREE" -xf - || exit 2
cd "$TREE" || exit 2

say "repository $ROOT (built in $TREE), python $("$PYTHON" --version 2>&1), venv $VENV, out $OUT, budget ${BUDGET_S} s"
{ nvidia-smi -L || echo "nvidia-smi: not found"; } >>"$LOG" 2>&1

# -- 1. install ---------------------------------------------------------------------------------------
pip_source=()
WHEELHOUSE="${WHEELHOUSE:-$([[ -d "$ROOT/.whl" ]] && echo "$ROOT/.whl")}"
if [[ -n "$WHEELHOUSE" ]]; then
    pip_source=(--no-index --find-links "$WHEELHOUSE")
    say "installing offline from $WHEELHOUSE"
fi
extras="mpich,test,gpu-cuda13"
machine_site=""
if [[ "$GPU_EXTRA" == "auto" ]] && machine_site=$("$PYTHON" -c \
        'import os, cupy; print(os.path.dirname(os.path.dirname(cupy.__file__)))' 2>/dev/null); then
    say "reusing the CuPy that $PYTHON imports (from $machine_site) instead of the [gpu-cuda13] extra"
    extras="mpich,test"
elif [[ "$GPU_EXTRA" == "no" ]]; then
    extras="mpich,test"
fi
rm -rf "$VENV"
step venv 60 "$PYTHON" -m venv "$VENV" || exit "$status"
PY="$VENV/bin/python"
if [[ -n "$machine_site" ]]; then  # after the venv's own packages, so its MPICH and mpi4py win
    echo "$machine_site" >"$("$PY" -c 'import site; print(site.getsitepackages()[0])')/zz-machine-site.pth"
fi
# As the Makefile: the build requirements first (cython_ext compiles with the MPICH wheel's mpicc),
# MPICH and mpi4py always into the venv, whatever the system site has.
step pip-mpi 120 "$PY" -m pip install -q "${pip_source[@]}" --ignore-installed --no-deps mpich mpi4py \
    || exit "$status"
# The rdma path's UCX, built for CUDA 13 like the image's CuPy; without it rdma cells are unsupported
# with the reason, so its absence is said, not a failure.
saved=$status
step pip-ucx 60 "$PY" -m pip install -q "${pip_source[@]}" --no-deps libucx-cu13 || say "pip-ucx: rdma runs without UCX"
status=$saved
step pip-build 120 "$PY" -m pip install -q "${pip_source[@]}" "cython>=3.0" "setuptools>=68" "numpy>=1.24" \
    || exit "$status"
step pip-project 240 "$PY" -m pip install -q "${pip_source[@]}" --no-build-isolation \
    -e ".[$extras]" || exit "$status"
step env 60 "$VENV/bin/pccl-bench" env
# Every compiled MPI call must land in the library mpi4py loaded (an image with a system Open MPI
# once bound cython_ext to it: each job aborted with "MPI_Allgather() called before MPI_INIT").
step mpi-link 30 "$PY" -c 'import sys; from collectives.libraries.mpi_library import extension_mpi_mismatch as m; \
why = m(); print(why or "cython_ext calls the MPI library mpi4py loaded"); sys.exit(1 if why else 0)' \
    || exit "$status"

# -- 2. bit-exactness on the GPU ------------------------------------------------------------------------
export COLUMNS=200 PYTHONUNBUFFERED=1
pytest=("$PY" -m pytest -q -rs -p no:cacheprovider)
step gpu-tests 150 "${pytest[@]}" tests/project/test_gpu_hardware.py tests/collectives/libraries/test_mpi_link.py

# -- 3. the pre-flight (binding, one GPU per rank, NUMA, NCCL's network: docs/PREFLIGHT.md) ---------------
sweep=("$VENV/bin/pccl-bench" run sweep suites/gpu-smoke.yaml)
step preflight 90 "${sweep[@]}" --out "$WORK/preflight" --set 'ranks=[1,2]' --set sizes.max=64B

# -- 4. timings -------------------------------------------------------------------------------------------
step sweep 150 "${sweep[@]}" --out "$WORK/smoke"
step xccl-placement 60 "${sweep[@]}" --out "$WORK/xccl-placement" --set 'ranks=[1]' --set 'implementations=[xccl]' \
    --set 'placement=[out_of_place,in_place]' --set sizes.max=64MiB
step rdma 90 "$VENV/bin/pccl-bench" run sweep suites/rdma.yaml --out "$WORK/rdma" --set device=cuda \
    --set gpu_sharing=yes --set 'ranks=[1,2,4]' --set sizes.max=8MiB --set sizes.factor=8 \
    --set env.UCX_TLS=cuda_ipc,cuda_copy,sm,self --set timing.iters=20 --set timing.min_iters=5 \
    --set timing.budget_s=0.05
step sweep-rpn2 90 "${sweep[@]}" --out "$WORK/smoke-rpn2" --set 'ranks=[4]' --set ranks_per_node=2 \
    --set sizes.max=1MiB
if [[ -n "$NCCL_TESTS_BIN" ]]; then
    # nccl-tests' own numbers beside xccl's (same sizes, both placements), read back by the importer
    step nccl-tests 60 "$NCCL_TESTS_BIN" -b 8 -e 64M -f 16 -g 1 -n 20 -w 5 -c 1 \
        && step nccl-tests-import 30 "$VENV/bin/pccl-bench" import nccl-tests "$WORK/steps/nccl-tests.txt" \
            --out "$WORK/nccl-tests-import"
else
    say "nccl-tests: not run (NCCL_TESTS_BIN names no all_reduce_perf)"
fi
# Last: the GPU paths' tests that need no GPU (emulated device memory), for the versions this image has
step cpu-gpu-tests 120 "${pytest[@]}" tests/collectives/memory/test_gpu_device.py \
    tests/collectives/memory/test_gpu_aware.py tests/collectives/executors/test_gpu_paths.py \
    tests/bench/rank/test_gpu_binding.py tests/bench/driver/test_preflight.py
exit "$status"
