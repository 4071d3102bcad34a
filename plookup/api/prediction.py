"""Predicted Outputs (OpenAI's ``prediction`` request parameter): its text, and what came of it.

A prediction is text the caller expects much of the output to repeat (the file being edited, the
draft being proofread). plookup matches the request's history against its tokens, a draft source
beside the history (:func:`plookup.index.memory.prediction_cursor`), so the drafter proposes its
continuations; verification keeps the output the model's own: where the build is exact for the
model, exactly what it would write without the prediction; elsewhere the same up to the first
near-tie (the prediction changes the drafts, so the batches, whose rounding can move a near-tie).
"""

from __future__ import annotations

import bisect
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


def completion_text(result: dict) -> str:
    """The generated text of a completion or chat completion result."""
    choice = result["choices"][0]
    return choice["text"] if "text" in choice else choice["message"]["content"] or ""


def chunk_text(chunk: dict) -> str:
    """The generated text a streamed completion or chat completion chunk carries."""
    choice = chunk["choices"][0] if chunk.get("choices") else {}
    if "text" in choice:
        return choice["text"] or ""
    return (choice.get("delta") or {}).get("content") or ""


# Up to this many token pairs (prediction x completion) the accounting is difflib's exact matching,
# whose worst case is quadratic; beyond it, anchored matching (linear up to a log factor).
EXACT_PAIRS = 1 << 20
ANCHOR = 4  # tokens an anchor must share before a match is followed


def prediction_usage(predicted: Sequence[int], completion: Sequence[int]) -> dict:
    """OpenAI's ``completion_tokens_details`` for a prediction, in bounded time.

    ``accepted_prediction_tokens``: prediction tokens that appear in the completion, in order;
    ``rejected_prediction_tokens``: the rest of the prediction. Both sides are tokenized from text
    the same way, so equal text counts as fully accepted. Up to :data:`EXACT_PAIRS` token pairs the
    count is the total size of the matching blocks of ``difflib.SequenceMatcher`` (without its
    junk heuristic); beyond, :func:`anchored_matches`, a lower bound of it.
    """
    if len(predicted) * len(completion) <= EXACT_PAIRS:
        matcher = difflib.SequenceMatcher(None, list(predicted), list(completion), autojunk=False)
        accepted = sum(block.size for block in matcher.get_matching_blocks())
    else:
        accepted = anchored_matches(predicted, completion)
    return {
        "accepted_prediction_tokens": accepted,
        "rejected_prediction_tokens": len(predicted) - accepted,
    }


def anchored_matches(predicted: Sequence[int], completion: Sequence[int], anchor: int = ANCHOR) -> int:
    """Tokens matched in order by walking the completion: where its next `anchor` tokens occur in
    the prediction after the last match, follow the earliest such occurrence as far as both agree.

    O((n + m) log m): every step either advances through the completion or extends a match.
    """
    starts: dict[tuple, list[int]] = {}
    for j in range(len(predicted) - anchor + 1):
        starts.setdefault(tuple(predicted[j : j + anchor]), []).append(j)
    matched = i = floor = 0
    while i + anchor <= len(completion):
        candidates = starts.get(tuple(completion[i : i + anchor]), ())
        k = bisect.bisect_left(candidates, floor)
        if k == len(candidates):
            i += 1
            continue
        j = candidates[k]
        length = anchor
        while i + length < len(completion) and j + length < len(predicted) and completion[i + length] == predicted[j + length]:
            length += 1
        matched += length
        i, floor = i + length, j + length
    return matched
