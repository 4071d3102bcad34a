"""A static corpus to draft from: the user's files, tokenized once, in a memory-mapped suffix array.

:class:`CorpusIndex` holds ``doc_0 SEP doc_1 SEP ... doc_k SEP`` (SEP = 2**31 - 1, as in
:mod:`plookup.index.memory`) and its suffix array (:mod:`plookup.native.suffix_array`): 8 bytes per
corpus token and 4 per file, on disk and in memory. ``lookup(context, max_draft)`` answers the
longest suffix of the context found in the corpus (never across two files) and its greedy
continuation: at each step the most frequent next token among the occurrences, with its count.

:func:`plookup.index.corpus_build.build_corpus` makes one from files, folders and globs (see
:mod:`plookup.index.corpus_files` for what is left out) with a model's tokenizer; ``save`` writes
it with that model's vocabulary fingerprint (:func:`plookup.index.memory.vocabulary_id`), and
``CorpusIndex.load`` maps it back, refusing with a ValueError naming the file one that is not a
corpus index, is truncated or corrupt (a CRC-32 over header and arrays), or belongs to another
vocabulary.

File layout (little-endian): a 24-byte prelude ``MAGIC, version u32, header bytes u32, header
CRC-32 u32, data CRC-32 u32``, the JSON header, zero padding to a multiple of 64, the text
(int32), the suffix array (int32).
"""

from __future__ import annotations

import json
import mmap
import struct
import zlib
from typing import Iterable, NamedTuple, Optional

import numpy as np

from ..files import write_atomically
from ..native import suffix_array as sa_kernels
from ..native.suffix_array_continuation import corpus_lookup
from .memory import SEP, _document
from .tokens import as_token_array

MAGIC = b"PLKCORPS"
VERSION = 1
PRELUDE = struct.Struct("<8sIIII")
ALIGN = 64
MAX_TOKEN = 2**24  # bounds the first-token table (vocabularies hold well under 2**24 ids)
DEFAULT_MAX_MATCH = 32
EMPTY_TOKENS = np.zeros(0, np.int32)
EMPTY_COUNTS = np.zeros(0, np.int64)
EMPTY_AGREE = np.zeros(0, np.float64)


class CorpusMatch(NamedTuple):
    """What the corpus says about a context (``length == 0``: nothing matched)."""

    length: int  # tokens of the context's longest suffix found in the corpus (<= max_match)
    count: int  # its occurrences
    tokens: np.ndarray  # int32: the greedy continuation, up to max_draft tokens
    counts: np.ndarray  # int64: occurrences of the match followed by tokens[: k + 1]
    agree: np.ndarray  # float64: counts[k] over the occurrences before token k (count for k = 0)


NO_MATCH = CorpusMatch(0, 0, EMPTY_TOKENS, EMPTY_COUNTS, EMPTY_AGREE)


