"""`t_max_predict_ms` as llama-server ends a completion with it (plookup.app.serve.controls.Watch):
on a token whose text holds a newline, once the budget has passed since the first token; that
token is the last, and what the same step drafted after it is not the completion's."""

from __future__ import annotations

import pytest

from plookup.app.serve import controls
from plookup.app.serve.controls import Watch

PIECES = {1: b"a", 2: b"b\n", 3: b"c", 4: b"\n", 5: b"d", 6: b"e\nf"}
EOG = 0


class FakeLlm:
    def detokenize(self, tokens, prev_tokens=None, special=False):
        return b"".join(PIECES[t] for t in tokens)


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(controls.time, "perf_counter", lambda: now[0])
    return now


def hand_out(watch, clock, steps):
    """Each step's tokens at its time (seconds after the start), as the engine hands them out."""
    for at, tokens in steps:
        clock[0] = 100.0 + at
        for token in tokens:
            watch(token)


def test_the_budget_ends_on_the_first_newline_after_it(clock):
    watch = Watch(FakeLlm(), 0.25, frozenset({EOG}))
    watch.start()
    # a newline at 0.1 s (inside the budget), then a step at 0.3 s drafted "c", "\n", "d", "a"
    hand_out(watch, clock, [(0.0, [1]), (0.1, [2]), (0.2, [3]), (0.3, [3, 4, 5, 1])])
    assert watch.ended()
    assert watch.completion_tokens() == [1, 2, 3, 3, 4]  # through the newline that ended it
    assert watch.tokens == [1, 2, 3, 3, 4, 5, 1]  # what the step handed out stays recorded


def test_past_the_budget_a_line_is_finished_before_it_ends(clock):
    """llama-server stops "only upon another new line": a newline before the budget ran out and
    tokens without one after it do not end the completion (the last line is whole)."""
    watch = Watch(FakeLlm(), 0.25, frozenset({EOG}))
    watch.start()
    hand_out(watch, clock, [(0.0, [1]), (0.1, [2]), (0.5, [3]), (0.6, [5])])
    assert not watch.ended() and watch.completion_tokens() == [1, 2, 3, 5]
    hand_out(watch, clock, [(0.7, [6, 1])])  # "e\nf": a newline inside the piece
    assert watch.ended() and watch.completion_tokens() == [1, 2, 3, 5, 6]


def test_inside_the_budget_nothing_ends(clock):
    watch = Watch(FakeLlm(), 1.0, frozenset({EOG}))
    watch.start()
    hand_out(watch, clock, [(0.0, [1, 2, 4]), (0.5, [2, 4, EOG])])
    assert not watch.ended()
    assert watch.completion_tokens() == [1, 2, 4, 2, 4] and watch.delivered()[-1] == EOG


def test_without_a_budget_nothing_is_cut(clock):
    watch = Watch(FakeLlm(), None, frozenset({EOG}))
    watch.start()
    hand_out(watch, clock, [(0.0, [1]), (5.0, [2, 4, 5])])
    assert not watch.ended() and watch.completion_tokens() == [1, 2, 4, 5]


def test_a_new_completion_starts_uncut(clock):
    watch = Watch(FakeLlm(), 0.1, frozenset({EOG}))
    watch.start()
    hand_out(watch, clock, [(0.0, [1]), (0.5, [2, 3])])
    assert watch.ended() and watch.completion_tokens() == [1, 2]
    watch.start()
    hand_out(watch, clock, [(0.0, [3, 5])])
    assert not watch.ended() and watch.completion_tokens() == [3, 5]
