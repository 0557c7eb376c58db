"""Property: whatever a suite file holds, ``suites validate`` and ``run sweep --dry-run`` answer
either ok, or exit 2 with one line on stderr naming the file, and create nothing.

The inputs are the real suites (suites/*.yaml) mutated byte by byte and field by field, plus
the classes of input that once broke the contract (non-UTF-8 bytes, alias bombs, deep nesting,
repeated keys, environment names and values the OS refuses). Everything runs in this process
through the CLI's entry point: no MPI job is started, so a few hundred examples take seconds.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from hostile import mutate_bytes, run_in_process

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

REAL_SUITES = sorted((ROOT / "suites").glob("*.yaml"))
TEXTS = {path.name: path.read_bytes() for path in REAL_SUITES}
RAWS = {name: yaml.safe_load(data) for name, data in TEXTS.items()}

#: bounded for CI: examples per property (PCCL_FUZZ_EXAMPLES=2000 for a longer hunt), and a
#: ceiling per example that a hang would cross. Not a speed test: a legal suite of 73,760 cells
#: (algorithms.yaml to 4 GiB) takes 2 x 3 s quiet and took 25 s beside the other pytest worker in CI;
#: an unguarded alias bomb never ends (tests/bench/cli/test_bad_input.py has the 10**9 one)
EXAMPLES = int(os.environ.get("PCCL_FUZZ_EXAMPLES", "80"))
FUZZ = settings(max_examples=EXAMPLES, deadline=timedelta(seconds=120), database=None, derandomize=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])




def assert_contract(folder: Path, data: bytes) -> None:
    """Both commands on ``data``: ok, or exit 2 with one line naming the file; nothing created."""
    suite = folder / "suite.yaml"
    suite.write_bytes(data)
    out = folder / "out"
    codes = []
    for argv in (("suites", "validate", str(suite)), ("run", "sweep", str(suite), "--dry-run", "--out", str(out))):
        code, stdout, stderr = run_in_process(*argv)
        shown = f"{' '.join(argv)}\nexit {code}\nstdout: {stdout[-1500:]}\nstderr: {stderr[-1500:]}"
        shown += f"\ninput: {data[:400]!r}"
        assert code in (0, 2), shown
        assert "Traceback" not in stdout + stderr, shown
        if code == 2:
            lines = stderr.splitlines()
            assert len(lines) == 1, shown
            assert lines[0].startswith("pccl-bench: error: ") and str(suite) in lines[0], shown
            assert len(lines[0]) < 1000, shown
        else:
            assert stderr == "", shown
        codes.append(code)
        assert sorted(p.name for p in folder.iterdir()) == ["suite.yaml"], f"files were created\n{shown}"
    assert codes[0] == codes[1], f"validate and --dry-run disagree on {data[:400]!r}: {codes}"


# ---------------------------------------------------------------- mutations

SPECIALS = [b":", b"- ", b"[", b"]", b"{", b"}", b",", b"&a ", b"*a", b"!!", b"\t", b"\n", b"\x00", b"\xff",
            b"\xe9", b"'", b'"', b"#", b"<<: ", b"? ", b"|", b"%YAML 1.1\n", b"---\n", b"\\", b"\r"]


@st.composite
def byte_mutations(draw) -> bytes:
    return mutate_bytes(draw, TEXTS[draw(st.sampled_from(sorted(TEXTS)))], SPECIALS, edits=6, longest_delete=20)


SIZES = st.sampled_from(["8B", "4MiB", "1.5K", "-1", "0", "1024GiB", "1e30", "4 parsecs", "9" * 40, "1kB"])
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([0, 1, 2, 3, 4, -1]),
    st.floats(allow_nan=True, allow_infinity=True), SIZES, st.text(max_size=12),
    st.sampled_from(["ring", "rd", "mpi", "pccl-flat", "pccl-hier", "allgather", "auto", "A=B", "x\0y", "="]),
)
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=8)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


@st.composite
def field_mutations(draw) -> bytes:
    raw = yaml.safe_load(TEXTS[draw(st.sampled_from(sorted(TEXTS)))])
    for _ in range(draw(st.integers(1, 3))):
        paths = [path for path in _paths(raw) if path]
        path = draw(st.sampled_from(paths))
        parent = raw
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add-key"]))
        if action == "replace":
            parent[path[-1]] = draw(VALUES)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(VALUES)
        if not isinstance(raw, dict) or not raw:
            break
    return yaml.safe_dump(raw, allow_unicode=draw(st.booleans()), sort_keys=False).encode()


def _bomb(levels: int) -> str:
    lines = ["b0: &b0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


#: the classes of input that broke the contract, each drawn with n in 1..10, appended to or
#: spliced into a real suite. Nesting reaches past Python's recursion limit (the composer
#: recursed); bombs stop at 10**6 nodes, enough to cross the limit without eating a CI
#: machine's memory should the guard ever go (tests/bench/cli/test_bad_input.py has the 10**9 one).
HOSTILE = [
    lambda n: _bomb(min(n, 6)).encode(),
    lambda n: b"description: " + b"[" * (1000 + n * 100) + b"]" * (1000 + n * 100) + b"\n",
    lambda n: b"timing: " + b"{a: " * (1000 + n * 100) + b"1" + b"}" * (1000 + n * 100) + b"\n",
    lambda n: b"zz_deep: " + b"- " * (1000 + n * 100) + b"1\n",
    lambda n: b"".join(b" " * i + b"k%d:\n" % i for i in range(n * 10)) + b" " * (n * 10) + b"x: 1\n",
    lambda n: b"ranks: [%d]\n" % n,
    lambda n: b"env: {\"A=%d\": \"1\"}\n" % n,
    lambda n: b"env: {A: \"x\\0%d\"}\n" % n,
    lambda n: b"env: {\"\\r%d\": \"1\"}\n" % n,
    lambda n: b"env: {A: \"" + b"y" * (n * 20_000) + b"\"}\n",
    lambda n: b"name: caf\xe9-%d\n" % n,
    lambda n: b"sizes: {min: 8B, max: %dGiB}\n" % (2**n),
    lambda n: b"timing: {iters: 3, iters: %d}\n" % n,
    lambda n: b"x: !!python/object/apply:os.system ['echo %d']\n" % n,
    lambda n: b"<<: {ranks: [%d]}\n" % n,
    lambda n: b"\xef\xbb\xbf" * n + b"name: x\n",
    lambda n: b"x" * (n * 30_000),
]


def _without_key(data: bytes, key: bytes) -> bytes:
    """The suite without its top-level ``key`` block (so the piece that sets it is not a repeat)."""
    kept, skipping = [], False
    for line in data.split(b"\n"):
        if line.startswith(key + b":"):
            skipping = True
            continue
        if skipping and (line.startswith((b" ", b"-", b"#")) or not line.strip()):
            continue
        skipping = False
        kept.append(line)
    return b"\n".join(kept)


@st.composite
def hostile_suites(draw, make) -> bytes:
    data = TEXTS[draw(st.sampled_from(sorted(TEXTS)))]
    piece = make(draw(st.integers(1, 10)))
    key = piece.split(b":", 1)[0].lstrip(b"\xef\xbb\xbf")
    if draw(st.booleans()):  # instead of the suite's own value, else as well (a repeated key)
        data = _without_key(data, key)
    if draw(st.booleans()):
        return data + b"\n" + piece
    lines = data.split(b"\n")
    at = draw(st.integers(0, len(lines)))
    return b"\n".join([*lines[:at], piece.rstrip(b"\n"), *lines[at:]])


# ---------------------------------------------------------------- properties


def test_the_real_suites_pass(tmp_path: Path):
    assert REAL_SUITES, "no suites to mutate"
    for name, data in TEXTS.items():
        folder = tmp_path / name
        folder.mkdir()
        assert_contract(folder, data)


@FUZZ
@given(data=byte_mutations())
def test_byte_mutations_keep_the_contract(tmp_path_factory, data: bytes):
    assert_contract(tmp_path_factory.mktemp("bytes"), data)


@FUZZ
@given(data=field_mutations())
def test_field_mutations_keep_the_contract(tmp_path_factory, data: bytes):
    assert_contract(tmp_path_factory.mktemp("fields"), data)


@pytest.mark.parametrize("make", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_input_keeps_the_contract(tmp_path_factory, make):
    # Every class is tried (a draw among them all could miss one), each in a few placements.
    @settings(FUZZ, max_examples=max(EXAMPLES // 10, 1))
    @given(data=hostile_suites(make))
    def check(data: bytes) -> None:
        assert_contract(tmp_path_factory.mktemp("hostile"), data)

    check()

