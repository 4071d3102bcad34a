"""The engine of slots: one llama_context decoding one or several generations in every step.

:mod:`.slot` holds a sequence's cached tokens and the generation running on it; :mod:`.engine`
composes the parts: the handle on the context, the one place that calls llama.cpp (:mod:`.handle`),
admission of generations to slots (:mod:`.admission`, taking turns on the context by :mod:`.turns`),
the step that advances them all in one ``llama_decode`` (:mod:`.step`), and each one's verdict on
its rows (:mod:`.verdicts`).
"""

from .engine import Engine
from .handle import ContextHandle
from .slot import Cells, Generation, Slot

__all__ = ["Cells", "ContextHandle", "Engine", "Generation", "Slot"]
