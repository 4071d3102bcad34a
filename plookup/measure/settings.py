"""The runtime settings that change which kernels a verify batch runs, how a model is loaded with
them, and those ``plookup doctor`` found exact for a model: its report, kept per model and build
(:mod:`plookup.measure.cache`), from which plookup.Llama takes its settings.

Kernels found to round a batch otherwise than single-token decoding (:mod:`plookup.measure.exactness`)
in this llama.cpp (x86, AVX2):

- llamafile's tinyBLAS, for batches of Q8_0, Q4_0, Q5_0 and F16 weights (the build flag
  ``-DGGML_LLAMAFILE=OFF`` turns it off: ``make EXACT=1``);
- the "tiled" K-quant kernel, for batches of 8 or more tokens on q4_K/q5_K/q6_K/... weights that are
  not repacked (``GGML_CPU_TILED_MM=0`` in the environment turns it off; ggml reads it once per
  process, at the first matrix product);
- weight repacking (``llama_model_params.use_extra_bufts``): the repacked q4_K gemm used for
  batches of 4 or more rounds per sub-block, its gemv once per block.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass
from typing import Iterator, Optional

import llama_cpp
import llama_cpp.llama_cpp as llama_cpp_lib

from .cache import cache_path, digest, keep, read_cached

TILED_ENV = "GGML_CPU_TILED_MM"


@dataclass(frozen=True)
class Settings:
    """The runtime settings that change which kernels a verify batch runs."""

    repack: bool = True  # llama_model_params.use_extra_bufts
    tiled: bool = True  # GGML_CPU_TILED_MM
    flash_attn: bool = False

    def label(self) -> str:
        off = [name for name, on in (("repacking", self.repack), ("tiled K-quant kernel", self.tiled)) if not on]
        parts = ["flash attention on" if self.flash_attn else "flash attention off"]
        parts += [f"{name} off" for name in off]
        return ", ".join(parts)


# What `plookup doctor` measures: llama_cpp's defaults first.
SETTINGS_TO_PROBE = (
    Settings(),
    Settings(flash_attn=True),
    Settings(repack=False),
    Settings(tiled=False),
    Settings(repack=False, tiled=False),
)


def tiled_from_environment() -> bool:
    value = os.environ.get(TILED_ENV)
    return value is None or value.strip() not in ("0",)


@contextlib.contextmanager
def model_params(repack: bool, devices: Optional[int] = None) -> Iterator[None]:
    """Load models with ``use_extra_bufts = repack`` inside the block, and with `devices` (the
    address of a NULL-terminated ggml_backend_dev_t array, see plookup.api.rpc) when given
    (llama_cpp.Llama builds its llama_model_params from llama_model_default_params() and has no
    argument for either field)."""
    original = llama_cpp_lib.llama_model_default_params

    def patched():
        params = original()
        params.use_extra_bufts = repack
        if devices is not None:
            params.devices = devices
        return params

    llama_cpp_lib.llama_model_default_params = patched
    try:
        yield
    finally:
        llama_cpp_lib.llama_model_default_params = original


LLAMAFILE_FLAG = "LLAMAFILE = 1 | "  # in llama.cpp's system info when built with llamafile


def llamafile_in_build() -> bool:
    return LLAMAFILE_FLAG in llama_cpp.llama_print_system_info().decode()


# -- what the doctor measured, kept per model and build: plookup.Llama reads the settings from it


def report_path(model_path: str, llamafile: Optional[bool] = None):
    """Where `plookup doctor`'s report for this model file and build is kept: this process's
    build, or the same one with (or without) llamafile, the difference `make EXACT=1` makes."""
    stat = os.stat(model_path)
    features = llama_cpp.llama_print_system_info().decode().replace(LLAMAFILE_FLAG, "")
    llamafile = llamafile_in_build() if llamafile is None else llamafile
    key = [os.path.abspath(model_path), stat.st_size, stat.st_mtime_ns, llama_cpp.__version__, features, llamafile]
    return cache_path("doctor", digest(key))


def load_report(model_path: str, llamafile: Optional[bool] = None) -> Optional[dict]:
    try:
        path = report_path(model_path, llamafile)
    except OSError:  # the model file is gone: no report of it
        return None
    return read_cached(path)


def save_report(model_path: str, report: dict) -> None:
    keep(report_path(model_path), report, indent=1)


def recommended_settings(model_path: str) -> Optional[Settings]:
    """The settings under which the doctor found this model's verify batches exact in this build,
    the fastest such; None when it has not run or found none."""
    report = load_report(model_path)
    exact = exact_setting(report["configs"]) if report else None
    return Settings(**exact["settings"]) if exact else None


def exact_setting(configs: list[dict]) -> Optional[dict]:
    """The fastest measured setting (by ceiling) whose verify batches are invariant, or None."""
    invariant = [c for c in configs if c["invariant"]]
    return max(invariant, key=lambda c: c["ceiling"]) if invariant else None


def recommended_backend_sampling(model_path: str, settings: Optional[Settings]) -> bool:
    """Whether the doctor found greedy rows faster sampled on the backend for this model and
    build, under `settings` (those the model loads with; None: llama_cpp's defaults)."""
    report = load_report(model_path)
    wanted = asdict(settings if settings is not None else Settings())
    config = next((c for c in report["configs"] if c["settings"] == wanted), None) if report else None
    return bool(config and config.get("backend_sampling", {}).get("pays"))
