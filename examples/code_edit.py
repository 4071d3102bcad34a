"""Rename a variable across a real ~300-line file (the Python stdlib's copy.py), with and without
the file as a Predicted Output, next to plain llama_cpp.

    python examples/code_edit.py [MODEL.gguf]

The file sits in the prompt as well, so plookup drafts from it even without the prediction; the
prediction adds a second copy for the drafter to match against. The bundled SmolLM2-135M is too
small to carry out the rename (its reply drifts away from the file); name a larger GGUF model to
see the edit itself.
"""

from __future__ import annotations

import copy
import inspect

from speed import compare

OLD, NEW = "memo", "seen"


def main() -> None:
    source = inspect.getsource(copy)
    print(f"{inspect.getsourcefile(copy)}: {source.count(chr(10))} lines, {source.count(OLD)} x `{OLD}`")
    messages = [
        {"role": "system", "content": "You are a careful programmer. Reply with the complete file only."},
        {"role": "user", "content": f"Rename `{OLD}` to `{NEW}` everywhere in this file:\n\n{source}"},
    ]
    reply = compare(messages, prediction=source, max_tokens=3000, n_ctx=8192)
    print(f"reply: {reply.count(chr(10))} lines, {reply.count(OLD)} x `{OLD}`, {reply.count(NEW)} x `{NEW}`")


if __name__ == "__main__":
    main()
