"""The analytical model: schedules costed on a machine description (issue 8).

machine (descriptions), mpich (the MPI library's own algorithm choice), impls
(variants: impl + phases), steps (per-step link classes from real schedules),
cost (latency-bandwidth cost of a call), fit (least squares calibration),
check (errors against measured sweeps), run (the tidy modelled table),
workload + replay (training-step replay), figures (docs/img).
"""
