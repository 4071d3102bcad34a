"""The bench's host time (plookup.app.bench.host): decodes counted once each, the parts adding up."""

from __future__ import annotations

import pytest

from plookup.app.bench.host import PARTS, host_microseconds
from plookup.app.bench.systems import LocalSystem

COPY = list(range(300, 340)) * 3  # a prompt that repeats: plookup drafts its continuation


@pytest.mark.parametrize("which", ["plain", "plookup"])
def test_every_decode_is_timed_once_and_the_parts_add_up(model_pair, which):
    name, plain, llm = model_pair
    system = LocalSystem(which, plain if which == "plain" else llm)
    record = system.run(COPY, 24)
    tokens = len(record["tokens"])
    # The prompt's last token is decoded with the generation; every later decode is a step.
    passes = tokens if which == "plain" else record["forward_passes"]
    assert record["decodes"] == passes, name
    if which == "plookup":
        assert record["decodes"] < tokens, name  # it drafted: fewer decodes than tokens
        assert record["sampler"] == "argmax"
    assert 0 < record["decode_s"] < record["total_s"] - record["prefill_s"]
    parts = sum(record[f"host_{p}_s"] for p in PARTS)
    assert parts == pytest.approx(record["host_s"], rel=1e-6, abs=1e-9)
    assert record["host_sample_s"] > 0  # plain: llama_cpp's sample; plookup: its rows
    us = host_microseconds([record], "decode")
    assert us["host"] == pytest.approx(1e6 * record["host_s"] / record["decodes"])
