"""Predicted Outputs (OpenAI's ``prediction`` request parameter): its text, and what came of it.

A prediction is text the caller expects much of the output to repeat (the file being edited, the
draft being proofread). plookup indexes its tokens ahead of the prompt, so the drafter proposes its
continuations; verification keeps the output exactly what the model would write without it.
"""

from __future__ import annotations

import difflib
from typing import Any, Sequence


def prediction_text(prediction: Any) -> str:
    """The text of ``{"type": "content", "content": str | [{"type": "text", "text": str}, ...]}``.

    A bare string is taken as the content itself.
    """
    if isinstance(prediction, str):
        return prediction
    if not isinstance(prediction, dict) or prediction.get("type") != "content":
        raise ValueError('prediction must be {"type": "content", "content": ...}')
    content = prediction.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        for part in content
    ):
        return "".join(part["text"] for part in content)
    raise ValueError('prediction content must be a string or a list of {"type": "text", "text": ...}')


def prediction_usage(predicted: Sequence[int], completion: Sequence[int]) -> dict:
    """OpenAI's ``completion_tokens_details`` for a prediction.

    ``accepted_prediction_tokens``: prediction tokens that appear in the completion, in order —
    the total size of the matching blocks of ``difflib.SequenceMatcher`` (without its junk
    heuristic) between the prediction's and the completion's tokens;
    ``rejected_prediction_tokens``: the rest of the prediction. Both sides are tokenized from text
    the same way, so equal text counts as fully accepted.
    """
    matcher = difflib.SequenceMatcher(None, list(predicted), list(completion), autojunk=False)
    accepted = sum(block.size for block in matcher.get_matching_blocks())
    return {
        "accepted_prediction_tokens": accepted,
        "rejected_prediction_tokens": len(predicted) - accepted,
    }
