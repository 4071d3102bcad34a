"""Drafter cost per decoding step, without the model: index n tokens, then time extend + propose.

The history is real source code from the standard library, tokenized by the model being benched,
and the timed steps append a stretch of it again, as a code edit copying its input would.
"""

from __future__ import annotations

import inspect
import time

import numpy as np

from ...draft.drafters import make_drafter

HISTORY_SIZES = (1_000, 32_000)
TIMED_STEPS = 500
MODULES_FOR_TEXT = ("argparse", "inspect", "typing", "pathlib", "subprocess", "tarfile", "zipfile")


def source_tokens(llm, n_tokens: int) -> np.ndarray:
    """At least n_tokens tokens of standard-library source, cycling through the modules."""
    pieces, total = [], 0
    while total < n_tokens:
        for name in MODULES_FOR_TEXT:
            tokens = llm.tokenize(inspect.getsource(__import__(name)).encode(), add_bos=False)
            pieces.append(tokens)
            total += len(tokens)
            if total >= n_tokens:
                break
    return np.concatenate(pieces).astype(np.int32)[:n_tokens]


def step_microseconds(drafter_name: str, history: np.ndarray, max_draft: int) -> float:
    """Mean time of one decoding step's drafter work: extend by one token, then propose."""
    drafter = make_drafter(drafter_name, max_draft)
    drafter.warm_up()
    drafter.sync(history)
    copied = history[len(history) // 3 :][:TIMED_STEPS]  # the copy the timed steps append
    start = time.perf_counter()
    for token in copied:
        drafter.extend((int(token),))
        drafter.propose()
    return (time.perf_counter() - start) / len(copied) * 1e6


def drafter_costs(llm, drafter_names, max_draft: int) -> dict[str, dict[int, float]]:
    """{drafter: {history size: µs per step}}."""
    text = source_tokens(llm, max(HISTORY_SIZES))
    return {
        name: {size: step_microseconds(name, text[:size], max_draft) for size in HISTORY_SIZES}
        for name in drafter_names
    }
