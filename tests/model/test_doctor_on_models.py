"""The doctor on a real model: a cached report sets plookup's runtime settings, tensor types, the whole command."""

from __future__ import annotations

import json

import pytest

import plookup
from plookup.app import doctor
from plookup.measure.costs import curve_sizes
from plookup.measure.exactness import EXACT_MIN_ROWS
from plookup.measure.settings import (
    Settings,
    exact_setting,
    recommended_backend_sampling,
    recommended_settings,
    save_report,
)

from conftest import LLAMA_KWARGS
from support.doctor_reports import config, measured_backend, report
from support.threads import THREADS


def test_a_cached_report_sets_plookups_runtime_settings(model_path, tmp_path, monkeypatch):
    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    path = model_path["smollm2"]
    assert recommended_settings(path) is None
    save_report(path, report(config(False, 2.2), config(True, 1.9, repack=False)))
    assert recommended_settings(path) == Settings(repack=False)
    llm = plookup.Llama(path, cost_curve=None, **LLAMA_KWARGS)
    assert llm.model_params.use_extra_bufts is False  # loaded as the doctor said
    assert plookup.Llama(path, cost_curve=None, exactness=None, **LLAMA_KWARGS).model_params.use_extra_bufts
    assert plookup.Llama(path, cost_curve=None, use_extra_bufts=True, **LLAMA_KWARGS).model_params.use_extra_bufts


def test_a_cached_report_chooses_backend_sampling(model_path, tmp_path, monkeypatch):
    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    path = model_path["smollm2"]
    assert not recommended_backend_sampling(path, None)  # no report: off
    save_report(path, report(dict(config(False, 2.2), backend_sampling=measured_backend(True)),
                             dict(config(False, 1.9, repack=False), backend_sampling=measured_backend(False))))
    assert recommended_backend_sampling(path, None) and not recommended_backend_sampling(path, Settings(repack=False))
    assert plookup.Llama(path, cost_curve=None, exactness=None, **LLAMA_KWARGS).backend_sampling is True
    assert plookup.Llama(path, cost_curve=None, exactness=None, backend_sampling=False, **LLAMA_KWARGS).backend_sampling is False


def test_tensor_types_and_file_type(model_path):
    types = doctor.tensor_types(model_path["smollm2"])
    assert types == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    assert doctor.file_type(types) == "Q4_1"


# The command's verify batches: up to 17 rows, the rows its exactness verdict is decided on
# (EXACT_MIN_ROWS), as with the default 65; the probe of all 65 rows is test_exact.py's
# test_the_probe_tells_the_builds_apart, and each model load's (cached_invariance).
MAX_DRAFT = EXACT_MIN_ROWS - 1
# Two of the doctor's five settings, each measured in a process of its own as the five are (one
# loop): llama.cpp's defaults and llamafile's tiling off, the one that can be exact in the default
# build, so that across the two builds the advice meets a verdict of each kind. All five took 276 s
# of the exact leg (a setting 47-55 s: the slot probe 17 s, the curve 10 s, backend sampling 10 s).
SETTINGS = (Settings(), Settings(tiled=False))


@pytest.mark.exact_build
@pytest.mark.slow
@pytest.mark.budget(150)
def test_doctor_command_on_smollm2(tmp_path, monkeypatch, capsys):
    """The whole command: every setting measured in a process of its own, a report, advice."""
    from plookup.app import cli

    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    assert set(SETTINGS) <= set(doctor.SETTINGS_TO_PROBE)
    monkeypatch.setattr(doctor, "SETTINGS_TO_PROBE", SETTINGS)
    out = tmp_path / "doctor.json"
    args = ["doctor", "--threads", str(THREADS), "--n-ctx", "1024", "--max-draft", str(MAX_DRAFT), "--json", str(out)]
    assert cli.main(args) == 0
    saved = json.loads(out.read_text())
    assert [Settings(**c["settings"]) for c in saved["configs"]][0] == Settings()
    assert saved["max_n"] == MAX_DRAFT + 1
    assert len(saved["configs"]) == len(SETTINGS) and all(len(c["cost"]) == MAX_DRAFT + 1 for c in saved["configs"])
    assert all(c["single_rows"][1] == sum(curve_sizes(MAX_DRAFT + 1)[1:]) for c in saved["configs"])
    assert saved["advice"] and "advice:" in capsys.readouterr().out
    assert all(set(c["backend_sampling"]) == {"host", "backend", "pays"} for c in saved["configs"])
    assert any(line.startswith("greedy rows ") for line in saved["advice"])
    assert recommended_settings(saved["model"]) == (
        Settings(**exact_setting(saved["configs"])["settings"]) if exact_setting(saved["configs"]) else None
    )
