"""What a sweep was asked for and the run folder it goes to: the suite with --set, --hosts and the
Slurm flags applied, a new folder or a resumed one, locked for this sweep."""

from __future__ import annotations

import copy
import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError
from rich.console import Console

from bench.driver import slurm
from bench.driver.runlock import RunLock
from bench.errors import BadInput
from bench.files import output_folder
from bench.plan.hosts import host_list, split_flag
from bench.plan.site import known_sites, site_path
from bench.plan.slurm_options import Slurm
from bench.plan.suite import Suite, parse_suite
from bench.plan.suite_files import apply_overrides, read_yaml
from bench.rank.parts import read_parts


@dataclass
class SweepOptions:
    suite_path: Path
    out: Path | None = None
    launcher: str = "auto"
    resume: Path | None = None
    dry_run: bool = False
    overrides: list[str] = field(default_factory=list)
    #: an in-memory suite (``run point``) instead of a file
    suite_document: dict | None = None
    suite_where: str = "run point"
    #: ``--launcher sbatch``: wait for the batch job and print its summary
    wait: bool = False
    #: --partition/--account/--time: the suite's ``slurm`` block, overridden
    slurm_flags: dict[str, str] = field(default_factory=dict)
    #: --hosts h1,h2 / --hostfile FILE: the suite's hosts, overridden (also on --resume: where the
    #: cells run may change, what is measured may not)
    hosts: str | None = None
    hostfile: Path | None = None
    #: the pre-flight refusals let through (--allow-xccl-sockets, --allow-other-mpi: bench/driver/preflight.py
    #: OVERRIDES); recorded in run.json, so the batch job's own sweep (--resume) and any resume keep them
    allowed: tuple[str, ...] = ()
    #: whether the suite was named (``run sweep SUITE``) rather than taken by default: a resumed run
    #: refuses a named suite that is not its own
    suite_named: bool = True
    #: print the summary tables at the end (``pccl-bench ab``'s rounds print one line instead)
    summary: bool = True
    #: installs already asked what they are (meta.json's ``installs`` of an earlier round of the same
    #: ``ab``): not asked again
    known_installs: dict[str, dict] = field(default_factory=dict)
    #: --site NAME|PATH: the suite's ``site`` (a site profile), overridden
    site: str | None = None
    #: --batch-jobs: auto | per-nodes | one (bench/driver/slurm.py batch_groups)
    batch_jobs: str = "auto"
    #: --nodes: run only the launches on these node counts (each batch job of one node count)
    nodes: tuple[int, ...] = ()
    #: a GPU suite whose cells reached no GPU exits 0 (today's behaviour) rather than 1
    allow_unsupported: bool = False
    #: the first-run kit (bench/plan/first_run.py): the batch job packs its run folder into <run>.tar.gz
    first_run: bool = False


@dataclass
class Run:
    """The suite of a sweep (validated, and as given), its folder and the rows already there."""

    suite: Suite
    document: dict
    folder: Path
    run_id: str
    #: the rows of the folder's part files (a resumed run's), read and checked once
    rows: list[dict] = field(default_factory=list)
    #: the pre-flight refusals let through: the flags', and a resumed run's own (its run.json)
    allowed: tuple[str, ...] = ()


def _new_run_id(suite_name: str) -> str:
    return f"{suite_name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def prepare_folder(folder: Path, where: str) -> None:
    try:
        (folder / "parts").mkdir(parents=True, exist_ok=True)
        (folder / "plans").mkdir(exist_ok=True)
        (folder / "logs").mkdir(exist_ok=True)
        probe = folder / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise BadInput(where, f"cannot write results to {folder}: {error.strerror or error}") from None


