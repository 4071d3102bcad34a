"""What ``plookup.Llama`` measures once per model and settings at load (cached on disk by
:mod:`plookup.measure`), and what it chooses from it: whether verification is exact here, the
drafts' bound that keeps it so, and the verify-cost curve the policy sizes drafts by.
"""

from __future__ import annotations

import warnings

from ..log import phase
from ..measure.costs import cached_cost_curve
from ..measure.exactness import EXACT_MIN_ROWS, cached_invariance, cached_slot_invariance, slots_exact


def calibrate(llm, exactness, cost_curve, streams: bool) -> None:
    """The drafter readied for this model: its kernels loaded, drafts kept exact where they can be
    (``exactness="auto"``), sized by `cost_curve` ("auto": measured here). A model that cannot roll
    back decodes plainly, with a warning."""
    if not llm.can_roll_back:
        warnings.warn(f"plookup: {llm.model_path} keeps a recurrent state that cannot drop rejected "
                      f"draft tokens; decoding it plainly, without speculation")
        return
    with phase("loading the drafting kernels", "(compiled once into numba's cache: `make install` does it)"):
        llm.drafter.warm_up()  # now, not inside the first generation
    if exactness == "auto":
        llm.exact = keep_exact(llm, streams)
    if isinstance(cost_curve, str) and cost_curve == "auto":
        # With several slots a step verifies up to parallel * (max_draft + 1) rows.
        parallel = llm.parallel
        cost_curve = cached_cost_curve(llm, parallel * (llm.drafter.max_draft + 1) if parallel > 1 else None)
    if cost_curve is not None:
        llm.drafter.use_cost_curve(cost_curve)


def keep_exact(llm, streams: bool) -> bool:
    """Whether verification is exact here (the probe, cached), keeping drafts within the batch
    sizes found exact; where it is, two-branch drafts are off, and with several slots a slot's
    steps shared with others stay exact where the probe found them so."""
    max_rows = llm.drafter.max_draft + 1
    rows = cached_invariance(llm, max(EXACT_MIN_ROWS, max_rows)).exact_within(max_rows)
    if rows is None:
        return False
    llm.drafter.max_draft = rows - 1
    # Exact single drafts beat a second branch: without flash attention its rows round
    # differently (softmax over cells out of order), and a branch taken leaves its tokens in
    # other cells than plain decoding would, so every later token would round differently too.
    llm.drafter.branches = False
    if streams and slots_exact(cached_slot_invariance(llm, rows), "streams"):
        # Measured (plookup doctor, "beside a 2nd slot"): a slot's rows beside another's are
        # bitwise its lone decode with a KV stream per sequence, not in one unified cache,
        # where its cells interleave with the others'.
        llm._engine.shared_exact = True
    return True
