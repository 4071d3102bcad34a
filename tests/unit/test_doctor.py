"""`plookup doctor`: the advice is a function of the measured figures (tested with given curves and
verdicts, not timings), its report reaches plookup.Llama's settings, and the command runs."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

import plookup
from plookup.app import doctor
from plookup.measure.exactness import (
    Settings,
    advise,
    exact_setting,
    recommended_backend_sampling,
    recommended_settings,
    save_report,
)

from conftest import LLAMA_KWARGS


def config(invariant: bool, ceiling: float, prompt=230.0, decode=95.0, best_n=12, **settings) -> dict:
    rows = dict(single_rows=(135, 135) if invariant else (15, 135), branch_rows=(13, 130), max_delta=0.6)
    return dict(settings=asdict(Settings(**settings)), invariant=invariant, ceiling=ceiling, best_n=best_n,
                prompt_tps=prompt, decode_tps=decode, summary="single 15/135 rows, two-branch 13/130", **rows)  # fmt: skip


def report(*configs, llamafile=True, **extra) -> dict:
    return dict(llamafile=llamafile, configs=list(configs), **extra)


def test_exact_with_the_defaults():
    lines = advise(report(config(True, 2.71), config(True, 2.6, flash_attn=True)))
    assert lines[0].startswith("speculation pays here up to 2.71x")
    assert "exact with llama_cpp's default settings" in lines[1] and len(lines) == 2


def test_exact_only_with_a_setting_names_it_and_its_price():
    lines = advise(report(config(False, 2.05), config(False, 2.0, flash_attn=True),
                          config(True, 1.70, prompt=180, decode=90, repack=False, tiled=False),
                          config(True, 1.50, prompt=150, repack=False)))  # fmt: skip
    assert "exact with flash attention off, repacking off, tiled K-quant kernel off" in lines[1]
    assert "ceiling 2.05x -> 1.70x, prompt 230 -> 180 tok/s, decode 95 -> 90 tok/s" in lines[1]


def test_not_exact_in_this_build_points_at_the_exact_build():
    default = config(False, 2.71)
    assert exact_setting([default]) is None
    lines = advise(report(default))
    assert "output is not exact with this build" in lines[1]
    assert "make EXACT=1" in lines[2] and "run `plookup doctor` in that build" in lines[2]
    measured = report(config(True, 1.83, prompt=190, decode=93), llamafile=False)
    lines = advise(report(default), other_build=measured)
    assert "`make EXACT=1` makes it exact for this model" in lines[2]
    assert "ceiling 2.71x -> 1.83x, prompt 230 -> 190 tok/s" in lines[2] and "(measured)" in lines[2]
    lines = advise(report(default), other_build=report(config(False, 1.9), llamafile=False))
    assert "does not make this model exact either" in lines[2]
    # Without llamafile there is no other build to suggest.
    assert len(advise(report(default, llamafile=False))) == 2


def test_the_cheaper_quant_is_named_when_the_curves_say_so():
    lines = advise(report(config(False, 2.05), quants={"q8_0": 2.71, "q4_0": 2.16}, quant="Q4_K"))
    assert lines[-1].startswith("Q8_0 verifies cheaper than Q4_K here: ceiling 2.71x vs 2.05x")
    assert "`-m MODEL:q8_0`" in lines[-1]
    # Within 5% of this file's ceiling, no quant is worth the switch.
    assert not any("cheaper" in line for line in advise(report(config(False, 2.05), quants={"q8_0": 2.1})))


def test_no_gain_on_a_steep_curve():
    assert advise(report(config(True, 1.01, best_n=1)))[0].startswith("speculation cannot pay here")


def test_the_report_reads_as_a_table_then_advice():
    text = doctor.render(dict(
        model="m.gguf", tensor_types={"Q4_K": 97, "F32": 121}, llama_cpp_python="0.3.36", system_info="CPU : AVX2 = 1",
        threads=2, configs=[config(False, 2.05), config(True, 1.7, repack=False, tiled=False)], quants={"q8_0": 2.71},
        advice=["line one", "line two"],
    ))  # fmt: skip
    lines = text.splitlines()
    assert lines[1] == "  tensors: Q4_K 97, F32 121"
    table = lines[lines.index(next(l for l in lines if l.startswith("setting"))):]
    assert table[2].split()[:4] == ["flash", "attention", "off", "no"] and "15/135" in table[2] and "2.05x (n=12)" in table[2]
    assert "repacking off, tiled K-quant kernel off" in table[3] and " yes " in table[3] and "135/135" in table[3]
    assert "  requantized to q8_0: ceiling 2.71x" in lines and lines[-2:] == ["- line one", "- line two"]


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


def measured_backend(pays: bool, host=(0.50, 1.00), backend=(0.49, 0.90)) -> dict:
    """A config's backend_sampling: wall ms per token, no draft and drafting."""
    cases = lambda ms: {"no draft": {"ms_per_token": ms[0]}, "drafting": {"ms_per_token": ms[1]}}  # noqa: E731
    return dict(host=cases(host), backend=cases(backend), pays=pays)


