"""Which tests run together on one pytest-xdist worker (`make test`'s two workers).

A test file runs whole on one worker, so that its module fixtures are made once; and the files
that pass work to each other through session state run on the same worker: tests/support/plain.py
keeps each plain decoding on its model object, and test_greedy.py reads test_exact.py's (on two
workers it would decode them again); test_engine.py's four-slot sampling test reads SmolLM2's plain
sample at temperature 1 that test_sampling.py draws (400 draws, ~10 s of a worker). The server
tests (`make test` runs them in the same session as the others) run on one worker, one after
another, while the other worker takes the unit and model tests: one server decoding at a time
beside one test process, each on one core (tests/support/threads.py).

conftest.py re-exports the hook.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

# file name -> the name of the files that run together with it
TOGETHER = {"test_exact.py": "plain decodings", "test_greedy.py": "plain decodings",
            "test_sampling.py": "plain samples", "test_engine.py": "plain samples"}
SERVER_TESTS = "tests/server"


def scope_of(nodeid: str) -> str:
    """The unit a worker is handed: the test's file, the name of the files it runs with, or the
    server tests (all of them on one worker, one server at a time)."""
    path = PurePosixPath(nodeid.split("::", 1)[0])
    if path.is_relative_to(SERVER_TESTS):
        return SERVER_TESTS
    return TOGETHER.get(path.name, str(path))


@pytest.hookimpl(optionalhook=True)  # only where pytest-xdist is installed
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class TogetherScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return TogetherScheduling(config, log)
