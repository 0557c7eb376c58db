"""The driver side of a sweep: what runs in the process of the user's command, around the jobs it
starts: the launchers (launchers/: one MPI job's argv and environment), following a job (job.py),
Slurm batch jobs (slurm.py), the pre-flight launch and its verdicts (preflight.py), another install
as an arm (installs.py), the memory check before a launch (memory_check.py), the run folder's lock
(runlock.py), what a run records of its machine (provenance.py) and the GPU rows of ``pccl-bench
env`` (gpu_env.py). It may import the rank side (the records and markers the ranks write); the rank
side never imports it (tests/project/test_layers.py)."""
