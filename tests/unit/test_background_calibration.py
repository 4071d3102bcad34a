"""plookup.Llama(calibration="background") without a model: what calibrate decides from the cache
(cached: applied at once; missing: no drafts, pending), the figures taking over once cached, the
measuring process's context and its deadline, and the gate's idle hook the server switches in."""

from __future__ import annotations

import subprocess
import time
from types import SimpleNamespace

import anyio
import numpy as np
import pytest

from plookup.api import measured
from plookup.api.measured import calibrate, take_over
from plookup.draft.drafters import make_drafter
from plookup.measure import costs, exactness
from plookup.api.background import Measurement, measuring_n_ctx, spec_of
from plookup.measure.exactness import Invariance, RowCheck

CURVE = np.linspace(1.0, 3.0, 65)
EXACT_TO = 33  # verify batches found exact up to this many rows


class Calls(list):
    """The measurements made, in order; `curve_rows`: the rows each curve was measured up to."""

    def __init__(self):
        super().__init__()
        self.curve_rows = []


@pytest.fixture
def probes(tmp_path, monkeypatch):
    """An empty cache, keys without a model file, and the probes faked and counted."""
    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    for module in (costs, exactness):
        monkeypatch.setattr(module, "curve_key", lambda llm, max_n=65: f"key{max_n}")
    calls = Calls()

    def probe(llm, max_n):
        calls.append("exactness")
        return Invariance([RowCheck(n, False, n if n <= EXACT_TO else n - 1, n, 0.0) for n in (2, 17, 33, 65)])

    def curve(llm, max_n):
        calls.append("curve")
        calls.curve_rows.append(max_n)
        return CURVE[:max_n]

    monkeypatch.setattr(exactness, "probe_invariance", probe)
    monkeypatch.setattr(costs, "measure_cost_curve", curve)
    return calls


def fake_llm():
    """What calibrate reads and sets on a plookup.Llama: one slot, one unified cache."""
    drafter = make_drafter("suffix", 64)
    drafter.warm_up = lambda: None
    return SimpleNamespace(model_path="model.gguf", can_roll_back=True, drafter=drafter, parallel=1, exact=None,
                           context_params=SimpleNamespace(kv_unified=True),
                           _engine=SimpleNamespace(step=SimpleNamespace(shared_exact=False)))


def test_missing_figures_mean_no_drafts_and_pending_until_they_are_cached(probes):
    llm = fake_llm()
    calibrate(llm, "auto", "auto", False, "background", load={"model_path": "model.gguf"})
    assert probes == []  # nothing measured here
    assert llm.drafter.max_draft == 0 and llm.exact is None
    assert llm.calibration_pending is not None and llm.calibration_pending.missing.startswith("exactness")
    assert llm.calibration_pending.max_draft == 64 and llm.calibration_pending.load == {"model_path": "model.gguf"}
    assert take_over(llm) is None and llm.drafter.max_draft == 0  # still missing: still safe

    calibrate(fake_llm(), "auto", "auto", False)  # a blocking load (the measuring process's) caches them
    assert probes == ["exactness", "curve"]
    line = take_over(llm)
    assert llm.calibration_pending is None and probes == ["exactness", "curve"]  # read, not measured again
    assert llm.exact is True and llm.drafter.max_draft == EXACT_TO - 1 and not llm.drafter.branches
    # measured up to the rows a step holds once the verdict has bounded the drafts, no further
    assert probes.curve_rows == [EXACT_TO]
    np.testing.assert_allclose(llm.drafter.policy.cost, CURVE[:EXACT_TO])
    assert f"drafts of up to {EXACT_TO - 1} tokens" in line and "verification exact" in line
    assert "x" in line.split("ceiling")[1]


def test_cached_figures_apply_at_once(probes):
    calibrate(fake_llm(), "auto", "auto", False)
    llm = fake_llm()
    calibrate(llm, "auto", "auto", False, "background")
    assert llm.calibration_pending is None and probes == ["exactness", "curve"]
    assert llm.exact is True and llm.drafter.max_draft == EXACT_TO - 1
    np.testing.assert_allclose(llm.drafter.policy.cost, CURVE[:EXACT_TO])


