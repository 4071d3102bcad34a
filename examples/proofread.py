"""Proofread a paragraph with the paragraph itself as the Predicted Output, next to plain llama_cpp.

    python examples/proofread.py [MODEL]      # a GGUF file or a name of `plookup models list`
"""

from __future__ import annotations

from speed import compare, model_from_argv

DRAFT = (
    "Speculative decoding lets a large languge model check several tokens in a single forward pass. "
    "A cheap drafter guesses the next few tokens, and the model keeps the longest prefix it agrees "
    "with, so the output is exactly what it would of written alone. When the answer mostly repeats "
    "text the model has allready seen, such as a document being proofread or a file being edited, "
    "the guesses are usualy right and generation runs several times faster."
)


def main() -> None:
    request = "Correct the spelling mistakes in this text and output only the corrected text:\n\n"
    messages = [{"role": "user", "content": request + DRAFT}]
    reply = compare(messages, prediction=DRAFT, max_tokens=300, n_ctx=2048, model=model_from_argv())
    print("\n" + reply)


if __name__ == "__main__":
    main()
