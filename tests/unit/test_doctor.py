"""`plookup doctor`: the advice is a function of the measured figures (tested with given curves and
verdicts, not timings). Its report reaching plookup.Llama's settings, and the whole command:
tests/model/test_doctor_on_models.py."""

from __future__ import annotations

import json
from dataclasses import asdict

from plookup.app import doctor
from plookup.app.doctor import advise
from plookup.measure import speeds
from plookup.measure.settings import exact_setting

from support.doctor_reports import config, measured_backend, report


def test_exact_with_the_defaults():
    lines = advise(report(config(True, 2.71), config(True, 2.6, flash_attn=True)))
    assert lines[0].startswith("speculation pays here up to 2.71x")
    assert "exact with llama_cpp's default settings" in lines[1] and len(lines) == 2


def test_exact_only_with_a_setting_names_it_and_its_price():
    lines = advise(report(config(False, 2.05), config(False, 2.0, flash_attn=True),
                          config(True, 1.70, prompt=180, decode=90, repack=False, tiled=False),
                          config(True, 1.50, prompt=150, repack=False)))
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
    ))
    lines = text.splitlines()
    assert lines[1] == "  tensors: Q4_K 97, F32 121"
    table = lines[lines.index(next(l for l in lines if l.startswith("setting"))):]
    assert table[2].split()[:4] == ["flash", "attention", "off", "no"] and "15/135" in table[2] and "2.05x (n=12)" in table[2]
    assert "repacking off, tiled K-quant kernel off" in table[3] and " yes " in table[3] and "135/135" in table[3]
    assert "  requantized to q8_0: ceiling 2.71x" in lines and lines[-2:] == ["- line one", "- line two"]


def test_backend_sampling_advice_reads_the_loaded_settings_measurement():
    lines = advise(report(dict(config(True, 2.7), backend_sampling=measured_backend(True))))
    assert lines[-1] == ("greedy rows are sampled on the backend here (1.50 -> 1.39 ms per token, no draft and "
                         "drafting together); plookup.Llama does so for this model")
    # The exact setting is what plookup.Llama loads: its measurement is the one reported.
    lines = advise(report(dict(config(False, 2.7), backend_sampling=measured_backend(True)),
                          dict(config(True, 2.0, repack=False), backend_sampling=measured_backend(False, backend=(0.5, 1.0)))))
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
                "drafting": {"ms_per_token": drafting}}

    monkeypatch.setattr(speeds, "measure_host", measured)
    model = Model()
    out = speeds.measure_backend_sampling(model, rounds=2)
    assert out["host"] == {"no draft": {"ms_per_token": 14.9, "backend": False}, "drafting": {"ms_per_token": 7.6}}
    assert out["backend"]["no draft"] == {"ms_per_token": 14.6, "backend": True} and out["backend"]["drafting"]["ms_per_token"] == 9.3
    assert out["pays"] is False and model.backend_sampling is False  # 22.5 against 23.9 ms; put back
    # A median (here the mean) of the same rounds would have found the backend faster:
    assert (14.9 + 27.0) / 2 + (7.6 + 8.9) / 2 > (16.0 + 14.6) / 2 + (9.4 + 9.3) / 2
    for backend, pays in ((0.97, False), (0.94, True)):  # the backend 3% and 6% faster
        walls = iter([(10.0, 5.0), (10.0 * backend, 5.0 * backend)])
        assert speeds.measure_backend_sampling(model, rounds=1)["pays"] is pays


def test_the_command_measures_batches_up_to_its_max_draft(tmp_path, monkeypatch, capsys):
    """--max-draft N: every setting (and requantization) measured up to N + 1 rows; the default is
    drafts' own bound, and a doctor without draft tokens to verify is refused."""
    from plookup.app import cli
    from plookup.measure.costs import DEFAULT_MAX_N

    monkeypatch.setenv("PLOOKUP_CACHE_DIR", str(tmp_path))
    asked = []

    def measured(path, settings, threads, n_ctx, max_n, load=None):
        asked.append(max_n)
        return dict(config(True, 2.0, **asdict(settings)), cost=[1.0] * max_n)

    monkeypatch.setattr(doctor, "in_fresh_process", measured)
    monkeypatch.setattr(doctor, "tensor_types", lambda path: {"Q4_1": 1})
    monkeypatch.setattr(doctor, "quantized_path", lambda path, quant: path)
    assert cli.main(["doctor", "--max-draft", "8", "--quants", "q8_0", "--json", str(tmp_path / "r.json")]) == 0
    assert asked == [9] * 6 and json.loads((tmp_path / "r.json").read_text())["max_n"] == 9
    asked.clear()
    assert cli.main(["doctor"]) == 0 and asked == [DEFAULT_MAX_N] * 5
    assert cli.main(["doctor", "--max-draft", "0"]) == 1 and not asked[5:]
    assert "--max-draft" in capsys.readouterr().err


def test_the_doctors_settings_apply_at_load_where_flash_attention_is_left_to_plookup(monkeypatch):
    """A model the doctor measured exact with flash attention off and the tiled kernel off loads so
    where flash_attn is not given or "auto" (serve's default); a bool given wins, and the tiled
    kernel's setting applies either way."""
    from plookup.api import load
    from plookup.measure.settings import TILED_ENV, Settings

    monkeypatch.setattr(load, "recommended_settings", lambda path: Settings(flash_attn=False, tiled=False))
    monkeypatch.setenv(TILED_ENV, "1")  # (so that the test's end restores the environment it found)
    for given, expected in ((None, False), ("auto", False), (True, True), (False, False)):
        monkeypatch.delenv(TILED_ENV)
        kwargs = {} if given is None else {"flash_attn": given}
        load.doctor_settings("model.gguf", "auto", None, kwargs)
        assert kwargs["flash_attn"] is expected and load.os.environ[TILED_ENV] == "0", given
    kwargs = {"flash_attn": "auto"}  # without the doctor's settings, auto stays llama.cpp's own
    load.doctor_settings("model.gguf", None, None, kwargs)
    assert kwargs == {"flash_attn": "auto"}
