"""The engine of slots: one llama_context decoding one or several generations in every step.

:mod:`.slot` holds a sequence's cached tokens and the generation running on it; :mod:`.engine`
admits generations to slots (:mod:`.admission`, taking turns on the context by :mod:`.turns`), steps
them all in one ``llama_decode`` (:mod:`.step`) and hands each the tokens of its verdict
(:mod:`.verdicts`).
"""

from .engine import Engine
from .slot import Generation, Slot

__all__ = ["Engine", "Generation", "Slot"]
