"""Predicted Outputs from Python: a draft source that speeds generation up and changes nothing."""

from __future__ import annotations

import pytest

from support.prompts import COUNT_PREDICTION, COUNT_PROMPT, COUNT_TEXT, FOX, FOX_PREDICTION, FOX_TEXT


def count(llm, **kwargs):
    return llm.create_completion(COUNT_PROMPT, max_tokens=20, temperature=0.0, **kwargs)


def test_completion_with_prediction_is_the_same_text_in_fewer_passes(smol):
    plain = count(smol)
    predicted = count(smol, prediction=COUNT_PREDICTION)
    assert plain["choices"][0]["text"] == predicted["choices"][0]["text"] == COUNT_TEXT
    assert predicted["usage"]["completion_tokens_details"] == {
        "accepted_prediction_tokens": 20, "rejected_prediction_tokens": 23,
    }
    assert "completion_tokens_details" not in plain["usage"]
    # The prediction holds all 20 tokens; without it, only ", " repeats. (How many passes each
    # takes depends on the drafter's calibration by earlier calls.)
    with_prediction, without = predicted["usage"]["speculative"], plain["usage"]["speculative"]
    assert with_prediction["accepted"] > without["accepted"]
    assert with_prediction["forward_passes"] < without["forward_passes"]


def test_prediction_serves_one_call_only(smol):
    count(smol, prediction=COUNT_PREDICTION)
    count(smol)
    # The drafter's index holds this call's prompt and output, not the earlier prediction.
    prompt = smol.tokenize(COUNT_PROMPT.encode())
    assert len(smol.drafter.index) == len(prompt) + 20
    assert smol.drafter.index.tokens[: len(prompt)].tolist() == prompt


def test_streamed_completion_with_prediction(smol):
    without = count(smol)["usage"]["speculative"]
    chunks = list(count(smol, prediction=COUNT_PREDICTION, stream=True))
    assert "".join(chunk["choices"][0]["text"] for chunk in chunks) == COUNT_TEXT
    assert smol.last_stats.generated == 20
    assert smol.last_stats.accepted > without["accepted"]


def test_chat_with_prediction_parts(smol):
    plain = smol.create_chat_completion(FOX, max_tokens=40, temperature=0.0)
    predicted = smol.create_chat_completion(FOX, max_tokens=40, temperature=0.0, prediction=FOX_PREDICTION)
    assert plain["choices"][0]["message"]["content"] == predicted["choices"][0]["message"]["content"] == FOX_TEXT
    # "The quick brown fox jumps over the lazy" + "." appear in order; " cat" does not.
    assert predicted["usage"]["completion_tokens_details"] == {
        "accepted_prediction_tokens": 9, "rejected_prediction_tokens": 1,
    }
    assert predicted["usage"]["speculative"]["generated"] == 11


def test_bad_prediction_is_a_value_error_and_leaves_the_model_usable(smol):
    with pytest.raises(ValueError, match="prediction"):
        count(smol, prediction={"type": "content", "content": 5})
    assert count(smol)["choices"][0]["text"] == COUNT_TEXT
