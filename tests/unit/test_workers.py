"""tests/support/workers.py: a file runs whole on one xdist worker, and files that share plain
decodings or plain samples run on the same one, as do all the server tests."""

from __future__ import annotations

from support.workers import scope_of


def test_files_that_share_work_are_one_unit_and_others_their_own():
    exact, greedy = scope_of("tests/model/test_exact.py::test_a[smollm2]"), scope_of("tests/model/test_greedy.py::t")
    assert exact == greedy
    sampling, engine = scope_of("tests/model/test_sampling.py::test_x[smollm2-temp1]"), scope_of("tests/model/test_engine.py::t")
    assert sampling == engine
    assert scope_of("tests/model/test_sampling.py::T::test_y") == scope_of("tests/model/test_sampling.py::test_z")
    assert sampling != exact
    assert scope_of("tests/model/test_cache_reuse.py::t") == "tests/model/test_cache_reuse.py"


def test_the_server_tests_are_one_unit_of_their_own():
    soak, routes = scope_of("tests/server/test_soak.py::test_mixed_requests[4]"), scope_of("tests/server/test_agents.py::t")
    assert soak == routes
    assert soak not in {scope_of("tests/model/test_exact.py::t"), scope_of("tests/model/test_cache_reuse.py::t"),
                        scope_of("tests/unit/test_toolcalls.py::t")}
