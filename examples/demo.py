"""plookup in one minute (`make demo`): a real code edit with plain llama.cpp decoding, with
plookup, and with plookup given the code as a Predicted Output, timed side by side.

    python examples/demo.py [MODEL.gguf]

The bundled SmolLM2-135M is asked to rename a variable in the standard library's textwrap.dedent.
"""

from __future__ import annotations

import random

from speed import compare

from plookup.bench.workloads import code_edit, function_source


def main() -> None:
    workload = code_edit("textwrap", "dedent", "rename", random.Random(0))
    print(workload.messages[0]["content"].split("\n")[0], "\n")
    reply = compare(workload.messages, prediction=function_source("textwrap", "dedent"), max_tokens=400, n_ctx=4096)
    print("\n--- plookup's answer ---\n" + reply)


if __name__ == "__main__":
    main()
