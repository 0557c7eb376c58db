"""The suite's own guard (tests/conftest.py): a test run that changes the checkout fails, ignored files
included, while the interpreter's and the test tools' caches are left alone."""

from __future__ import annotations

import os

from conftest import checkout_changes, checkout_files


def test_an_ignored_build_record_rewritten_is_a_change(tmp_path):
    (tmp_path / "cython_ext").mkdir()
    record = tmp_path / "cython_ext" / "_build_info.py"
    record.write_text("OPTIMISATION = '-O3'\n")
    (tmp_path / "kept.txt").write_text("kept")
    before = checkout_files(tmp_path)
    record.write_text("OPTIMISATION = '-O0'\n")
    os.utime(record, ns=(before["cython_ext/_build_info.py"][1] + 10**9,) * 2)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "new.csv").write_text("x")
    (tmp_path / "kept.txt").unlink()
    assert checkout_changes(before, checkout_files(tmp_path)) == [
        "added results/new.csv", "changed cython_ext/_build_info.py", "removed kept.txt"]


def test_caches_are_not_changes(tmp_path):
    before = checkout_files(tmp_path)
    for cache in ("__pycache__", ".pytest_cache", ".hypothesis", ".venv"):
        (tmp_path / cache).mkdir()
        (tmp_path / cache / "entry").write_text("x")
    assert checkout_changes(before, checkout_files(tmp_path)) == []
