"""Doctor reports and measurements written out by hand, for the doctor's advice without a model."""

from __future__ import annotations

from dataclasses import asdict

from plookup.measure.settings import Settings


def config(invariant: bool, ceiling: float, prompt=230.0, decode=95.0, best_n=12, **settings) -> dict:
    rows = dict(single_rows=(135, 135) if invariant else (15, 135), branch_rows=(13, 130), max_delta=0.6)
    return dict(settings=asdict(Settings(**settings)), invariant=invariant, ceiling=ceiling, best_n=best_n,
                prompt_tps=prompt, decode_tps=decode, summary="single 15/135 rows, two-branch 13/130", **rows)


def report(*configs, llamafile=True, **extra) -> dict:
    return dict(llamafile=llamafile, configs=list(configs), **extra)


def measured_backend(pays: bool, host=(0.50, 1.00), backend=(0.49, 0.90)) -> dict:
    """A config's backend_sampling: wall ms per token, no draft and drafting."""
    cases = lambda ms: {"no draft": {"ms_per_token": ms[0]}, "drafting": {"ms_per_token": ms[1]}}  # noqa: E731
    return dict(host=cases(host), backend=cases(backend), pays=pays)
