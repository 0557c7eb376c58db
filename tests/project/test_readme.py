"""The README shows suites/smoke.yaml, the quick start's suite: the two must not drift apart."""

from __future__ import annotations

import re

import yaml
from conftest import ROOT

from bench.plan.suite import parse_suite
from bench.plan.suite_files import load_suite


def readme_suite_block() -> str:
    """The first YAML block under the README's "## Suites" heading."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Suites\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert found, "README's Suites section has no ```yaml block"
    return found.group(1)


def test_readme_suite_is_smoke_yaml():
    shown = yaml.safe_load(readme_suite_block())
    shipped = yaml.safe_load((ROOT / "suites" / "smoke.yaml").read_text())
    assert shown == shipped, "README's Suites block and suites/smoke.yaml differ; make them agree"


def test_readme_suite_is_a_valid_suite():
    suite, _ = load_suite(ROOT / "suites" / "smoke.yaml")
    assert parse_suite(yaml.safe_load(readme_suite_block()), "README.md") == suite
