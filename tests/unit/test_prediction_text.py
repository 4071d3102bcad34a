"""The prediction parameter's text forms and usage counts (no model)."""

from __future__ import annotations

import pytest

from plookup.api.prediction import prediction_text, prediction_usage

from support.prompts import FOX_PREDICTION


def test_prediction_text_forms():
    assert prediction_text("abc") == "abc"
    assert prediction_text({"type": "content", "content": "abc"}) == "abc"
    assert prediction_text(FOX_PREDICTION) == "The quick brown fox jumps over the lazy cat."


@pytest.mark.parametrize(
    "bad", [{"type": "text", "content": "x"}, {"type": "content"}, {"type": "content", "content": [{"text": "x"}]}, 3]
)
def test_prediction_text_rejects_other_shapes(bad):
    with pytest.raises(ValueError, match="prediction"):
        prediction_text(bad)


def test_prediction_usage_counts_tokens_in_order():
    assert prediction_usage([1, 2, 3, 4, 5], [1, 2, 9, 4, 5, 6]) == {
        "accepted_prediction_tokens": 4, "rejected_prediction_tokens": 1,
    }
    assert prediction_usage([7, 8], [8, 7]) == {"accepted_prediction_tokens": 1, "rejected_prediction_tokens": 1}
    assert prediction_usage([], [1]) == {"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
