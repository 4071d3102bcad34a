"""Model names resolved to real files, quantizations made once."""

from __future__ import annotations

import os
from pathlib import Path

import llama_cpp
import pytest

import plookup
from plookup.app import models

from support.model_cache import cache, no_pip  # noqa: F401 (cache: a fixture)


@pytest.fixture
def qwen_in_cache(cache, monkeypatch):
    """The 0.5B model's file "present" (sparse, right size) and quantizing stubbed."""
    path = cache / "models" / models.WHEEL_MODELS["qwen-coder-0.5b"].file
    path.parent.mkdir(parents=True)
    with open(path, "wb") as f:
        f.truncate(models.WHEEL_MODELS["qwen-coder-0.5b"].size)
    quantized = []

    def fake_quantize(source, dest, quant):
        quantized.append((source, quant))
        dest.write_bytes(b"GGUF")

    monkeypatch.setattr(models, "_pip", no_pip)
    monkeypatch.setattr(models, "_quantize", fake_quantize)
    return path, quantized


def test_resolve_model_names_and_quantizations(qwen_in_cache):
    path, quantized = qwen_in_cache
    assert models.resolve_model(None) == plookup.smollm2_path()
    assert models.resolve_model("smollm2") == plookup.smollm2_path()
    assert models.resolve_model("qwen-coder-0.5b") == str(path)
    assert models.qwen_coder_path("0.5b") == str(path)

    q8 = models.resolve_model("qwen-coder-0.5b:q8_0")
    assert q8 == str(path.with_name(f"{path.stem}.q8_0.gguf"))
    assert models.resolve_model("qwen-coder-0.5b:Q4_K") == str(path.with_name(f"{path.stem}.q4_k_m.gguf"))
    assert models.qwen_coder_path("0.5b", "q8_0") == q8
    assert quantized == [(path, "q8_0"), (path, "q4_k_m")]  # each made once


@pytest.mark.parametrize("spec", ["/models/x.gguf", "x.gguf", "./dir:with:colons/x.gguf",
                                  "model.gguf:backup", "qwen-coder-7b"])
def test_resolve_model_returns_anything_else_as_a_path(spec):
    assert models.resolve_model(spec) == spec


@pytest.mark.parametrize("spec, message", [
    ("qwen-coder-0.5b:q3_x", "unknown quantization 'q3_x': known are f16, q8_0"),
    ("qwen-coder-0.5b:", "no quantization after ':'"),
    ("qwen-coder-7b:q8_0", "unknown model 'qwen-coder-7b'.*smollm2, gemma3, qwen-coder-0.5b, qwen-coder-1.5b"),
])
def test_resolve_model_refuses_unknown_combinations_before_downloading(qwen_in_cache, spec, message):
    with pytest.raises(ValueError, match=message):
        models.resolve_model(spec)
    assert qwen_in_cache[1] == []


def test_quantized_path_makes_a_q8_0_copy_once(cache, monkeypatch):
    source = Path(plookup.smollm2_path())
    q8 = models.quantized_path(source, "q8_0", progress=None)
    assert q8 == cache / "models" / "SmolLM2-135M-Instruct.Q4_1.q8_0.gguf"
    assert os.listdir(q8.parent) == [q8.name]
    llm = llama_cpp.Llama(str(q8), verbose=False, n_ctx=64)
    assert llm.metadata["general.file_type"] == str(llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0)
    assert len(llm.tokenize(b"def f(x):")) > 0
    del llm

    mtime = q8.stat().st_mtime_ns
    monkeypatch.setattr(models, "_quantize", lambda *a: pytest.fail("quantized again"))
    assert models.quantized_path(source, "q8_0", progress=None) == q8
    assert q8.stat().st_mtime_ns == mtime
