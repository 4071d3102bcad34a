"""plookup: model-free speculative drafting for llama.cpp.

``plookup.Llama`` is ``llama_cpp.Llama`` with a speculative token generator: drafts come for free
from an index over the prompt and everything generated so far, and llama.cpp verifies them in one
batch. The output is what the model alone would produce (see README: "Exactness").
"""

from .api.llama import Llama, Stream
from .api.rpc_check import RpcError
from .api.stats import SpecStats
from .app.models import gemma3_path, smollm2_path
from .draft.drafters import NgramDrafter, SuffixDrafter, make_drafter
from .index.corpus import CorpusIndex
from .index.memory import GlobalMemory

__all__ = [
    "Llama", "Stream", "SuffixDrafter", "NgramDrafter", "make_drafter", "GlobalMemory", "CorpusIndex",
    "SpecStats", "smollm2_path", "gemma3_path", "RpcError",
]
