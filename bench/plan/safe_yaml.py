"""YAML read safely and boundedly: any bytes in, a value or one ``BadInput`` line out.

PyYAML's safe loader is safe from code execution, not from the rest: its composer
recurses (deep nesting is a RecursionError), aliases are shared references that
anything walking the result (validation, ``safe_dump``) expands (the "billion
laughs" bomb), and a repeated mapping key silently keeps the later value. So the
text is first checked in one pass over the parser's events, which is iterative and
sees anchors, aliases and keys before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from bench.errors import BadInput

#: suites, machines and workloads are a few KiB; this leaves room, refuses a stray binary and
#: keeps the pure-Python parser under a second
MAX_BYTES = 256 * 1024
#: nested collections; real files use 3 or 4
MAX_DEPTH = 32
#: nodes of the document with every alias expanded (the files in suites/ have about 100)
MAX_NODES = 20_000


@dataclass
class _Collection:
    """One open mapping or sequence during the event pass."""

    path: str
    anchor: str | None
    is_mapping: bool
    nodes: int = 1
    keys: dict[Any, int] = field(default_factory=dict)  # mapping: key -> line it was first given on
    expecting_key: bool = True
    key: str = ""  # the key whose value comes next (mapping) or the index (sequence)
    index: int = 0

    def child_path(self) -> str:
        part = self.key if self.is_mapping else str(self.index)
        return f"{self.path}.{part}" if self.path else part

    def after_child(self) -> None:
        if self.is_mapping:
            self.expecting_key = not self.expecting_key
        else:
            self.index += 1


MERGE_TAG = "tag:yaml.org,2002:merge"
_RESOLVER = yaml.resolver.Resolver()


def _scalar_tag(event: yaml.ScalarEvent) -> str:
    if event.tag not in (None, "!"):
        return event.tag
    return _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit)


def _scalar_key(event: yaml.ScalarEvent, tag: str) -> Any:
    """The Python value a scalar key becomes (``yes`` and ``true`` are the same key)."""
    try:
        value = yaml.constructor.SafeConstructor().construct_object(
            yaml.ScalarNode(tag, event.value, style=event.style))
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):
        return (tag, event.value)
    try:
        hash(value)
    except TypeError:
        return (tag, event.value)
    return value


class Where(str):
    """A name for error lines; ``lines=False`` (a ``--set`` value) leaves out line:column."""

    lines: bool = True

    @classmethod
    def of(cls, name: str, lines: bool = True) -> Where:
        where = cls(name)
        where.lines = lines
        return where


def _located(where: str, mark: yaml.Mark | None) -> str:
    if mark is None or not getattr(where, "lines", True):
        return str(where)
    return f"{where}:{mark.line + 1}:{mark.column + 1}"


def _at(where: str, event: yaml.Event) -> str:
    return _located(where, event.start_mark)


def _field(path: str) -> str:
    if len(path) > 60:  # a runaway nesting: its start and how deep it went
        path = f"{path[:40]}... ({path.count('.') + 1} levels)"
    return path or "(top level)"


def check_structure(text: str, where: str) -> None:
    """Depth, alias expansion and duplicate keys, checked on the parser's events."""
    stack: list[_Collection] = []
    anchored: dict[str, int] = {}  # anchor -> nodes its value expands to
    total = 0
    aliases = 0

    def add(nodes: int, event: yaml.Event) -> None:
        nonlocal total
        if stack:
            stack[-1].nodes += nodes
        else:
            total += nodes
        if total + sum(open_.nodes for open_ in stack) > MAX_NODES:
            grown = ("aliases expand the document past" if aliases else "the document has more than")
            raise BadInput(_at(where, event), f"{_field(path_of_next())}: {grown} {MAX_NODES} values"
                           + (" (an alias-expansion bomb?)" if aliases else ""))

    def path_of_next() -> str:
        return stack[-1].child_path() if stack else ""

    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if stack and stack[-1].is_mapping and stack[-1].expecting_key:
                raise BadInput(_at(where, event), f"{_field(stack[-1].path)}: a mapping key must be a plain value, "
                               "not a list or mapping")
            if len(stack) >= MAX_DEPTH:
                raise BadInput(_at(where, event), f"{_field(path_of_next())}: nested deeper than {MAX_DEPTH} levels")
            stack.append(_Collection(path_of_next(), event.anchor, isinstance(event, yaml.MappingStartEvent)))
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            done = stack.pop()
            if done.anchor is not None:
                anchored[done.anchor] = done.nodes
            add(done.nodes, event)
            if stack:
                stack[-1].after_child()
        elif isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
            if isinstance(event, yaml.AliasEvent):
                aliases += 1
                nodes = anchored.get(event.anchor, 1)  # an unknown alias is the composer's error, below
            else:
                nodes = 1
                if event.anchor is not None:
                    anchored[event.anchor] = 1
            if stack and stack[-1].is_mapping and stack[-1].expecting_key and isinstance(event, yaml.ScalarEvent):
                _check_key(stack[-1], event, where)
            add(nodes, event)
            if stack:
                stack[-1].after_child()


def _check_key(mapping: _Collection, event: yaml.ScalarEvent, where: str) -> None:
    tag = _scalar_tag(event)
    mapping.key = str(event.value)
    if tag == MERGE_TAG:  # ``<<: *base`` then keys of its own: overriding, not repeating
        return
    key = _scalar_key(event, tag)
    if key in mapping.keys:
        raise BadInput(_at(where, event), f"{_field(mapping.child_path())}: key {event.value!r} is given twice "
                       f"(first on line {mapping.keys[key]}); YAML keys are unique")
    mapping.keys[key] = event.start_mark.line + 1 if event.start_mark else 0


def _yaml_error(error: yaml.YAMLError, where: str, text: str) -> BadInput:
    if isinstance(error, yaml.reader.ReaderError):
        char = error.character if isinstance(error.character, int) else ord(error.character or "\0")
        line = text[: error.position].count("\n") + 1
        located = f"{where}:{line}" if getattr(where, "lines", True) else str(where)
        return BadInput(located, f"malformed YAML: character U+{char:04X} at offset {error.position} "
                        "is not allowed in YAML text (write it as an escape in a double-quoted string)")
    mark = getattr(error, "problem_mark", None)
    located = _located(where, mark)
    problem = getattr(error, "problem", None) or "not valid YAML"
    snippet = ""
    if mark is not None and mark.buffer is not None:
        lines = mark.buffer.rstrip("\0").split("\n")  # the reader ends its buffer with a NUL
        line = lines[mark.line] if mark.line < len(lines) else ""
        snippet = f" (at {line.strip()[:60]!r})" if line.strip() else ""
    return BadInput(located, f"malformed YAML: {problem}{snippet}")


def decode(data: bytes, where: str) -> str:
    """UTF-8 text (a BOM is dropped), or a BadInput naming the first bad byte and its line."""
    if len(data) > MAX_BYTES:
        raise BadInput(where, f"{len(data)} bytes is larger than the {MAX_BYTES} bytes a YAML file here may be")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise BadInput(f"{where}:{line}", f"not UTF-8 text: byte 0x{data[error.start]:02x} at offset "
                       f"{error.start}") from None


def load_text(text: str, where: str) -> Any:
    """The value of a YAML document, checked first (depth, aliases, duplicate keys)."""
    if len(text) > MAX_BYTES:
        raise BadInput(where, f"{len(text)} characters is larger than the {MAX_BYTES} a YAML text here may be")
    try:
        check_structure(text, where)
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise _yaml_error(error, where, text) from None


def load_bytes(data: bytes, where: str) -> Any:
    return load_text(decode(data, where), where)
