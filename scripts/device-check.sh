#!/usr/bin/env bash
# GPU device check (docs/GPU.md): on a machine with an NVIDIA GPU, install pccl-bench with the
# [gpu] extra in a fresh venv the way `make` does, run the GPU tests and the gpu-smoke sweep
# (1 rank with NCCL; 2 and 4 ranks sharing the GPU through MPI), and keep the logs and result
# tables under $OUT (default /tmp/pccl-device-check/out). About 3-5 minutes.
#
#   bash scripts/device-check.sh                      # on the GPU machine
#   bash scripts/device-check.sh --fetch-wheels .whl  # here (PyPI reachable): wheels for an offline GPU machine
#
# Settings (environment): PYTHON (python3), VENV (/tmp/pccl-gpu-venv), WHEELHOUSE (a folder of
# wheels: install offline from it; default .whl when it exists), GPU_EXTRA (auto: reuse a CuPy
# that $PYTHON already imports -- a .pth file puts its site-packages after the venv's own --
# else install the [gpu] extra; yes: always install it; no: never).
# Exit code: 0 when the install, the tests and both sweeps succeeded; else the first failure's.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 2
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-/tmp/pccl-gpu-venv}"
WORK=/tmp/pccl-device-check
OUT="${OUT:-$WORK/out}"
GPU_EXTRA="${GPU_EXTRA:-auto}"
#: what the GPU machine's image may lack, for --fetch-wheels (the image is Python 3.12)
WHEEL_NAMES=(mpich mpi4py pydantic pydantic-core annotated-types typing-inspection ruff)

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    dest="${2:-.whl}"
    mkdir -p "$dest"
    exec "$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version "${WHEEL_PYTHON:-3.12}" \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        -d "$dest" "${WHEEL_NAMES[@]}"
fi

mkdir -p "$OUT" "$WORK"
LOG="$OUT/device-check.log"
: >"$LOG"
status=0
started=$SECONDS

say() { echo "[device-check +$((SECONDS - started))s] $*" | tee -a "$LOG"; }

# step NAME LIMIT_S COMMAND...: run with a time limit, output to $WORK/NAME.txt and the log tail.
step() {
    local name=$1 limit=$2
    shift 2
    say "$name: $*"
    timeout "$limit" "$@" >"$WORK/$name.txt" 2>&1
    local code=$?
    tail -n 40 "$WORK/$name.txt" >>"$LOG"
    say "$name: exit $code"
    if [[ $code -ne 0 && $status -eq 0 ]]; then status=$code; fi
    return $code
}

say "repository $ROOT, python $("$PYTHON" --version 2>&1), venv $VENV, out $OUT"
{ nvidia-smi -L || echo "nvidia-smi: not found"; } >>"$LOG" 2>&1

pip_source=()
WHEELHOUSE="${WHEELHOUSE:-$([[ -d .whl ]] && echo "$ROOT/.whl")}"
if [[ -n "$WHEELHOUSE" ]]; then
    pip_source=(--no-index --find-links "$WHEELHOUSE")
    say "installing offline from $WHEELHOUSE"
fi

extras="mpich,test,gpu"
machine_site=""
if [[ "$GPU_EXTRA" == "auto" ]] && machine_site=$("$PYTHON" -c \
        'import os, cupy; print(os.path.dirname(os.path.dirname(cupy.__file__)))' 2>/dev/null); then
    say "reusing the CuPy that $PYTHON imports (from $machine_site) instead of the [gpu] extra"
    extras="mpich,test"
elif [[ "$GPU_EXTRA" == "no" ]]; then
    extras="mpich,test"
fi

rm -rf "$VENV"
step venv 120 "$PYTHON" -m venv "$VENV" || exit "$status"
PY="$VENV/bin/python"
if [[ -n "$machine_site" ]]; then  # after the venv's own packages, so its MPICH and mpi4py win
    echo "$machine_site" >"$("$PY" -c 'import site; print(site.getsitepackages()[0])')/zz-machine-site.pth"
