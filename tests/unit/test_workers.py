"""tests/support/workers.py: a file runs whole on one xdist worker, and files that share plain
decodings or plain samples run on the same one."""

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
