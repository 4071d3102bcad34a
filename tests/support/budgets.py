"""A time budget for every test and for every leg of CI, so that CI's whole run stays inside its
45 minutes on a 2-core machine.

A test's budget is ``@pytest.mark.budget(seconds)``, else its folder's default (DEFAULT_BUDGET_S:
a unit test takes seconds, a model or server test may take half a minute); its time is its setup,
call and teardown together (a session fixture's model load counts to the first test that needs
it, as CI pays it there). A leg is one pytest run of CI, named with ``--leg`` (the Makefile's
test-unit, test-model, test-server and test-exact); its budget (LEG_BUDGET_S) bounds the run's
wall-clock time. The summary lists every test over its budget, the run's total by kind and the
leg's time. Speed claims live in the benchmark, and a CI machine can be slower than this one,
so an overrun fails the run only with PLOOKUP_STRICT_BUDGETS=1 (for a check before committing).

A test file belongs in tests/unit, tests/model or tests/server; one left at tests/ itself runs
and is budgeted as a model test, and the summary says where to move it.

Under pytest-xdist (`make test` runs two workers) the tests are collected in the workers only: each
test's kind and budget travel to the controller, which sums up, in its report's user_properties.

conftest.py re-exports these hooks (a plugin module of the tests' own, not a package).
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
KINDS = ("unit", "model", "server")
DEFAULT_BUDGET_S = {"unit": 15.0, "model": 30.0, "server": 30.0}
# A leg's whole run on CI's 2 cores, the models' first loads and measurements included: with the
# two wheels' 17 minutes, the 45 minutes CI may take (each leg's measured time: docs/lab/notebook.md,
# "CI's legs"). Shared out as the legs measured from an empty cache (2026-12-07, twelfth session:
# model ~555 s, server 334-388 s, exact ~480 s); the sum (28 minutes) as before.
LEG_BUDGET_S = {"unit": 120.0, "model": 650.0, "server": 400.0, "exact": 510.0}
STRICT = "PLOOKUP_STRICT_BUDGETS"

_budgets: dict[str, float] = {}
_kinds: dict[str, str] = {}
_spent: defaultdict[str, float] = defaultdict(float)
_misplaced: set[str] = set()
_started = time.monotonic()  # the leg's start (this module is imported with conftest, before collection)


def kind_of(path: Path) -> str:
    """The kind of test a file holds, by its folder under tests/; any other place counts as model."""
    try:
        folder = Path(path).resolve().relative_to(TESTS).parts[0]
    except ValueError:
        return "model"
    return folder if folder in KINDS else "model"


def misplaced(path: Path) -> bool:
    """A test file sitting at tests/ itself rather than in a kind's folder."""
    return Path(path).resolve().parent == TESTS


def pytest_addoption(parser) -> None:
    parser.addoption("--leg", choices=sorted(LEG_BUDGET_S), help="the CI leg this run is, for its time budget")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "budget(seconds): what the test may take in CI, setup included")


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        kind = kind_of(item.path)
        marker = item.get_closest_marker("budget")
        budget = float(marker.args[0]) if marker else DEFAULT_BUDGET_S[kind]
        item.user_properties += [("budget", budget), ("kind", kind)]
        if misplaced(item.path):
            item.user_properties.append(("misplaced", item.path.name))


def pytest_runtest_logreport(report) -> None:
    for name, value in report.user_properties:
        if name == "budget":
            _budgets[report.nodeid] = value
        elif name == "kind":
            _kinds[report.nodeid] = value
        elif name == "misplaced":
            _misplaced.add(value)
    _spent[report.nodeid] += report.duration


def leg_seconds() -> float:
    """The leg's time: wall-clock since its start (under xdist less than its tests' sum)."""
    return time.monotonic() - _started


def over_budget() -> list[tuple[str, float, float]]:
    """(test, seconds spent, budget) for every test that took longer than its budget, longest first."""
    over = [(t, s, _budgets[t]) for t, s in _spent.items() if t in _budgets and s > _budgets[t]]
    return sorted(over, key=lambda o: -o[1])


def leg_overrun(config) -> tuple[str, float, float] | None:
    """(leg, seconds spent, budget) when this run is a leg that took longer than its budget."""
    leg = config.getoption("--leg", None)
    spent = leg_seconds()
    return (leg, spent, LEG_BUDGET_S[leg]) if leg and spent > LEG_BUDGET_S[leg] else None


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    write = terminalreporter.write_line
    if _misplaced:
        terminalreporter.section("test files outside a kind's folder")
        for name in sorted(_misplaced):
            write(f"  tests/{name}: move it to tests/unit, tests/model or tests/server (run as a model test until then)")
    if not _spent:
        return
    over = over_budget()
    terminalreporter.section("time budgets")
    write(f"{len(_spent)} tests in {sum(_spent.values()):.0f} s; over budget: {len(over)}")
    by_kind = defaultdict(float)
    for test, spent in _spent.items():
        by_kind[_kinds.get(test, "model")] += spent
    write("by kind: " + ", ".join(f"{kind} {by_kind[kind]:.0f} s" for kind in KINDS if kind in by_kind))
    leg = config.getoption("--leg", None)
    if leg:
        write(f"leg {leg}: {leg_seconds():.0f} s of its {LEG_BUDGET_S[leg]:.0f} s (wall-clock)")
    for test, spent, budget in over:
        write(f"  {spent:7.1f} s  budget {budget:6.1f} s  {test}")
    if leg_overrun(config):
        write(f"  leg {leg} over its budget")


def pytest_sessionfinish(session, exitstatus) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller judges the whole run
        return
    overrun = over_budget() or leg_overrun(session.config)
    if os.environ.get(STRICT) == "1" and overrun and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