fi
# As the Makefile: the build requirements first (cython_ext compiles with the MPICH wheel's mpicc),
# MPICH and mpi4py always into the venv, whatever the system site has.
step pip-mpi 300 "$PY" -m pip install -q "${pip_source[@]}" --ignore-installed --no-deps mpich mpi4py || exit "$status"
step pip-build 300 "$PY" -m pip install -q "${pip_source[@]}" "cython>=3.0" "setuptools>=68" "numpy>=1.24" \
    || exit "$status"
step pip-project 600 "$PY" -m pip install -q "${pip_source[@]}" --no-build-isolation -e ".[$extras]" || exit "$status"

step env 120 "$VENV/bin/pccl-bench" env
# Every compiled MPI call must land in the library mpi4py loaded (an image with a system Open MPI
# once bound cython_ext to it: each job aborted with "MPI_Allgather() called before MPI_INIT").
step mpi-link 60 "$PY" -c 'import sys; from collectives.transports.mpi.library import extension_mpi_mismatch as m; \
why = m(); print(why or "cython_ext calls the MPI library mpi4py loaded"); sys.exit(1 if why else 0)' \
    || exit "$status"
export COLUMNS=200 PYTHONUNBUFFERED=1
step pytest 300 "$PY" -m pytest -q -rs -p no:cacheprovider tests/collectives/transports/test_mpi_link.py tests/project/test_gpu_hardware.py \
    tests/collectives/memory/test_gpu_device.py tests/collectives/memory/test_gpu_aware.py tests/collectives/executors/test_gpu_paths.py \
    tests/bench/run/test_gpu_binding.py tests/bench/run/test_preflight.py
rm -rf "$WORK/smoke" "$WORK/smoke-rpn2"
step sweep 180 "$VENV/bin/pccl-bench" run sweep suites/gpu-smoke.yaml --out "$WORK/smoke"
step sweep-rpn2 120 "$VENV/bin/pccl-bench" run sweep suites/gpu-smoke.yaml --out "$WORK/smoke-rpn2" \
    --set 'ranks=[4]' --set ranks_per_node=2 --set sizes.max=1MiB

summarise() {
    "$PY" - "$@" <<'EOF'
import sys
import pandas as pd
for path in sys.argv[1:]:
    try:
        table = pd.read_csv(path)
    except OSError as error:
        print(f"{path}: {error}")
        continue
    print(f"== {path}: {len(table)} cells")
    print(table.groupby(["nranks", "impl", "intra", "transport", "status"], dropna=False).size().to_string())
    print(table.loc[table["status"] != "ok", ["nranks", "impl", "intra", "error"]].drop_duplicates(
        ["nranks", "impl", "intra"]).to_string(max_colwidth=160))
    print(table.loc[table["status"] == "ok", ["collective", "impl", "intra", "nranks", "bytes_total",
                                              "time_us_p50", "busbw_gbps"]].to_string())
EOF
}
summarise "$WORK/smoke/results.csv" "$WORK/smoke-rpn2/results.csv" >"$WORK/summary.txt" 2>&1
for name in env pytest sweep sweep-rpn2 summary; do cp "$WORK/$name.txt" "$OUT/" 2>/dev/null; done
cp "$WORK/smoke/results.csv" "$OUT/smoke.csv" 2>/dev/null
# each sweep's pre-flight (docs/PREFLIGHT.md: binding, one GPU per rank, NUMA, NCCL's network) and GPUs
cp "$WORK/smoke/meta.json" "$OUT/smoke-meta.json" 2>/dev/null
cp "$WORK/smoke-rpn2/meta.json" "$OUT/smoke-rpn2-meta.json" 2>/dev/null
cp "$WORK/smoke-rpn2/results.csv" "$OUT/smoke-rpn2.csv" 2>/dev/null
say "done in $((SECONDS - started)) s, exit $status; files in $OUT"
tail -n 30 "$WORK/pytest.txt"
head -n 60 "$WORK/summary.txt"
exit "$status"
