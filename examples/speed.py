"""Shared by the examples: one greedy chat request three ways, timed end to end (prefill included),
and a check that an edit was carried out.

llama_cpp.Llama is the yardstick; plookup.Llama drafts from the prompt and its own output; with a
prediction it also drafts from the text the caller expects the answer to repeat.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import time

import llama_cpp

import plookup
from plookup.app.models import resolve_model


def timed_chat(llm: llama_cpp.Llama, messages: list[dict], max_tokens: int, **extra) -> tuple[dict, float]:
    llm.reset()  # no run reuses another's prefilled prompt
    start = time.perf_counter()
    result = llm.create_chat_completion(messages, max_tokens=max_tokens, temperature=0.0, **extra)
    return result, time.perf_counter() - start


def model_from_argv(default: str | None = None) -> str:
    """The model the script's argument names (a GGUF path or a name of `plookup models list`)."""
    return resolve_model(sys.argv[1] if len(sys.argv) > 1 else default)


def compare(messages: list[dict], prediction: str, max_tokens: int, n_ctx: int, model: str) -> str:
    """Print tokens, seconds and speed-up of each way; return the reply with the prediction."""
    kwargs = dict(n_ctx=n_ctx, n_threads=os.cpu_count(), n_threads_batch=os.cpu_count(), verbose=False)
    print(f"model: {os.path.basename(model)}")
    plain, fast = llama_cpp.Llama(model, **kwargs), plookup.Llama(model, **kwargs)
    runs = [
        ("llama_cpp.Llama", *timed_chat(plain, messages, max_tokens)),
        ("plookup.Llama", *timed_chat(fast, messages, max_tokens)),
        ("plookup.Llama + prediction", *timed_chat(fast, messages, max_tokens, prediction=prediction)),
    ]
    baseline = runs[0][2]
    print(f"prompt: {runs[0][1]['usage']['prompt_tokens']} tokens")
    for name, result, seconds in runs:
        usage = result["usage"]
        line = (
            f"{name:28} {usage['completion_tokens']:5d} tokens in {seconds:6.2f} s "
            f"({usage['completion_tokens'] / seconds:6.1f} tok/s, x{baseline / seconds:.2f})"
        )
        if "speculative" in usage:
            line += f", {usage['speculative']['forward_passes']} forward passes"
        if "completion_tokens_details" in usage:
            line += f", {usage['completion_tokens_details']['accepted_prediction_tokens']} prediction tokens accepted"
        print(line)
    replies = [result["choices"][0]["message"]["content"] for _, result, _ in runs]
    for (name, _, _), reply in zip(runs[1:], replies[1:]):
        if reply != replies[0]:
            # Batched and single-token kernels round differently: a near-tie may go the other way
            # (`plookup doctor` says whether this model and build are exact).
            same = next(i for i, (a, b) in enumerate(zip(reply + "\0", replies[0] + "\0")) if a != b)
            print(f"{name} differs from llama_cpp.Llama after {same} identical characters")
    return replies[-1]


def code_of(reply: str) -> str:
    """The code in a reply: its first fenced block, else the reply itself."""
    block = re.search(r"```[a-zA-Z]*\n(.*?)```", reply, re.S)
    return block.group(1) if block else reply


def check_edit(expected: str, reply: str, what: str) -> bool:
    """Print whether the code in the reply is `expected` (blank lines at its ends aside), and how not."""
    diff = difflib.unified_diff(expected.strip().splitlines(), code_of(reply).strip().splitlines(), lineterm="", n=0)
    other = [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    print(f"the edit ({what}): {'done, nothing else changed' if not other else f'NOT done as asked, {len(other)} lines differ'}")
    for line in other[:6]:
        print(f"    {line}")
    return not other


def check_rename(source: str, reply: str, old: str, new: str) -> bool:
    """Print whether the reply is `source` with every `old` renamed `new` and nothing else changed."""
    word = re.compile(rf"\b{re.escape(old)}\b")
    got = code_of(reply)
    left, renamed = len(word.findall(got)), got.count(new)
    return check_edit(word.sub(new, source), reply, f"{renamed} x `{new}`, {left} x `{old}` left")
