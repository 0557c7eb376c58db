"""Suite files: YAML read safely (every byte answered in one line), ``--set`` overrides, suites by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.errors import BadInput
from bench.files import project_folder
from bench.plan import safe_yaml
from bench.plan.suite import Suite, parse_suite


def apply_overrides(raw: dict, overrides: list[str], path: str) -> dict:
    """``--set timing.iters=5 --set ranks=[2]``: dotted keys, YAML values."""
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise BadInput("--set", f"{item!r} is not key=value (e.g. timing.iters=5)")
        value = safe_yaml.load_text(text, safe_yaml.Where.of(f"--set {key}", lines=False))
        node = raw
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise BadInput("--set", f"{key}: {part} is not a mapping in {path}")
        node[parts[-1]] = value
    return raw


def read_yaml(path: Path, what: str = "suite file", known: list[str] | None = None) -> Any:
    """Parsed YAML, or a one-line BadInput naming the file (and line) and what is wrong.

    Any bytes are answered: not UTF-8, too large, too deep, an alias bomb, a key given twice."""
    try:
        with open(path, "rb") as stream:
            # One byte past the limit is enough to know the file is too large.
            data = stream.read(safe_yaml.MAX_BYTES + 1)
    except FileNotFoundError:
        hint = f" (known: {', '.join(known)})" if known else ""
        raise BadInput(str(path), f"{what} not found{hint}") from None
    except OSError as error:
        raise BadInput(str(path), f"cannot read {what}: {error.strerror or error}") from None
    return safe_yaml.load_bytes(data, str(path))


def load_suite(path: Path, overrides: list[str] = ()) -> tuple[Suite, dict]:
    """The validated suite and the raw mapping it came from (saved with each run)."""
    raw = read_yaml(path)
    if isinstance(raw, dict):
        raw = apply_overrides(raw, list(overrides), str(path))
    return parse_suite(raw, str(path)), raw


def default_suites_dir() -> Path:
    """``suites/`` of the working directory, else the one beside this package (a source checkout)."""
    return project_folder("suites")


def resolve_suite_path(name_or_path: str) -> Path:
    """A path as given, or a bare name like ``smoke`` from the suites folder."""
    path = Path(name_or_path)
    if path.exists() or path.suffix in (".yaml", ".yml") or "/" in name_or_path:
        return path
    return default_suites_dir() / f"{name_or_path}.yaml"
