"""Stage 5, present: the console summary, plots and reports of result tables and verdicts."""
