"""What the app reads of a :class:`plookup.Llama` and its engine, by name: the vocabulary, the
engine's slots, counters and step trace. The app never reaches inside the model or the engine
(tests/unit/test_layout.py keeps the stages apart; these keep the private attributes in the API).
"""

from __future__ import annotations

from .context import is_eog


class Readings:
    """A part of :class:`plookup.Llama` (which holds ``_model``, the llama_cpp model, and
    ``_engine``, None where it was loaded with ``vocab_only``)."""

    @property
    def vocab(self):
        """The model's ``llama_vocab`` pointer, for llama_cpp's ``llama_vocab_*`` functions."""
        return self._model.vocab

    def is_eog(self, token: int) -> bool:
        """Whether `token` ends a generation (an end-of-generation token of the vocabulary)."""
        return is_eog(self, token)

    def eog_tokens(self) -> frozenset[int]:
        """Every end-of-generation token of the vocabulary (a walk over it, ~0.1 s for 152k
        tokens, made once per model)."""
        if getattr(self, "_eog_tokens", None) is None:
            self._eog_tokens = frozenset(t for t in range(self.n_vocab()) if self.is_eog(t))
        return self._eog_tokens

    def token_text(self, token: int) -> str:
        """The token's text as the vocabulary writes it (special tokens included, not rendered)."""
        return self._model.token_get_text(token)

    def busy_slots(self) -> int:
        """How many generations are running on the model's slots."""
        return self._engine.active() if self._engine is not None else 0

    def forget_slots(self) -> None:
        """Drop the cached cells of every idle slot and the drafts' past outcomes: the next
        requests prefill and calibrate afresh (a benchmark's runs, each on equal terms)."""
        if self._engine is not None:
            self._engine.forget()

    def decode_counts(self) -> tuple[int, int]:
        """(llama_decode calls the engine made, the rows they decoded): rows / calls = tokens per step."""
        return (self._engine.step.steps, self._engine.step.rows) if self._engine is not None else (0, 0)

    def trace_steps(self, on: bool) -> None:
        """Start (afresh) or stop recording what each engine step did
        (:class:`plookup.engine.step.StepRecord`; read by :meth:`traced_steps`)."""
        self._engine.step.trace = [] if on else None

    def traced_steps(self) -> list:
        """The steps recorded since :meth:`trace_steps` started (none when it is off)."""
        return list(self._engine.step.trace or [])
