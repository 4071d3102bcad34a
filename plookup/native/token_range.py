"""Token ids the indexes accept: int32 values >= 0 (the arrays are int32; -1 marks "none")."""

from numba import njit

INT32_MAX = 2**31 - 1


@njit(cache=True)
def first_out_of_range(new_tokens):
    """Index of the first token outside [0, 2**31 - 1], or -1 when all are in range."""
    for i in range(new_tokens.size):
        if new_tokens[i] < 0 or new_tokens[i] > INT32_MAX:
            return i
    return -1
