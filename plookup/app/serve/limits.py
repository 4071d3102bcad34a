"""The server's limits, in one place (the command line's defaults come from here)."""

from __future__ import annotations

from dataclasses import dataclass

# llama-server's default --cors-origins: a page from any origin may call it, with credentials
ANY_ORIGIN = ("*",)


@dataclass(frozen=True)
class Limits:
    """The defaults fit whole-file edits of a few thousand lines (a 3,000-line file is ~120 KB of
    text and ~40k tokens, sent as the prompt and again as the prediction)."""

    max_body_bytes: int = 8 << 20  # a request body (413 over it)
    max_prediction_tokens: int = 65536  # a Predicted Output (400 over it)
    max_queue: int = 16  # requests waiting for the model (429 over it)
    # llama-server's -n: the tokens a request generates when it names no number, and the most it
    # may name (-1: no bound but the context, llama-server's default).
    n_predict: int = -1

    def capped(self, max_tokens):
        """A request's max_tokens (None or <= 0: up to the context) under the server's n_predict,
        as llama-server bounds a slot's n_predict by -n."""
        if self.n_predict < 0:
            return max_tokens
        if max_tokens is None or max_tokens <= 0:
            return self.n_predict
        return min(max_tokens, self.n_predict)
