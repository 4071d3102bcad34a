"""The server's limits, in one place (the command line's defaults come from here)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """The defaults fit whole-file edits of a few thousand lines (a 3,000-line file is ~120 KB of
    text and ~40k tokens, sent as the prompt and again as the prediction)."""

    max_body_bytes: int = 8 << 20  # a request body (413 over it)
    max_prediction_tokens: int = 65536  # a Predicted Output (400 over it)
    max_queue: int = 16  # requests waiting for the model (429 over it)
