"""Numba kernels over numpy arrays, installed as ``plookup.native``; the classes that own the arrays
live in ``plookup`` (suffix_index, ngram_index, policy). Import the kernel modules themselves."""
