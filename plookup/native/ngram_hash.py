"""Hashed n-gram table: for every n in [n_min, n_max], n-gram -> (latest end, count).

Numba kernels on caller-owned arrays; `plookup.index.ngram.NgramIndex` grows them
before each call so that a kernel never runs out of room:

- ``tokens``   int32[C]           the indexed history
- ``keys``     uint64[S]          64-bit n-gram key per slot, EMPTY_KEY = free
                                  (open addressing, linear probing, S a power of two)
- ``entries``  int32[S, 2]        END (latest end position), COUNT per slot
- ``earlier``  int64[n_max+1, 2]  END, COUNT of each n-gram ending at the last
                                  position *before* that position was added, so
                                  queries see earlier occurrences only
- ``meta``     int64[NGRAM_META_SIZE]

The key of an n-gram is a polynomial hash mod 2**64 (odd multiplier, tokens + 1 so
zeros count), xor n, through murmur3's fmix64 finaliser.  Keys are stored in full;
two distinct n-grams merge only on a 64-bit key collision (probability about
entries**2 / 2**65).  Each append does n_max - n_min + 1 table updates.

Memory: 16 bytes per slot plus 4 per token of capacity.  The table is grown for the
worst case (every n-gram new: n_max - n_min + 1 keys per token) at load factor
0.5, so it stays under 64 * (n_max - n_min + 1) bytes per indexed token, e.g.
< 512 for n in [1, 8]; repetitive text fills it far less.
"""

import numpy as np
from numba import njit

from .token_range import first_out_of_range

EMPTY_KEY = np.uint64(0)

# entries / earlier columns
END = 0
COUNT = 1

# meta entries
N_TOKENS = 0
N_ENTRIES = 1
MATCH_N = 2  # largest n whose n-gram at the last position occurred earlier, 0 if none
NGRAM_META_SIZE = 3

_POLY_BASE = np.uint64(0x100000001B3)  # FNV-64 prime: odd, so multiplication is a bijection
_FMIX_1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_2 = np.uint64(0xC4CEB9FE1A85EC53)
_SHIFT = np.uint64(33)


@njit(cache=True, inline="always")
def _fmix64(x):
    x ^= x >> _SHIFT
    x *= _FMIX_1
    x ^= x >> _SHIFT
    x *= _FMIX_2
    x ^= x >> _SHIFT
    return x


@njit(cache=True)
def _find_slot(key, keys):
    """The slot holding `key`, or the free slot where it belongs."""
    mask = np.uint64(keys.size - 1)
    slot = np.int64(key & mask)
    while keys[slot] != key and keys[slot] != EMPTY_KEY:
        slot = np.int64((np.uint64(slot) + np.uint64(1)) & mask)
    return slot


@njit(cache=True)
def _append(token, n_min, n_max, tokens, keys, entries, earlier, meta):
    pos = meta[N_TOKENS]
    tokens[pos] = token
    meta[N_TOKENS] = pos + 1
    earlier[:, END] = -1
    earlier[:, COUNT] = 0
    meta[MATCH_N] = 0
    poly = np.uint64(0)
    for n in range(1, min(n_max, pos + 1) + 1):
        poly = (poly + np.uint64(tokens[pos - n + 1]) + np.uint64(1)) * _POLY_BASE
        if n < n_min:
            continue
        key = _fmix64(poly ^ np.uint64(n))
        if key == EMPTY_KEY:
            key = np.uint64(1)
        slot = _find_slot(key, keys)
        if keys[slot] == EMPTY_KEY:
            keys[slot] = key
            entries[slot, END] = -1
            entries[slot, COUNT] = 0
            meta[N_ENTRIES] += 1
        else:
            # n-grams nest, so the largest n seen earlier is the last one found
            meta[MATCH_N] = n
        earlier[n, END] = entries[slot, END]
        earlier[n, COUNT] = entries[slot, COUNT]
        entries[slot, END] = pos
        entries[slot, COUNT] += 1


@njit(cache=True)
def ngram_reset(keys, earlier, meta):
    keys[:] = EMPTY_KEY
    earlier[:, END] = -1
    earlier[:, COUNT] = 0
    meta[:] = 0


@njit(cache=True)
def ngram_extend(new_tokens, n_min, n_max, tokens, keys, entries, earlier, meta):
    """Append int64 `new_tokens`; `tokens` must have room and `keys` must stay under
    full after (n_max - n_min + 1) new keys per token.

    Returns -1, or the index of the first token outside [0, 2**31 - 1], in which
    case nothing is appended.
    """
    bad = first_out_of_range(new_tokens)
    if bad >= 0:
        return bad
    for i in range(new_tokens.size):
        _append(np.int32(new_tokens[i]), n_min, n_max, tokens, keys, entries, earlier, meta)
    return -1


@njit(cache=True)
def ngram_rehash(old_keys, old_entries, keys, entries):
    """Move every entry of the old table into an empty (all EMPTY_KEY) larger one."""
    for old_slot in range(old_keys.size):
        key = old_keys[old_slot]
        if key != EMPTY_KEY:
            slot = _find_slot(key, keys)
            keys[slot] = key
            entries[slot, END] = old_entries[old_slot, END]
            entries[slot, COUNT] = old_entries[old_slot, COUNT]
