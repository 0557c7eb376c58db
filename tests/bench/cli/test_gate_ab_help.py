"""``gate`` and ``ab``: what their help and docs/INPUTS.md say each takes, against what each has."""

from __future__ import annotations

import re

import pytest
import typer
import typer.core
from conftest import ROOT
from hostile import assert_bad_input, run_in_process

from bench.cli import app


def _command(name: str):
    return typer.main.get_command(app).commands[name]


def _flags(name: str) -> set[str]:
    return {option for param in _command(name).params for option in param.opts if option.startswith("--")}


def test_every_option_of_gate_and_ab_has_help():
    """ab's --allow-insufficient had none."""
    for name in ("gate", "ab"):
        bare = [param.opts[0] for param in _command(name).params
                if isinstance(param, typer.core.TyperOption) and not param.help]
        assert not bare, f"{name}: {bare}"


def test_the_exit_codes_name_only_options_the_command_has():
    """ab's epilog named (--decide), a gate option ab does not have."""
    for name in ("gate", "ab"):
        named = set(re.findall(r"--[a-z][a-z-]+", _command(name).epilog))
        assert named <= _flags(name), f"{name}: {named - _flags(name)}"
    assert "budget" in _command("ab").epilog  # why ab leaves a cell undecided


def _flag_bullet() -> str:
    text = (ROOT / "docs" / "INPUTS.md").read_text()
    [bullet] = re.findall(r"^- gate and ab: .*?(?=^- )", text, flags=re.M | re.S)
    return bullet


def test_inputs_md_names_each_flag_under_the_command_that_has_it():
    """It listed --confidence, --min-samples, --resamples and --seed for ab too (ab: No such option)."""
    owners = {"gate and ab": ("gate", "ab"), "gate's": ("gate",), "ab's": ("ab",)}
    parts = re.split(r"(gate and ab|gate's|ab's)", _flag_bullet())[1:]
    assert parts, "no flags found"
    for owner, text in zip(parts[::2], parts[1::2], strict=True):
        for flag in re.findall(r"`(--[a-z][a-z-]+)", text):
            for name in owners[owner]:
                assert flag in _flags(name), f"docs/INPUTS.md: {owner} {flag}, which {name} does not have"


@pytest.mark.parametrize("flag", ["--confidence", "--min-samples", "--resamples", "--seed"])
def test_ab_has_no_bootstrap_options(flag):
    """What the doc now says: these are gate's; ab refuses them as any unknown option."""
    assert flag in _flags("gate") and flag not in _flags("ab")
    assert_bad_input(run_in_process("ab", "ci", "--out", "/nonexistent/x", flag, "1"), flag)
