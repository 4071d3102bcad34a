"""llama_cpp's ``logprobs`` structures, from the values the verify rows gave the emitted tokens.

llama_cpp.Llama fills ``choices[0]["logprobs"]`` of a completion (``{"tokens", "text_offset",
"token_logprobs", "top_logprobs"}``) from its ``logits_all`` rows and refuses ``logprobs`` without
them. plookup.Llama has llama_cpp's completion code run without ``logprobs`` and fills the same
structure from :class:`plookup.verify.logprobs.Logprobs`, with llama_cpp's wording of each field:
a token's string is its detokenized piece, its ``text_offset`` is ``len(prompt)`` (characters, or
a token prompt's length) plus the characters of the completion before it, its ``top_logprobs`` map
the top tokens' strings to their values and then the token's own. Chat completions get OpenAI's
``{"content": [...]}`` from llama_cpp's own chat handlers, which convert this structure.

Differences from llama_cpp, where it has none to give or gives it wrong:
- the prompt's tokens (``echo=True``) are refused: plookup computes no row for them;
- a chat entry's ``bytes`` (and its alternatives') are the token's UTF-8 bytes, a list of ints as
  OpenAI and llama-server give them, where llama_cpp's handlers leave None;
- a streamed chunk carries the tokens that begin in its text (one a chunk on most text, as
  llama_cpp streams them), so a character split over several tokens comes whole with all of them,
  where llama_cpp's chunks lose its bytes; the closing chunk carries none, as llama_cpp's.
"""

from __future__ import annotations

from typing import Iterator, Optional

from ..verify.logprobs import Logprobs, TokenLogprob


def check_logprobs(logprobs, echo: bool) -> None:
    """A ValueError for what plookup.Llama does not give (llama_cpp's own checks come later)."""
    if logprobs is None:
        return
    if isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0:
        raise ValueError(f"logprobs must be an integer >= 0, the alternatives given per token; got {logprobs!r}")
    if echo:
        raise ValueError("logprobs with echo=True: plookup gives the logprobs of generated tokens only, "
                         "not the prompt's (it computes no row for the prompt's tokens); ask without echo")


class Listing:
    """The completion's tokens listed in llama_cpp's structure, from the first on, as they come:
    all at once (:meth:`whole`) or chunk by chunk of a stream (:meth:`after`)."""

    def __init__(self, llm, prompt, logprobs: Logprobs):
        self._llm, self._emitted = llm, logprobs.emitted  # appended to while the generation runs
        self._base = len(prompt)  # llama_cpp's text_offset counts from len(prompt), whatever it is
        self._tokens: list[int] = []  # the tokens listed
        self._text = b""  # their text
        self._chars = 0  # its characters
        self._streamed = 0  # characters of the stream's chunks so far

    def whole(self, count: int) -> dict:
        """The first `count` tokens: a whole completion of `count` tokens (llama_cpp lists every
        completion token, those past a stop sequence's cut too)."""
        return self._list(lambda _: len(self._tokens) < count)

    def after(self, text: str) -> Optional[dict]:
        """After a streamed chunk of `text`: the tokens that begin in it (None: none does)."""
        self._streamed += len(text)
        listing = self._list(lambda start: start < self._streamed)
        return listing if listing["tokens"] else None

    def _list(self, more) -> dict:
        """The next tokens while `more(characters before the token)`."""
        listing: dict = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        while len(self._tokens) < len(self._emitted) and more(self._chars):
            self._add(listing, self._emitted[len(self._tokens)])
        return listing

    def _add(self, listing: dict, value: TokenLogprob) -> None:
        llm, start = self._llm, self._chars
        piece = llm.detokenize([value.token], prev_tokens=self._tokens)
        string = piece.decode("utf-8", errors="ignore")
        top = {llm.detokenize([i], prev_tokens=self._tokens).decode("utf-8", errors="ignore"): v for i, v in value.top}
        self._tokens.append(value.token)
        self._text += piece
        # (a character split over tokens counts once whole, as llama_cpp's offsets count it)
        self._chars = len(self._text.decode("utf-8", errors="ignore"))
        if value.token == llm.token_bos():
            return  # llama_cpp lists no BOS
        top[string] = value.logprob
        listing["tokens"].append(string)
        listing["text_offset"].append(self._base + start)
        listing["token_logprobs"].append(value.logprob)
        listing["top_logprobs"].append(top)


def with_logprobs(llm, prompt, logprobs: Logprobs, result):
    """llama_cpp's completion `result` (a dict, or a stream of chunks) with its logprobs."""
    listing = Listing(llm, prompt, logprobs)
    if isinstance(result, dict):
        result["choices"][0]["logprobs"] = listing.whole(result["usage"]["completion_tokens"])
        return result
    return _streamed(listing, result)


def _streamed(listing: Listing, chunks: Iterator[dict]) -> Iterator[dict]:
    try:
        for chunk in chunks:
            choice = chunk["choices"][0]
            if choice["finish_reason"] is None:
                choice["logprobs"] = listing.after(choice["text"])
            yield chunk
    finally:
        chunks.close()  # now, not when collected: closing the generation frees its slot


def with_chat_bytes(result):
    """A chat completion `result` (a dict, or a stream of chunks) whose logprobs entries carry
    ``bytes``: the token's text as UTF-8 bytes, a list of ints."""
    if isinstance(result, dict):
        _fill_bytes(result)
        return result
    return _chunks_with_bytes(result)


def _chunks_with_bytes(chunks: Iterator[dict]) -> Iterator[dict]:
    try:
        for chunk in chunks:
            _fill_bytes(chunk)
            yield chunk
    finally:
        chunks.close()


def _fill_bytes(answer: dict) -> None:
    for choice in answer.get("choices", ()):
        for entry in (choice.get("logprobs") or {}).get("content") or ():
            for one in (entry, *entry.get("top_logprobs", ())):
                if one.get("bytes") is None:
                    one["bytes"] = list(one["token"].encode("utf-8"))
