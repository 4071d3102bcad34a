"""A time budget for every test, so that CI's whole run stays inside its 45 minutes on a 2-core machine.

A test's budget is ``@pytest.mark.budget(seconds)``, else DEFAULT_BUDGET_S; its time is its setup,
call and teardown together (a session fixture's model load counts to the first test that needs
it, as CI pays it there). The summary lists every test over its budget and the run's total. Speed
claims live in the benchmark, and a CI machine can be slower than this one, so an overrun fails
the run only with PLOOKUP_STRICT_BUDGETS=1 (for a check before committing).

conftest.py re-exports these hooks (a plugin module of the tests' own, not a package).
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

DEFAULT_BUDGET_S = 30.0
STRICT = "PLOOKUP_STRICT_BUDGETS"

_budgets: dict[str, float] = {}
_spent: defaultdict[str, float] = defaultdict(float)


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "budget(seconds): what the test may take in CI, setup included")


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        marker = item.get_closest_marker("budget")
        _budgets[item.nodeid] = float(marker.args[0]) if marker else DEFAULT_BUDGET_S


def pytest_runtest_logreport(report) -> None:
    _spent[report.nodeid] += report.duration


def over_budget() -> list[tuple[str, float, float]]:
    """(test, seconds spent, budget) for every test that took longer than its budget, longest first."""
    over = [(t, s, _budgets[t]) for t, s in _spent.items() if t in _budgets and s > _budgets[t]]
    return sorted(over, key=lambda o: -o[1])


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _spent:
        return
    write = terminalreporter.write_line
    over = over_budget()
    terminalreporter.section("time budgets")
    write(f"{len(_spent)} tests in {sum(_spent.values()):.0f} s; over budget: {len(over)}")
    for test, spent, budget in over:
        write(f"  {spent:7.1f} s  budget {budget:6.1f} s  {test}")


def pytest_sessionfinish(session, exitstatus) -> None:
    if os.environ.get(STRICT) == "1" and over_budget() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
