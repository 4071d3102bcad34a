"""The engine of slots: one llama_context decoding one or several generations in every step, composed
of parts with one job each; the README's map lists its modules."""

from .engine import Engine
from .handle import ContextHandle
from .slot import Cells, Generation, Slot

__all__ = ["Cells", "ContextHandle", "Engine", "Generation", "Slot"]
