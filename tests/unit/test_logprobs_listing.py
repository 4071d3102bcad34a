"""A streamed chunk's logprobs list the tokens that begin in it (no model)."""

from __future__ import annotations

from plookup.api.logprobs import Listing
from plookup.verify.logprobs import Logprobs, TokenLogprob


class Pieces:
    """A tokenizer of four tokens: "a", the two bytes of "é", "b" (no BOS)."""

    PIECES = [b"a", b"\xc3", b"\xa9", b"b"]

    def detokenize(self, tokens, prev_tokens=None):
        return b"".join(self.PIECES[t] for t in tokens)

    def token_bos(self):
        return -1


def test_a_streamed_chunk_lists_the_tokens_that_begin_in_it():
    """llama_cpp's stream sends a character split over tokens as one chunk: its chunk lists both
    tokens, at llama_cpp's offsets (a partial character counts for nothing)."""
    values = Logprobs(1, [TokenLogprob(t, -0.5 * t, ((t, -0.5 * t),)) for t in range(4)])
    listing = Listing(Pieces(), "prompt", values)
    chunks = [listing.after(text) for text in ("a", "é", "b")]
    assert [c["tokens"] for c in chunks] == [["a"], ["", ""], ["b"]]
    assert [c["text_offset"] for c in chunks] == [[6], [7, 7], [8]]
    assert [c["token_logprobs"] for c in chunks] == [[0.0], [-0.5, -1.0], [-1.5]]
    assert Listing(Pieces(), "prompt", values).whole(3)["tokens"] == ["a", "", ""]
