"""Cross-request memory: a bounded index over previous requests, consulted beside a request's own.

Agent loops and repeated edits resend near-identical text, and an answer often repeats an earlier
answer that is not in the new request's prompt. :class:`GlobalMemory` keeps finished requests
(prompt + output, one *document* each) in FIFO order in ONE :class:`SuffixIndex` over

    doc_0 SEP doc_1 SEP ... doc_k SEP        (SEP = 2**31 - 1, never a vocabulary id)

and a :class:`MemoryCursor` per request streams that request's tokens against it: the longest
suffix of the request that occurs in memory, and what followed its most recent occurrence.

- Separators never match: a cursor treats SEP in its stream as "matches nothing", so a matched
  string never spans two documents, and drafts are cut at the first SEP. Because the text ends in
  SEP, no matched string ends at the last indexed position, so every occurrence has a next token
  and the agreement statistic is exact (a document end counts as one more, disagreeing,
  continuation).
- Bound: ``len(memory)`` (tokens held, separators excluded) stays <= ``max_tokens``. A document
  longer than that keeps only its last ``max_tokens`` tokens.
- Eviction: when an add goes over the bound, the oldest documents are dropped until at most
  ``KEEP_FRACTION * max_tokens`` tokens remain (or only the newest document), and the index is
  rebuilt from the rest. A rebuild costs O(tokens kept), and between two rebuilds at least
  ``(1 - KEEP_FRACTION) * max_tokens`` tokens are added (or the kept text is the one new document,
  paid for by its own add), so adding is O(1) amortised: at most 1 + KEEP/(1 - KEEP) = 4 index
  appends per added token.
- Memory: the index sized exactly at each rebuild and doubling in between holds at most
  ``280 * (max_tokens + documents) + 1024`` bytes (see :mod:`plookup.native.suffix_automaton`),
  plus 8 bytes per document.
- A cursor's match is valid only for the text it was computed on: every ``add`` invalidates the
  open cursors (they report no match until their next ``start``). One lock serialises adds and
  cursor calls, so a memory can be shared by several drafters and threads.

A request's Predicted Output is matched the same way (:func:`prediction_cursor`): a memory of its
own holding the prediction as its one document, and a cursor streaming the request's history
against it, a draft source beside the request's own match (the history is not the prediction's).
"""

from __future__ import annotations

import collections
import hashlib
import threading
import zipfile
from typing import Optional

import numpy as np

from ..files import write_atomically
from .suffix import SuffixIndex
from .tokens import as_token_array

SEP = 2**31 - 1
KEEP_FRACTION = 0.75
DEFAULT_MEMORY_TOKENS = 1 << 20
EMPTY_TOKENS = np.zeros(0, dtype=np.int32)
EMPTY_AGREE = np.zeros(0, dtype=np.float64)


def _document(tokens) -> np.ndarray:
    array = as_token_array(tokens)
    bad = np.flatnonzero((array < 0) | (array >= SEP))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"token {array[i]} at index {i} is outside [0, 2**31 - 2]")
    return array.astype(np.int32)


class GlobalMemory:
    """Previous requests' tokens, at most `max_tokens` of them, oldest evicted first."""

    def __init__(self, max_tokens: int = DEFAULT_MEMORY_TOKENS):
        if not isinstance(max_tokens, (int, np.integer)) or max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        self.max_tokens = int(max_tokens)
        self._lengths: collections.deque[int] = collections.deque()  # per document, oldest first
        self._held = 0
        self._index = SuffixIndex(capacity=min(1024, self.max_tokens + 1))
        self._version = 0  # bumped by every add; cursors compare it
        self._lock = threading.RLock()

    def __len__(self) -> int:
        """Tokens held (separators excluded); always <= max_tokens."""
        return self._held

    @property
    def documents(self) -> int:
        return len(self._lengths)

    @property
    def nbytes(self) -> int:
        return self._index.nbytes + 8 * len(self._lengths)

    def add(self, tokens) -> None:
        """Remember a finished request (prompt + output). Empty documents are ignored."""
        doc = _document(tokens)[-self.max_tokens :]
        if doc.size == 0:
            return
        with self._lock:
            self._version += 1
            self._lengths.append(doc.size)
            self._held += doc.size
            if self._held <= self.max_tokens:
                self._index.extend(np.append(doc, np.int32(SEP)))
                return
            text = np.append(self._index.tokens, doc)
            text = np.append(text, np.int32(SEP))
            dropped = 0
            while self._held > KEEP_FRACTION * self.max_tokens and len(self._lengths) > 1:
                length = self._lengths.popleft()
                self._held -= length
                dropped += length + 1
            self._build(text[dropped:])

    def _build(self, text: np.ndarray) -> None:
        index = SuffixIndex(capacity=max(1, text.size))
        index.extend(text)
        self._index = index

    def documents_tokens(self) -> list[np.ndarray]:
        """The documents held, oldest first (copies)."""
        with self._lock:
            text, out, start = self._index.tokens, [], 0
            for length in self._lengths:
                out.append(np.array(text[start : start + length]))
                start += length + 1
            return out

    def save(self, path, vocabulary: str = "") -> None:
        """Write the documents, the bound and the `vocabulary` they belong to (see
        :func:`vocabulary_id`) to `path`: a .npz archive, replaced whole, readable by its owner
        only (it holds users' text)."""
        with self._lock:
            docs = self.documents_tokens()
            tokens = np.concatenate(docs) if docs else EMPTY_TOKENS
            lengths = np.array(self._lengths, dtype=np.int64)
        write_atomically(path, lambda f: np.savez(
            f, max_tokens=np.int64(self.max_tokens), lengths=lengths, tokens=tokens, vocabulary=np.str_(vocabulary),
        ))

    @classmethod
    def load(cls, path, vocabulary: Optional[str] = None, max_tokens: Optional[int] = None) -> "GlobalMemory":
        """A memory holding what `save` wrote (the index is rebuilt); ValueError, naming the file,
        when it is not such an archive, its contents do not add up, or (with `vocabulary`) its
        tokens belong to another vocabulary. ``max_tokens`` overrides the stored bound (the
        oldest documents beyond it are dropped)."""
        try:
            with np.load(path, allow_pickle=False) as data:
                stored, lengths, tokens = int(data["max_tokens"]), data["lengths"], data["tokens"]
                saved_for = str(data["vocabulary"]) if "vocabulary" in data.files else ""
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
            if isinstance(e, FileNotFoundError):
                raise
            raise ValueError(f"{path}: not a plookup memory file ({type(e).__name__}: {e})") from None
        if vocabulary is not None and saved_for != vocabulary:
            raise ValueError(f"{path}: its tokens belong to another model's vocabulary")
        if lengths.ndim != 1 or np.any(lengths < 1) or int(lengths.sum()) != tokens.size:
            raise ValueError(f"{path}: document lengths do not add up to the tokens stored")
        if tokens.size > stored:
            raise ValueError(f"{path}: {tokens.size} tokens stored, over max_tokens={stored}")
        memory = cls(stored if max_tokens is None else max_tokens)
        tokens = _document(tokens)
        sizes, dropped, held = lengths.tolist(), 0, int(tokens.size)
        while held > memory.max_tokens:  # FIFO: a smaller bound drops the oldest documents
            held -= sizes[dropped]
            dropped += 1
        memory._lengths.extend(sizes[dropped:])
        kept = tokens[tokens.size - held :]
        ends = np.cumsum(np.array(sizes[dropped:], dtype=np.int64))
        memory._build(np.insert(kept, ends, np.int32(SEP)).astype(np.int32))
        memory._held = int(kept.size)
        return memory

    def cursor(self) -> "MemoryCursor":
        """A streaming match of one request's tokens against this memory."""
        return MemoryCursor(self)


