# Quick start:  make sweep   (set up .venv with the embedded MPICH, run suites/smoke.yaml)
#               make test    (set up .venv, run the tests; with root and apt also a local Slurm
#                             for the Slurm tests, taken down afterwards; SLURM=0 leaves it out)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SLURM ?= 1
# Two workers, each test file on one (its module fixtures built once); TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 2
# --durations: the slowest tests in every log, to watch the 15-minute budget on 2 cores
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15
STAMP := $(VENV)/.pccl-bench-installed

.PHONY: setup sweep test lint bench clean

$(STAMP): pyproject.toml setup.py $(wildcard buildsys/*.py cython_ext/*.pyx cython_ext/*.pxd cython_ext/*.h)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# Build requirements first: the Cython build compiles with the MPICH wheel's mpicc, and
	# builds the UCX binding against the UCX wheel (the rdma extra) found installed.
	$(PY) -m pip install --quiet "mpich>=4.2" "mpi4py>=4.0" "cython>=3.0" "setuptools>=77" "numpy>=1.24" \
		"libucx-cu12>=1.15"
	$(PY) -m pip install --quiet --no-build-isolation -e ".[mpich,test,rdma]"
	touch $@

setup: $(STAMP)

sweep: setup
	$(VENV)/bin/pccl-bench run sweep suites/smoke.yaml

test: setup
ifeq ($(SLURM),1)
	bash scripts/local-slurm.sh run $(PYTEST)
else
	$(PYTEST)
endif

lint: setup
	$(VENV)/bin/ruff check .

bench: setup
	$(PY) benchmarks/harness_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info cython_ext/*.c cython_ext/*.so
