"""plookup: model-free speculative drafting for llama.cpp.

``plookup.Llama`` is ``llama_cpp.Llama`` with a speculative token generator: drafts come for free
from an index over the prompt and everything generated so far, and llama.cpp verifies them in one
batch. The output is what the model alone would produce (see README: "Exactness").
"""

from .corpus import CorpusIndex
from .decoder import Llama, Stream
from .drafters import NgramDrafter, SuffixDrafter, make_drafter
from .memory import GlobalMemory
from .models import gemma3_path, smollm2_path
from .stats import SpecStats

__all__ = [
    "Llama", "Stream", "SuffixDrafter", "NgramDrafter", "make_drafter", "GlobalMemory", "CorpusIndex",
    "SpecStats", "smollm2_path", "gemma3_path",
]  # fmt: skip
