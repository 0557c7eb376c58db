"""The rank side of a sweep: what runs in the processes a launcher starts. The MPI worker on every
rank (worker.py: mpi_start.py, then each cell of the plan), one cell's check-then-time (cell.py), the
machine-speed probe (probe.py), the pre-flight's ranks (preflight_probe.py), what a cell gave and its
part row (outcome.py), the part files (parts.py), injected faults for tests (faults.py), and the
per-host facts probe (hostfacts.py). Imports the plan and the library, nothing of the driver side
(bench/driver/) or later stages (tests/project/test_layers.py)."""