def start_folder(folder: Path, document: dict, run_id: str, where: str, allowed: tuple[str, ...] = ()) -> None:
    prepare_folder(folder, where)
    (folder / "suite.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    (folder / "run.json").write_text(json.dumps({"run_id": run_id, **({"allowed": list(allowed)} if allowed else {})}))


def _with_slurm_flags(raw: object, flags: dict[str, str]) -> object:
    """The suite with --partition/--account/--time written into its ``slurm`` block."""
    if not flags or not isinstance(raw, dict):
        return raw
    for name, value in flags.items():
        try:
            Slurm.model_validate({name: value})
        except ValidationError as error:
            message = error.errors()[0]["msg"].removeprefix("Value error, ")
            raise BadInput(f"--{name}", f"{value!r}: {message}" if repr(value) not in message else message) from None
    block = raw.get("slurm") if isinstance(raw.get("slurm"), dict) else {}
    return {**raw, "slurm": {**block, **flags}}


def _with_host_flags(raw: object, options: SweepOptions) -> object:
    """The suite with --hosts or --hostfile in place of its own hosts."""
    if not isinstance(raw, dict) or (options.hosts is None and options.hostfile is None):
        return raw
    if options.hosts is not None and options.hostfile is not None:
        raise BadInput("--hosts", "give --hosts or --hostfile, not both")
    raw = {key: value for key, value in raw.items() if key not in ("hosts", "hostfile")}
    if options.hosts is not None:
        names = split_flag(options.hosts)
        if not names:
            raise BadInput("--hosts", f"{options.hosts!r} names no host (e.g. --hosts h1,h2 or h1:2,h2:2)")
        host_list(names, "--hosts")
        return {**raw, "hosts": names}
    return {**raw, "hostfile": str(options.hostfile.resolve())}  # a resume may run from elsewhere


def _with_site_flag(raw: object, site: str | None) -> object:
    """The suite with --site as its ``site``: a path made absolute (the batch job resumes the run
    from its own working directory), a name as given (suites/sites/NAME.yaml)."""
    if site is None or not isinstance(raw, dict):
        return raw
    if not site.strip() or not site.isprintable():
        raise BadInput("--site", f"{site!r}: give a site name (suites/sites/) or a profile's path")
    path = Path(site)
    named = "/" not in site and path.suffix not in (".yaml", ".yml")
    if not site_path(site).is_file():  # the flag named it, not the suite: say so
        known = f" (known: {', '.join(known_sites())})" if named else ""
        raise BadInput("--site", f"{site!r}: no site profile {'of that name' if named else 'at that path'}{known}")
    return {**raw, "site": site if named else str(path.resolve())}


def check_folder_flags(options: SweepOptions) -> None:
    """--out and --resume, before any work: a folder that can be made (not a file, not under one, no
    over-long name, no line break, which no batch directive or log line could hold), not inside
    results/baselines/ (a run there would silently become the pooled baseline)."""
    if options.resume is not None and options.out is not None:
        raise BadInput("--out", f"{options.out}: a resumed run stays in its folder ({options.resume}); "
                       "give --out or --resume, not both")
    for flag, folder in (("--out", options.out), ("--resume", options.resume)):
        if folder is None:
            continue
        if not all(char.isprintable() for char in str(folder)):
            raise BadInput(flag, f"{folder}: a run folder's path cannot hold a line break or other control "
                                 "character")
        output_folder(folder, flag)


def load_for(options: SweepOptions) -> tuple[Suite, dict]:
    """The suite of a new run: the file (or ``run point``'s mapping) with --set, the host flags and
    the Slurm flags applied."""
    if options.suite_document is not None:
        raw, where = copy.deepcopy(options.suite_document), options.suite_where
    else:
        where = str(options.suite_path)
        raw = read_yaml(options.suite_path)
        if isinstance(raw, dict):
            raw = apply_overrides(raw, list(options.overrides), where)
    raw = _with_site_flag(_with_host_flags(_with_slurm_flags(raw, options.slurm_flags), options), options.site)
    return parse_suite(raw, where), raw


def open_run(options: SweepOptions) -> Run:
    """The suite, as validated and as given, the run folder, the run id (new or resumed) and the rows
    already in the folder."""
    if options.resume is not None and options.overrides:
        raise BadInput("--set", "a resumed run keeps the suite it started with; --set cannot change it")
    if options.resume is not None and options.site is not None:
        raise BadInput("--site", "a resumed run keeps the site it started with (its suite.yaml); --site cannot "
                                 "change it")
    check_folder_flags(options)
    if options.resume is not None:
        folder = options.resume
        saved = folder / "suite.yaml"
        if not saved.exists():
            raise BadInput("--resume", f"{folder} is not a pccl-bench run folder (no suite.yaml)")
        # Where and how long Slurm runs it may change, and on which hosts; what is measured may not.
        raw = _with_host_flags(_with_slurm_flags(read_yaml(saved, "saved suite"), options.slurm_flags), options)
        suite = parse_suite(raw, str(saved))
        _refuse_other_suite(options, suite)
        run = Run(suite, raw, folder, _saved_run_id(folder),
                  allowed=tuple(dict.fromkeys([*_saved_allowed(folder), *options.allowed])))
    else:
        suite, raw = load_for(options)
        run_id = _new_run_id(suite.name)
        folder = options.out if options.out is not None else output_folder(Path("results") / run_id, "results")
        _refuse_used_out(options, folder)
        run = Run(suite, raw, folder, run_id, allowed=options.allowed)
    # Rows already in the folder are read before anything is written there: a line that is no row
    # is bad input naming the file and line, and the folder stays as it was.
    run.rows = read_parts(folder, check_cells=True)
    return run


def _refuse_other_suite(options: SweepOptions, saved: Suite) -> None:
    """``run sweep ci --resume <a smoke run>``: the named suite is not the one the run measures."""
    if not options.suite_named or options.suite_document is not None:
        return
    named = read_yaml(options.suite_path)
    name = named.get("name") if isinstance(named, dict) else None
    if name != saved.name:
        raise BadInput("--resume", f"{options.resume} is a run of suite {saved.name!r}; the suite argument "
                       f"{options.suite_path} is suite {name!r}. A resumed run keeps its own suite: drop the "
                       "suite argument")


def _saved_run_id(folder: Path) -> str:
    path = folder / "run.json"
    if not path.exists():
        return folder.name
    try:
        return str(json.loads(path.read_text())["run_id"])
    except (OSError, ValueError, KeyError, TypeError):
        raise BadInput("--resume", f"{path}: not the run record a sweep writes ({{\"run_id\": ...}})") from None


def _saved_allowed(folder: Path) -> list[str]:
    """The pre-flight refusals a run was started with leave to go on (run.json ``allowed``)."""
    try:
        allowed = json.loads((folder / "run.json").read_text()).get("allowed", [])
    except (OSError, ValueError, AttributeError):
        return []
    from bench.driver.preflight import OVERRIDES

    return [name for name in allowed if name in OVERRIDES] if isinstance(allowed, list) else []


def _refuse_used_out(options: SweepOptions, folder: Path) -> None:
    """A new run never goes into a folder that holds another (checked again once it is locked)."""
    if options.out is None or options.resume is not None:
        return
    if (folder / "results.parquet").exists():
        raise BadInput("--out", f"{folder} already holds a run; pass --resume {folder} or another --out")
    if (folder / slurm.JOB_RECORD).exists():
        raise BadInput("--out", f"{folder} belongs to a batch job ({slurm.JOB_RECORD}); pass --resume {folder} "
                       "or another --out")


def folder_flag(options: SweepOptions) -> str:
    return "--resume" if options.resume is not None else "--out" if options.out is not None else "results"


def where_of(options: SweepOptions) -> str:
    """What to name in a bad-input line about the suite."""
    if options.resume is not None:
        return str(options.resume / "suite.yaml")
    return options.suite_where if options.suite_document is not None else str(options.suite_path)


def lock_folder(options: SweepOptions, folder: Path, out: Console) -> RunLock:
    """Hold the run folder for this sweep; a second sweep on it is refused (exit 2)."""
    lock = RunLock(folder)
    lock.acquire(folder_flag(options))
    try:
        _refuse_used_out(options, folder)  # another sweep may have finished here while this one started
    except BadInput:
        lock.abandon()
        raise
    if lock.unsupported:
        out.print(f"[yellow]warning: {folder} cannot be locked ({lock.unsupported}): nothing stops a second "
                  "sweep on it[/yellow]", highlight=False, soft_wrap=True)
    return lock
