"""``pccl-bench model ...``: the commands (commands.py, one typer app) and their parts: calibrate,
fit/check and replay (``*_cmd.py``), their flags, tables and output files."""