def test_backend_sampling_advice_reads_the_loaded_settings_measurement():
    lines = advise(report(dict(config(True, 2.7), backend_sampling=measured_backend(True))))
    assert lines[-1] == ("greedy rows are sampled on the backend here (1.50 -> 1.39 ms per token, no draft and "
                         "drafting together); plookup.Llama does so for this model")  # fmt: skip
    # The exact setting is what plookup.Llama loads: its measurement is the one reported.
    lines = advise(report(dict(config(False, 2.7), backend_sampling=measured_backend(True)),
                          dict(config(True, 2.0, repack=False), backend_sampling=measured_backend(False, backend=(0.5, 1.0)))))  # fmt: skip
    assert lines[-1].startswith("greedy rows stay on the host: sampling them on the backend does not pay here (1.50 -> 1.50")
    assert len(advise(report(config(True, 2.7)))) == 2  # not measured (an older report): no line


def test_backend_sampling_is_judged_on_each_way_s_fastest_round(monkeypatch):
    """Rounds each way, interleaved: the slow round (interference) does not decide, and the
    backend must be BACKEND_MARGIN faster."""

    class Model:
        backend_sampling = False

    walls = iter([(14.9, 7.6), (16.0, 9.4), (27.0, 8.9), (14.6, 9.3)])  # host, backend, host, backend

    def measured(llm):
        no_draft, drafting = next(walls)
        return {"no draft": {"ms_per_token": no_draft, "backend": llm.backend_sampling},
                "drafting": {"ms_per_token": drafting}}  # fmt: skip

    monkeypatch.setattr(doctor, "measure_host", measured)
    model = Model()
    out = doctor.measure_backend_sampling(model, rounds=2)
    assert out["host"] == {"no draft": {"ms_per_token": 14.9, "backend": False}, "drafting": {"ms_per_token": 7.6}}
    assert out["backend"]["no draft"] == {"ms_per_token": 14.6, "backend": True} and out["backend"]["drafting"]["ms_per_token"] == 9.3
    assert out["pays"] is False and model.backend_sampling is False  # 22.5 against 23.9 ms; put back
    # A median (here the mean) of the same rounds would have found the backend faster:
    assert (14.9 + 27.0) / 2 + (7.6 + 8.9) / 2 > (16.0 + 14.6) / 2 + (9.4 + 9.3) / 2
    for backend, pays in ((0.97, False), (0.94, True)):  # the backend 3% and 6% faster
        walls = iter([(10.0, 5.0), (10.0 * backend, 5.0 * backend)])
        assert doctor.measure_backend_sampling(model, rounds=1)["pays"] is pays


def test_a_cached_report_chooses_backend_sampling(model_path, tmp_path, monkeypatch):
    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    path = model_path["smollm2"]
    assert not recommended_backend_sampling(path, None)  # no report: off
    save_report(path, report(dict(config(False, 2.2), backend_sampling=measured_backend(True)),
                             dict(config(False, 1.9, repack=False), backend_sampling=measured_backend(False))))  # fmt: skip
    assert recommended_backend_sampling(path, None) and not recommended_backend_sampling(path, Settings(repack=False))
    assert plookup.Llama(path, cost_curve=None, exactness=None, **LLAMA_KWARGS).backend_sampling is True
    assert plookup.Llama(path, cost_curve=None, exactness=None, backend_sampling=False, **LLAMA_KWARGS).backend_sampling is False


def test_tensor_types_and_file_type(model_path):
    types = doctor.tensor_types(model_path["smollm2"])
    assert types == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    assert doctor.file_type(types) == "Q4_1"


@pytest.mark.slow
@pytest.mark.budget(300)
def test_doctor_command_on_smollm2(tmp_path, monkeypatch, capsys):
    """The whole command: every setting measured in a process of its own, a report, advice."""
    from plookup.app import cli

    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    out = tmp_path / "doctor.json"
    assert cli.main(["doctor", "--threads", "2", "--n-ctx", "1024", "--json", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert [Settings(**c["settings"]) for c in saved["configs"]][0] == Settings()
    assert len(saved["configs"]) == 5 and all(len(c["cost"]) == 16 for c in saved["configs"])
    assert saved["advice"] and "advice:" in capsys.readouterr().out
    assert all(set(c["backend_sampling"]) == {"host", "backend", "pays"} for c in saved["configs"])
    assert any(line.startswith("greedy rows ") for line in saved["advice"])
    assert recommended_settings(saved["model"]) == (
        Settings(**exact_setting(saved["configs"])["settings"]) if exact_setting(saved["configs"]) else None
    )
