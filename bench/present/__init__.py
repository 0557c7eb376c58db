"""Present stage: the console summary, plots and reports of result tables and verdicts."""
