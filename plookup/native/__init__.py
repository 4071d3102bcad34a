"""Numba kernels over numpy arrays that plookup.index and plookup.draft own: the suffix automaton,
the n-gram hash, the suffix array and the draft-length decision; the README's map lists its modules."""
