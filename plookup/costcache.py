"""The verify-cost curve of a loaded model, measured once per model file and settings, kept on disk.

Measuring takes a few seconds (16 batch sizes, several repeats); the curve depends on the model,
the thread counts and the batch settings, not on the prompt, so it is cached in
``$PLOOKUP_CACHE_DIR`` (default ``~/.cache/plookup``) under a key made of those.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import llama_cpp
import numpy as np

from .costcurve import measure_cost_curve


def cache_dir() -> Path:
    return Path(os.environ.get("PLOOKUP_CACHE_DIR", Path.home() / ".cache" / "plookup"))


def curve_key(llm: llama_cpp.Llama) -> str:
    stat = os.stat(llm.model_path)
    params = llm.context_params
    settings = [
        os.path.abspath(llm.model_path), stat.st_size, stat.st_mtime_ns,
        params.n_threads, params.n_threads_batch, params.n_batch, params.n_ubatch,
        int(params.flash_attn_type), params.type_k, params.type_v, llm.model_params.n_gpu_layers,
        llama_cpp.llama_print_system_info().decode(),
    ]  # fmt: skip
    return hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]


def cached_cost_curve(llm: llama_cpp.Llama) -> np.ndarray:
    """The curve for `llm`, from the cache or measured now (which resets `llm`'s context)."""
    path = cache_dir() / "cost-curves" / f"{curve_key(llm)}.json"
    try:
        return np.asarray(json.loads(path.read_text())["cost"], dtype=np.float64)
    except (OSError, ValueError, KeyError):
        pass
    cost = measure_cost_curve(llm)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"model": llm.model_path, "cost": cost.tolist()}))
    tmp.replace(path)  # atomic: concurrent processes never read half a file
    return cost
