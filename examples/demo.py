"""plookup in one minute (`make demo`): a real code edit with plain llama.cpp decoding, with
plookup, and with plookup given the code as a Predicted Output, timed side by side, and checked.

    python examples/demo.py [MODEL]      # MODEL: a GGUF file or a name of `plookup models list`

The bundled SmolLM2-135M is asked to rename a parameter of a short standard-library function. It
copies the function back without the rename, and the check says so (greedy, 2026-11-30): the
timing shows plookup's speed on a copy; `make demo MODEL=qwen-coder-0.5b` asks a code model.
"""

from __future__ import annotations

import inspect
import textwrap

from speed import check_rename, compare, model_from_argv

SOURCE = textwrap.dedent(inspect.getsource(textwrap.indent))
OLD, NEW = "predicate", "keep_line"


def main() -> None:
    task = f"Rename the parameter `{OLD}` to `{NEW}` everywhere in this function. Reply with the whole function only."
    messages = [{"role": "user", "content": f"{task}\n\n```python\n{SOURCE}```"}]
    print(task, "\n")
    reply = compare(messages, prediction=SOURCE, max_tokens=600, n_ctx=4096, model=model_from_argv())
    print("\n--- plookup's answer ---\n" + reply + "\n")
    check_rename(SOURCE, reply, OLD, NEW)


if __name__ == "__main__":
    main()
