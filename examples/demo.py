"""plookup in one minute (`make demo`): a real code edit with plain llama.cpp decoding, with
plookup, and with plookup given the code as a Predicted Output, timed side by side, and checked.

    python examples/demo.py [MODEL]      # MODEL: a GGUF file or a name of `plookup models list`

Models this small perform few edits, and which ones depends on the model and the wording, so each
gets one it was seen to perform (greedy, 2026-11-30, the portable build). The bundled SmolLM2-135M
deletes the docstring of `string.capwords` (it got that right for 2 of 12 standard-library
functions, and renamed a parameter in none of 6); any other model, e.g. `qwen-coder-0.5b`, renames
`predicate` in `textwrap.indent` (Qwen2.5-Coder-0.5B with this wording: done; with "Reply with the
whole function only" added: not). `examples/code_edit.py` renames across a whole file.
"""

from __future__ import annotations

import inspect
import re
import string
import sys
import textwrap
from typing import Callable

from speed import check_edit, check_rename, compare, model_from_argv


def delete_docstring() -> tuple[str, str, Callable[[str], bool]]:
    source = textwrap.dedent(inspect.getsource(string.capwords))
    expected = re.sub(r'    """.*?"""\n', "", source, count=1, flags=re.S)  # the docstring's lines only
    task = "Remove the docstring from this function and reply with the function only:"
    return task, source, lambda reply: check_edit(expected, reply, "the docstring removed")


def rename() -> tuple[str, str, Callable[[str], bool]]:
    source = textwrap.dedent(inspect.getsource(textwrap.indent))
    old, new = "predicate", "keep_line"
    return f"Rename `{old}` to `{new}` everywhere in this code:", source, lambda reply: check_rename(source, reply, old, new)


def main() -> None:
    bundled = len(sys.argv) < 2 or sys.argv[1] == "smollm2"
    task, source, check = delete_docstring() if bundled else rename()
    messages = [{"role": "user", "content": f"{task}\n\n```python\n{source}```"}]
    print(task, "\n")
    reply = compare(messages, prediction=source, max_tokens=600, n_ctx=4096, model=model_from_argv())
    print("\n--- plookup's answer ---\n" + reply + "\n")
    check(reply)


if __name__ == "__main__":
    main()