def test_one_figure_of_two_cached_still_means_no_drafts(probes, monkeypatch):
    blocking = fake_llm()
    calibrate(blocking, "auto", None, False)  # the exactness verdict only
    llm = fake_llm()
    calibrate(llm, "auto", "auto", False, "background")
    assert llm.calibration_pending.missing == "verify-cost curve"
    assert llm.drafter.max_draft == 0 and llm.exact is None and llm.drafter.branches  # nothing half applied
    assert take_over(llm, measure=True) is not None  # measured here, as a blocking load would
    assert probes == ["exactness", "curve"] and llm.drafter.max_draft == EXACT_TO - 1


def test_the_blocking_default_measures_at_load(probes):
    llm = fake_llm()
    calibrate(llm, "auto", "auto", False)
    assert llm.calibration_pending is None and probes == ["exactness", "curve"]
    with pytest.raises(ValueError, match="calibration must be one of"):
        measured.check_calibration("later")


def test_the_measuring_context_fits_the_measurements_and_keeps_the_keys():
    # llama_cpp caps n_batch (a key) by n_ctx: the context is at least n_batch
    assert measuring_n_ctx(8192, 2048, 64, 1) == 2048
    assert measuring_n_ctx(8192, 512, 64, 1) == 768  # 2 * 65 probe rows behind 2 * 256 tokens
    assert measuring_n_ctx(8192, 512, 64, 4) == 768
    assert measuring_n_ctx(600, 512, 64, 1) == 600  # never more than the server's
    assert measuring_n_ctx(0, 512, 64, 1) == 768  # 0: the model's own, which is larger


def test_a_curve_is_measured_up_to_the_rows_a_step_verifies():
    assert costs.curve_rows(64) == 65 and costs.curve_rows(8) == 9  # one slot: a draft and its pending token
    assert costs.curve_rows(16, 4) == 68 and costs.curve_rows(64, 4) == costs.MAX_MEASURED_ROWS


def test_what_the_measuring_process_loads():
    pending = measured.Pending("auto", "auto", False, 64, True, load=dict(
        model_path="m.gguf", args=[], parallel=2, use_extra_bufts=None,
        kwargs=dict(n_ctx=8192, n_batch=1024, n_ubatch=1024, n_threads=2, flash_attn="auto", verbose=True)))
    spec = spec_of(pending, quiet=True)
    assert spec["kwargs"] == dict(n_ctx=1024, n_batch=1024, n_ubatch=1024, n_threads=2, flash_attn="auto",
                                  verbose=False, backend_sampling=False)
    assert (spec["max_draft"], spec["parallel"], spec["exactness"], spec["cost_curve"]) == (64, 2, "auto", "auto")
    rpc = measured.Pending("auto", "auto", False, 64, True, load=dict(pending.load, kwargs={"rpc_servers": ["h:1"]}))
    assert spec_of(rpc, quiet=True) is None  # an RPC server serves one client: measured at load instead


def test_a_measurement_runs_until_its_deadline_not_counting_its_pauses():
    measurement = Measurement({}, deadline=0.6)
    measurement._started = time.monotonic()
    measurement.process = subprocess.Popen(["sleep", "30"])
    measurement.pause()
    time.sleep(0.8)
    assert measurement.running_s() < 0.1  # stopped: not running, not counted
    assert measurement.process.poll() is None
    measurement.resume()
    start = time.monotonic()
    assert measurement.wait(every_s=0.05) is False and measurement.gave_up
    assert 0.5 < time.monotonic() - start < 3 and measurement.process.returncode is not None


def test_the_gate_calls_its_hook_when_the_model_turns_busy_and_idle():
    from plookup.app.serve.guards import ModelGate

    async def run():
        gate = ModelGate(max_queue=4, slots=2)
        seen = []
        gate.on_busy = lambda busy: seen.append((busy, gate.held, gate._slot.value))
        await gate.enter()
        await gate.enter()
        gate.leave()
        gate.leave()  # idle inside the hook: no slot handed on yet
        await gate.enter()
        gate.leave()
        return seen

    assert anyio.run(run) == [(True, 1, 1), (False, 0, 1), (True, 1, 1), (False, 0, 1)]
