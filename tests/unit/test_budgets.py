"""The time budgets (tests/support/budgets.py) on a suite of their own: an overrun is listed, and fails the
run only when strict; a test within its budget is not listed (the control)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

TESTS = pathlib.Path(__file__).parents[1]

SUITE = '''
import time
import pytest

@pytest.mark.budget(0.05)
def test_slow():
    time.sleep(0.3)

@pytest.mark.budget(5)
def test_quick():
    pass
'''


def run_suite(tmp_path, strict: bool, *options: str) -> tuple[int, str]:
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
        "from support.budgets import pytest_addoption, pytest_collection_modifyitems, pytest_configure, "
        "pytest_runtest_logreport, "
        "pytest_sessionfinish, pytest_terminal_summary\n"
    )
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = dict(os.environ, PLOOKUP_STRICT_BUDGETS="1" if strict else "0")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout


@pytest.mark.parametrize("options", [(), ("-n", "2")], ids=["alone", "two-xdist-workers"])
def test_an_overrun_is_listed_and_fails_only_when_strict(tmp_path, options):
    """Under xdist the tests are collected in the workers, and the controller still finds the overrun."""
    code, out = run_suite(tmp_path, False, *options)
    assert code == 0 and "over budget: 1" in out
    listed = [line for line in out.splitlines() if "budget " in line and "::" in line]
    assert len(listed) == 1 and "test_slow" in listed[0]  # test_quick, within its budget, is not
    code, out = run_suite(tmp_path, True, *options)
    assert code == 1 and "2 passed" in out


def test_a_tests_kind_and_default_budget_come_from_its_folder():
    from support.budgets import DEFAULT_BUDGET_S, kind_of, misplaced

    assert [kind_of(TESTS / kind / "test_x.py") for kind in ("unit", "model", "server")] == ["unit", "model", "server"]
    assert kind_of(TESTS / "test_x.py") == "model" and misplaced(TESTS / "test_x.py")  # a file left at tests/
    assert not misplaced(TESTS / "unit" / "test_x.py")
    assert DEFAULT_BUDGET_S["unit"] < DEFAULT_BUDGET_S["model"]