class CorpusIndex:
    """Token documents in a suffix array, read only. Build with :meth:`from_documents` or
    :func:`plookup.index.corpus_build.build_corpus`, keep with :meth:`save`, map back with :meth:`load`."""

    def __init__(self, text: np.ndarray, suffixes: np.ndarray, vocabulary: str = "",
                 sources: Iterable[str] = (), path: Optional[str] = None):
        self._text, self._sa = text.view(), suffixes.view()
        self._text.flags.writeable = self._sa.flags.writeable = False
        self._starts = sa_kernels.first_token_starts(text)  # 4 bytes per id up to the largest
        self.vocabulary = vocabulary
        self.sources = list(sources)
        self.path = path
        self.documents = int(text.size - suffixes.size)

    @classmethod
    def from_documents(cls, documents: Iterable, vocabulary: str = "",
                       sources: Optional[Iterable[str]] = None) -> "CorpusIndex":
        """An index over `documents` (token sequences; empty ones are dropped) for `vocabulary`."""
        docs = [d for d in map(_document, documents) if d.size]
        if docs and max(int(d.max()) for d in docs) > MAX_TOKEN:
            raise ValueError(f"token ids above {MAX_TOKEN} are no vocabulary's")
        if docs:
            ends = np.cumsum([d.size for d in docs])
            text = np.insert(np.concatenate(docs), ends, np.int32(SEP)).astype(np.int32)
        else:
            text = EMPTY_TOKENS
        return cls(text, sa_kernels.build_suffix_array(text), vocabulary, sources or ())

    def __len__(self) -> int:
        """Corpus tokens (separators excluded)."""
        return int(self._sa.size)

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays: 8 per token and 4 per document, and 4 per vocabulary id."""
        return self._text.nbytes + self._sa.nbytes + self._starts.nbytes

    @property
    def text(self) -> np.ndarray:
        """The documents, each followed by SEP (read only)."""
        return self._text

    def lookup(self, context, max_draft: int = 16, max_match: int = DEFAULT_MAX_MATCH) -> CorpusMatch:
        """The longest suffix of `context` (at most `max_match` tokens; tokens outside
        [0, 2**31 - 2] match nothing) found in the corpus, and up to `max_draft` tokens of its
        most frequent continuation (see :mod:`plookup.native.suffix_array_continuation` for the exact rule)."""
        if self._sa.size == 0 or max_match < 1:
            return NO_MATCH
        context = np.asarray(context)
        if context.dtype != np.int32 and context.dtype != np.int64:  # (the kernels take both)
            context = as_token_array(context)
        elif context.ndim != 1:
            raise ValueError(f"tokens must be a 1-D sequence, got {context.ndim}-D")
        context = context[-max_match:]
        return CorpusMatch._make(corpus_lookup(  # (numba returns Python ints)
            self._text, self._sa, self._starts, context, int(max_match), int(max_draft)
        ))

    def warm_up(self) -> None:
        """Compile (or load from numba's cache) the lookup kernels now."""
        tiny = CorpusIndex.from_documents([[1, 2, 1, 3]])
        tiny.lookup([1], 2)

    # -- the file

    def save(self, path) -> None:
        """Write the index to `path` (replaced whole, owner-only: it holds users' text)."""
        header = json.dumps({
            "vocabulary": self.vocabulary, "text": int(self._text.size), "suffixes": int(self._sa.size),
            "documents": self.documents, "sources": self.sources,
        }).encode("utf-8")
        text, sa = self._text.astype("<i4", copy=False), self._sa.astype("<i4", copy=False)
        data_crc = zlib.crc32(sa, zlib.crc32(text))
        prelude = PRELUDE.pack(MAGIC, VERSION, len(header), zlib.crc32(header), data_crc)
        padding = b"\0" * (-(PRELUDE.size + len(header)) % ALIGN)

        def write(f):
            f.write(prelude + header + padding)
            f.write(memoryview(text).cast("B"))
            f.write(memoryview(sa).cast("B"))

        write_atomically(path, write)

    @classmethod
    def load(cls, path, vocabulary: Optional[str] = None, verify: bool = True) -> "CorpusIndex":
        """The index `save` wrote to `path`, memory-mapped. ValueError naming the file when it is
        not a corpus index, is truncated or corrupt (with `verify`, the arrays' CRC is checked:
        a read of the whole file), or (with `vocabulary`) was built for another vocabulary."""
        path = str(path)
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(0)
            head = f.read(PRELUDE.size)
            if len(head) < PRELUDE.size or not head.startswith(MAGIC):
                raise ValueError(f"{path}: not a plookup corpus index")
            _, version, header_size, header_crc, data_crc = PRELUDE.unpack(head)
            if version != VERSION:
                raise ValueError(f"{path}: corpus index format {version}, this plookup reads {VERSION}")
            raw = f.read(header_size)
            if len(raw) < header_size:
                raise ValueError(f"{path}: truncated ({size} bytes, the header alone needs more)")
            if zlib.crc32(raw) != header_crc:
                raise ValueError(f"{path}: corrupt corpus index (header checksum mismatch)")
            header = _parse_header(path, raw)
            if vocabulary is not None and header["vocabulary"] != vocabulary:
                raise ValueError(f"{path}: built for another model's vocabulary")
            start = PRELUDE.size + header_size
            start += -start % ALIGN
            n_text, n_sa = header["text"], header["suffixes"]
            expected = start + 4 * (n_text + n_sa)
            if size != expected:
                problem = "truncated" if size < expected else "corrupt corpus index"
                raise ValueError(f"{path}: {problem} ({size} bytes, its header says {expected})")
            if n_text == 0:
                text, sa, crc = EMPTY_TOKENS, EMPTY_TOKENS, zlib.crc32(b"")
            else:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                text = np.frombuffer(mapped, "<i4", n_text, start)
                sa = np.frombuffer(mapped, "<i4", n_sa, start + 4 * n_text)
                crc = zlib.crc32(sa, zlib.crc32(text)) if verify else data_crc
        if crc != data_crc:
            raise ValueError(f"{path}: corrupt corpus index (data checksum mismatch)")
        text, sa = text.astype(np.int32, copy=False), sa.astype(np.int32, copy=False)  # native order
        documents = n_text - n_sa
        if n_text and (text[-1] != SEP or (n_sa and (int(sa.min()) < 0 or int(sa.max()) >= n_text))
                       or int(text.min()) < 0 or int(text[text != SEP].max(initial=0)) > MAX_TOKEN):
            raise ValueError(f"{path}: corrupt corpus index (arrays out of range)")
        if documents != header["documents"] or (verify and int(np.count_nonzero(text == SEP)) != documents):
            raise ValueError(f"{path}: corrupt corpus index (document count does not add up)")
        return cls(text, sa, header["vocabulary"], header["sources"], path)


def open_corpus(corpus, vocabulary: str) -> CorpusIndex:
    """`corpus` (a :class:`CorpusIndex` or the path of a saved one) for a model of `vocabulary`
    (:func:`plookup.index.memory.vocabulary_id`); ValueError naming the file as :meth:`CorpusIndex.load`
    raises it, or when an index in memory was built for another vocabulary."""
    if isinstance(corpus, CorpusIndex):
        if corpus.vocabulary and corpus.vocabulary != vocabulary:
            raise ValueError(f"{corpus.path or 'corpus index'}: built for another model's vocabulary")
        return corpus
    return CorpusIndex.load(corpus, vocabulary)


def _parse_header(path: str, raw: bytes) -> dict:
    try:
        header = json.loads(raw.decode("utf-8"))
        ok = (isinstance(header, dict) and isinstance(header.get("vocabulary"), str)
              and isinstance(header.get("sources"), list)
              and all(isinstance(header.get(k), int) and header[k] >= 0 for k in ("text", "suffixes", "documents"))
              and header["suffixes"] <= header["text"])
    except (UnicodeDecodeError, json.JSONDecodeError):
        ok = False
    if not ok:
        raise ValueError(f"{path}: corrupt corpus index (unreadable header)")
    return header
