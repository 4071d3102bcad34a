"""What ``plookup.Llama`` measures once per model and settings at load (cached on disk by
:mod:`plookup.measure`), and what it chooses from it: whether verification is exact here, the
drafts' bound that keeps it so, and the verify-cost curve the policy sizes drafts by.

``calibration="blocking"`` (the default) measures what is not cached yet at load, which takes
seconds to minutes the first time. ``calibration="background"`` (``plookup serve``) measures
nothing at load: where a figure it needs is not cached yet, the model decodes plainly (no drafts:
plain decoding's output, exact by construction) and :attr:`Llama.calibration_pending` says so,
until :func:`take_over` applies the figures a measurement in another process
(:mod:`plookup.api.background`) has cached since.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Optional

from ..draft.policy import CPU_COST_CURVE
from ..log import log, phase
from ..measure.cache import NotMeasured, cached_only
from ..measure.costs import cached_cost_curve, curve_rows, oracle_speedup
from ..measure.exactness import EXACT_MIN_ROWS, cached_invariance, cached_slot_invariance, slots_exact

CALIBRATIONS = ("blocking", "background")
# plookup.Llama's arguments that measure nothing at load, whatever is cached: drafts sized by the
# built-in curve of a 2-core CPU, no exactness probe (``.exact`` None). For a model whose figures
# do not matter to its user (`plookup serve --calibration none`: scripts and tests that start
# servers often, each new setting's first measurement taking 15-90 s on 2 cores).
NOTHING_MEASURED = MappingProxyType(dict(cost_curve=CPU_COST_CURVE, exactness=None))


@dataclass
class Pending:
    """The figures a model waits for (``calibration="background"``): how calibrate was asked for
    them, the drafter's settings they apply to, what was found missing, and what a process that
    measures them loads (:mod:`plookup.api.background`)."""

    exactness: object
    cost_curve: object
    streams: bool
    max_draft: int
    branches: bool
    missing: str = ""
    load: dict = field(default_factory=dict)
    since: float = field(default_factory=time.monotonic)


def check_calibration(calibration) -> None:
    if calibration not in CALIBRATIONS:
        raise ValueError(f"calibration must be one of {', '.join(map(repr, CALIBRATIONS))}, got {calibration!r}")


def calibrate(llm, exactness, cost_curve, streams: bool, calibration: str = "blocking",
              load: Optional[dict] = None) -> None:
    """The drafter readied for this model: its kernels loaded, drafts kept exact where they can be
    (``exactness="auto"``), sized by `cost_curve` ("auto": measured here). A model that cannot roll
    back decodes plainly, with a warning. With `calibration` "background", what is not cached is
    not measured: the model then drafts nothing, and ``llm.calibration_pending`` (a
    :class:`Pending` carrying `load`) says what it waits for."""
    llm.calibration_pending = None
    if not llm.can_roll_back:
        warnings.warn(f"plookup: {llm.model_path} keeps a recurrent state that cannot drop rejected "
                      f"draft tokens; decoding it plainly, without speculation")
        return
    with phase("loading the drafting kernels", "(compiled once into numba's cache: `make install` does it)"):
        llm.drafter.warm_up()  # now, not inside the first generation
    if llm.drafter.max_draft <= 0 and llm.parallel == 1:
        # One slot that never drafts (a request's bound only lowers max_draft): the figures would
        # bound and size drafts never made. (With several slots the curve also prices a step's
        # throwaway rows, plookup.draft.sizing.fillers_worth_adding.) Measuring took minutes.
        log.info("drafting off (max_draft 0, one slot): no exactness probe or verify-cost curve needed")
        return
    if calibration == "blocking":
        apply_figures(llm, exactness, cost_curve, streams)
        return
    pending = Pending(exactness, cost_curve, streams, llm.drafter.max_draft, llm.drafter.branches, load=load or {})
    if not _applied(llm, pending):
        llm.calibration_pending = pending
        log.info("%s: not measured yet for this model and settings: no drafts (plain decoding) until it is",
                 pending.missing)


def take_over(llm, measure: bool = False) -> Optional[str]:
    """The figures that ``llm.calibration_pending`` waits for, applied from the cache now (instant;
    `measure`: measured here where they are not, as a blocking load would): a line saying them, or
    None where one is still missing (the model keeps decoding plainly). Call it while no
    generation runs."""
    pending = llm.calibration_pending
    if pending is None:
        return figures(llm)
    if measure:
        _restore(llm, pending)
        apply_figures(llm, pending.exactness, pending.cost_curve, pending.streams)
    elif not _applied(llm, pending):
        return None
    llm.calibration_pending = None
    return figures(llm)


def _applied(llm, pending: Pending) -> bool:
    """The cached figures applied to `llm`, as blocking calibration applies them; where one is not
    cached yet, `llm` left drafting nothing and False."""
    _restore(llm, pending)
    try:
        with cached_only():
            apply_figures(llm, pending.exactness, pending.cost_curve, pending.streams)
        return True
    except NotMeasured as e:
        _restore(llm, pending)
        llm.drafter.max_draft = 0  # plain decoding's tokens, whatever the figures say later
        pending.missing = e.what
        return False


def _restore(llm, pending: Pending) -> None:
    """`llm` as before any figure was applied."""
    llm.drafter.max_draft, llm.drafter.branches = pending.max_draft, pending.branches
    llm.exact = None
    llm._engine.step.shared_exact = False


def apply_figures(llm, exactness, cost_curve, streams: bool) -> None:
    """The exactness verdict (``exactness="auto"``) and the cost curve (an array, or "auto") applied
    to `llm`'s drafter, measured here where they are not cached (except inside
    :func:`plookup.measure.cache.cached_only`)."""
    if exactness == "auto":
        llm.exact = keep_exact(llm, streams)
    if isinstance(cost_curve, str) and cost_curve == "auto":
        # measured after the exactness verdict, which may lower max_draft
        cost_curve = cached_cost_curve(llm, curve_rows(llm.drafter.max_draft, llm.parallel))
    if cost_curve is not None:
        llm.drafter.use_cost_curve(cost_curve)


def figures(llm) -> str:
    """The figures in force, in a line: the exactness verdict, the drafts' bound and the cost
    curve's ceiling (an always-right drafter's speed-up on it)."""
    verdict = {True: "exact", False: "not exact", None: "exactness not probed"}[llm.exact]
    n, speedup = oracle_speedup(llm.drafter.policy.cost)
    return (f"verification {verdict}, drafts of up to {llm.drafter.max_draft} tokens; verify-cost curve: "
            f"{len(llm.drafter.policy.cost)} sizes, an always-right drafter's ceiling x{speedup:.2f} at {n} tokens a step")


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
        llm._engine.step.shared_exact = True
    return True
