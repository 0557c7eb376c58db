"""docs/SWEEPS.md shows suites/smoke.yaml, the quick start's suite (the README links it there): the two must
not drift apart."""

from __future__ import annotations

import re

import yaml
from conftest import ROOT

from bench.plan.suite import parse_suite
from bench.plan.suite_files import load_suite

DOC = ROOT / "docs" / "SWEEPS.md"


def doc_suite_block() -> str:
    """The first YAML block under docs/SWEEPS.md's "## Suites" heading."""
    text = DOC.read_text()
    section = text.split("\n## Suites\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert found, "docs/SWEEPS.md's Suites section has no ```yaml block"
    return found.group(1)


def test_doc_suite_is_smoke_yaml():
    shown = yaml.safe_load(doc_suite_block())
    shipped = yaml.safe_load((ROOT / "suites" / "smoke.yaml").read_text())
    assert shown == shipped, "docs/SWEEPS.md's Suites block and suites/smoke.yaml differ; make them agree"


def test_doc_suite_is_a_valid_suite():
    suite, _ = load_suite(ROOT / "suites" / "smoke.yaml")
    assert parse_suite(yaml.safe_load(doc_suite_block()), "docs/SWEEPS.md") == suite
