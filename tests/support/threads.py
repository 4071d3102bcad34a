"""Generations run from threads of their own."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor


def run_concurrently(llm, prompts, generate):
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        return list(pool.map(generate, prompts))
