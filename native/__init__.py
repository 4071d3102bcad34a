"""Numba kernels over numpy arrays; the classes that own the arrays live in `plookup`."""

from .draft_length import best_draft_length, best_two_branches, record_outcome
from .ngram_hash import (
    NGRAM_META_SIZE,
    ngram_extend,
    ngram_rehash,
    ngram_reset,
)
from .suffix_automaton import (
    EDGE_FIELDS,
    SAM_META_SIZE,
    STATE_FIELDS,
    WALK_CAP,
    sam_alternative,
    sam_continuation,
    sam_extend,
    sam_feed,
    sam_rehash,
    sam_reset,
    sam_state_continuation,
)

__all__ = [
    "best_draft_length",
    "best_two_branches",
    "record_outcome",
    "EDGE_FIELDS",
    "NGRAM_META_SIZE",
    "SAM_META_SIZE",
    "STATE_FIELDS",
    "WALK_CAP",
    "ngram_extend",
    "ngram_rehash",
    "ngram_reset",
    "sam_alternative",
    "sam_continuation",
    "sam_extend",
    "sam_feed",
    "sam_rehash",
    "sam_reset",
    "sam_state_continuation",
]