class MemoryCursor:
    """One request's tokens matched against a :class:`GlobalMemory`, O(1) amortised per token.

    ``start()`` begins a request (empty match), ``feed(tokens)`` appends its tokens,
    ``match_length()`` is the longest suffix of the request that occurs in memory and
    ``continuation(max_len)`` what followed its most recent occurrence there. An ``add`` to the
    memory after ``start()`` makes the cursor stale: no match until the next ``start()``.
    """

    def __init__(self, memory: GlobalMemory):
        self.memory = memory
        self.start()

    def start(self) -> None:
        self._state, self._length = 0, 0
        self._version = self.memory._version
        self._fed = 0  # tokens of the history fed since (follow)

    @property
    def stale(self) -> bool:
        return self._version != self.memory._version

    def feed(self, tokens) -> None:
        tokens = as_token_array(tokens)
        if tokens.size and (tokens == SEP).any():
            tokens = np.where(tokens == SEP, -1, tokens)  # -1 matches nothing
        with self.memory._lock:
            if not self.stale:
                self._state, self._length = self.memory._index.feed(
                    tokens, self._state, self._length
                )

    def follow(self, history: np.ndarray) -> int:
        """Catch up with `history`, a request's tokens (the same growing history since
        :meth:`start`): feed those not fed yet, one kernel call, lazily at each proposal; start
        over where the memory changed or the history is shorter than what was fed (a history
        forgotten and begun anew must be told by :meth:`start`). Returns :meth:`match_length`."""
        if self.stale or self._fed > len(history):
            self.start()
        self.feed(history[self._fed :])
        self._fed = len(history)
        return self.match_length()

    def match_length(self) -> int:
        return 0 if self.stale else self._length

    def continuation(self, max_len: int) -> tuple[np.ndarray, np.ndarray]:
        """(draft, agree) as for SuffixIndex.continuation, cut at the end of the document."""
        with self.memory._lock:
            if self.stale or self._length < 1:
                return EMPTY_TOKENS, EMPTY_AGREE
            draft, agree = self.memory._index.state_continuation(
                self._state, self._length, max_len
            )
        cut = np.flatnonzero(draft == SEP)
        if cut.size:
            draft, agree = draft[: cut[0]], agree[: cut[0]]
        return draft, agree


def prediction_cursor(prediction) -> Optional[MemoryCursor]:
    """A request's Predicted Output as a draft source: a memory holding its tokens alone, and a
    cursor to stream the request's history against them (None for no prediction)."""
    if len(prediction) == 0:
        return None
    memory = GlobalMemory(len(prediction))
    memory.add(prediction)
    return memory.cursor()


def vocabulary_id(llm) -> str:
    """A fingerprint of a model's vocabulary (every token's text, in order): a memory's tokens mean
    something only to models that share it."""
    digest = hashlib.sha256()
    for token in range(llm.n_vocab()):
        digest.update(llm._model.token_get_text(token).encode("utf-8", "surrogatepass") + b"\0")
    return f"{llm.n_vocab()}:{digest.hexdigest()[:32]}"
